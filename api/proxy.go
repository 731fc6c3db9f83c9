package api

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// handleProxy serves /sandboxes/{id}/proxy/{port}/...: port 44772 is the
// execd API (served by the agent, with uploads and downloads done through
// Docker's archive API), any other port is forwarded by the agent to that
// port inside the sandbox. Nothing is ever published on the host.
func (s *Server) handleProxy(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	id := vars["id"]
	port, err := strconv.Atoi(vars["port"])
	if err != nil || port < 1 || port > 65535 {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidPort, "port must be between 1 and 65535")
		return
	}
	if !s.authorizeProxy(w, r, id) {
		return
	}
	rest := proxyRest(r.URL.EscapedPath(), vars["port"])
	if port == lifecycle.ExecdPort {
		switch {
		case r.Method == http.MethodPost && rest == "/files/upload":
			s.handleUpload(w, r, id)
			return
		case r.Method == http.MethodGet && rest == "/files/download":
			s.handleDownload(w, r, id)
			return
		}
	}
	transport, err := s.mgr.Transport(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	target := rest
	if port != lifecycle.ExecdPort {
		target = "/proxy/" + vars["port"] + rest
	}
	if target == "" {
		target = "/"
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			u := pr.Out.URL
			u.Scheme, u.Host = "http", "sandbox"
			u.RawPath = target
			u.Path, _ = url.PathUnescape(target)
			pr.Out.Host = "127.0.0.1:" + vars["port"]
			// The caller's credentials never reach the sandbox.
			for _, h := range []string{"Authorization", "Cookie", headerAPIKey, lifecycle.TokenHeader} {
				pr.Out.Header.Del(h)
			}
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Warn("proxy to sandbox failed", "request_id", lifecycle.RequestID(r.Context()), "sandbox_id", id, "port", port, "err", err)
			writeError(w, r, http.StatusBadGateway, lifecycle.CodeGeneral, fmt.Sprintf("Could not reach port %d in sandbox %s: %v", port, id, err))
		},
	}
	// Without full duplex, net/http closes the request body as soon as the
	// response starts; the transport's last read of it then fails, it
	// drops the stream to the agent, and the agent kills the command as
	// if its client had gone.
	_ = http.NewResponseController(w).EnableFullDuplex()
	start := time.Now()
	rp.ServeHTTP(w, r)
	if port == lifecycle.ExecdPort && rest == "/command" {
		s.mgr.Metrics().CommandSeconds.Observe(time.Since(start))
	}
}

// proxyRest returns the escaped path after /proxy/{port}.
func proxyRest(escaped, port string) string {
	marker := "/proxy/" + port
	i := strings.Index(escaped, marker)
	if i < 0 {
		return ""
	}
	return escaped[i+len(marker):]
}

// authorizeProxy accepts the sandbox's own token or an API key, from
// headers only (never the query string or cookies).
func (s *Server) authorizeProxy(w http.ResponseWriter, r *http.Request, id string) bool {
	if len(s.keys) == 0 {
		return true
	}
	tok := r.Header.Get(lifecycle.TokenHeader)
	key := r.Header.Get(headerAPIKey)
	if s.mgr.CheckToken(id, tok) || (tok != "" && s.validKey(tok)) || (key != "" && s.validKey(key)) {
		return true
	}
	if tok == "" && key == "" {
		writeError(w, r, http.StatusUnauthorized, "MISSING_API_KEY", "Authentication credentials are missing. Send the endpoint's headers ("+lifecycle.TokenHeader+") or an OPEN-SANDBOX-API-KEY header.")
		return false
	}
	writeError(w, r, http.StatusUnauthorized, "INVALID_API_KEY", "Authentication credentials are invalid for this sandbox.")
	return false
}

// handleDownload streams a file out of the sandbox, honouring one Range.
func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request, id string) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeMissingQuery, "query parameter path is required")
		return
	}
	f, err := s.mgr.OpenFile(r.Context(), id, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.Name}))
	h.Set("Accept-Ranges", "bytes")
	if !f.ModTime.IsZero() {
		h.Set("Last-Modified", f.ModTime.UTC().Format(http.TimeFormat))
	}
	start, length, partial, ok := parseRange(r.Header.Get("Range"), f.Size)
	if !ok {
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", f.Size))
		writeError(w, r, http.StatusRequestedRangeNotSatisfiable, lifecycle.CodeInvalidFile, "requested range not satisfiable")
		return
	}
	var body io.Reader = f
	status := http.StatusOK
	if partial {
		if _, err := io.CopyN(io.Discard, f, start); err != nil {
			s.fail(w, r, err)
			return
		}
		body = io.LimitReader(f, length)
		status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, start+length-1, f.Size))
	}
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, body)
	}
}

// parseRange interprets the first range of a Range header against size.
// It returns partial=false for no (or an ignorable) header, ok=false when
// the range cannot be satisfied.
func parseRange(h string, size int64) (start, length int64, partial, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if h == "" || !found {
		return 0, size, false, true
	}
	spec, _, _ = strings.Cut(spec, ",")
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false, false
	}
	switch {
	case a == "": // suffix: the last b bytes
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 || size == 0 {
			return 0, 0, false, false
		}
		n = min(n, size)
		return size - n, n, true, true
	default:
		first, err := strconv.ParseInt(a, 10, 64)
		if err != nil || first < 0 || first >= size {
			return 0, 0, false, false
		}
		last := size - 1
		if b != "" {
			l, err := strconv.ParseInt(b, 10, 64)
			if err != nil || l < first {
				return 0, 0, false, false
			}
			last = min(l, size-1)
		}
		return first, last - first + 1, true, true
	}
}
