package api

import (
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// fileRoute is what a proxied request is to the file routes of the execd
// API, which sandboxd serves itself or hands to the agent; handleProxy
// decides it once.
type fileRoute int

const (
	routeNone     fileRoute = iota
	routeForm               // /files/upload with another method than POST: its body is not JSON either
	routeUpload             // POST /files/upload
	routeDownload           // GET or HEAD /files/download
)

// fileRouteOf is the file route of a request to path rest of port.
func fileRouteOf(r *http.Request, port int, rest string) fileRoute {
	switch {
	case port != lifecycle.ExecdPort:
		return routeNone
	case rest == "/files/upload" && r.Method == http.MethodPost:
		return routeUpload
	case rest == "/files/upload":
		return routeForm
	case rest == "/files/download" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		return routeDownload
	}
	return routeNone
}

// form reports whether the route's body is an upload form, not JSON.
func (f fileRoute) form() bool { return f == routeUpload || f == routeForm }

// proxyTransport returns the agent transport a proxied request goes
// through. Uploads and downloads are served here: of a sandbox that runs
// no process (nil transport from FilesTransport) with Docker's archive
// API, of a running one through its agent (an upload's form is read here
// when the transport writes files one by one; otherwise it is proxied to
// the agent as it is). Then, or on an error, it returns nil having
// answered (or with the error).
func (s *Server) proxyTransport(w http.ResponseWriter, r *http.Request, id string, route fileRoute) (http.RoundTripper, error) {
	upload, download := route == routeUpload, route == routeDownload
	if !upload && !download {
		return s.proxy.Transport(r.Context(), id)
	}
	rt, err := s.files.FilesTransport(r.Context(), id)
	fw := s.files.FileWriter(rt)
	switch {
	case err != nil:
		return nil, err
	case rt != nil && download:
		s.proxyDownload(w, r, id, rt)
	case upload && (rt == nil || fw != nil):
		s.handleUpload(w, r, id, fw)
	case rt != nil:
		// The agent reads the form itself.
		return rt, nil
	default:
		s.handleDownload(w, r, id)
	}
	return nil, nil
}

// handleDownload streams a whole file out of a stopped sandbox. Byte
// ranges and line mode need seeking and reading inside the sandbox, which
// only its agent does: the archive API would make dockerd read everything
// before the range.
func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeMissingQuery, "query parameter path is required")
		return
	}
	if r.Header.Get("Range") != "" || q.Get("offset") != "" || q.Get("limit") != "" {
		s.refuse(w, r, http.StatusConflict, lifecycle.CodeNotRunning, "sandbox "+id+" is not running: byte ranges and line mode (offset, limit) are served only while it runs; download the whole file")
		return
	}
	f, err := s.files.OpenFile(r.Context(), id, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	h := w.Header()
	makeInert(h)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.Name}))
	if !f.ModTime.IsZero() {
		h.Set("Last-Modified", f.ModTime.UTC().Format(http.TimeFormat))
	}
	h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, f)
	}
}

// handleUpload writes an execd upload into a sandbox through its agent's
// file writer fw, or into a stopped sandbox (fw nil).
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request, id string, fw runtime.FileWriter) {
	if err := transfer.Upload(r.Context(), r, s.files.UploadSink(id, fw)); err != nil {
		s.fail(w, r, lifecycle.UploadError(err))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// proxyDownload relays a download from a running sandbox's agent. Not
// through httputil.ReverseProxy, which copies every body through a buffer
// of its own: copied with io.Copy, a body the agent's transport has as an
// open file (runtime/agent bulk.go) is sent by the kernel (sendfile)
// straight from the file to the client's socket. The agent needs the query
// and the Range header only; the caller's credentials never reach it.
func (s *Server) proxyDownload(w http.ResponseWriter, r *http.Request, id string, rt http.RoundTripper) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://sandbox/files/download?"+r.URL.RawQuery, nil)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidFile, err.Error())
		return
	}
	out.Host = "127.0.0.1:" + strconv.Itoa(lifecycle.ExecdPort)
	if v := r.Header.Get("Range"); v != "" {
		out.Header.Set("Range", v)
	}
	resp, err := rt.RoundTrip(out)
	if err != nil {
		s.proxyFailed(w, r, id, lifecycle.ExecdPort, err)
		return
	}
	defer resp.Body.Close()
	makeInert(resp.Header)
	h := w.Header()
	for k, v := range resp.Header {
		if !hopByHop[strings.ToLower(k)] {
			h[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// hopByHop are the headers of one connection (RFC 9110 7.6.1), which a
// proxy does not pass on.
var hopByHop = map[string]bool{"connection": true, "proxy-connection": true, "keep-alive": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true}
