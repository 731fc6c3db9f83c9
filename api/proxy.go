package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// handleProxy serves /sandboxes/{id}/proxy/{port}/...: port 44772 is the
// execd API, served by the agent (uploads and downloads of a stopped
// sandbox by Docker's archive API), any other port is forwarded by the
// agent to that port inside the sandbox. Nothing is ever published on the
// host.
func (s *Server) handleProxy(w http.ResponseWriter, r *http.Request, id, portText string) {
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		s.refuse(w, r, http.StatusBadRequest, lifecycle.CodeInvalidPort, "port must be between 1 and 65535")
		return
	}
	cred, ok := s.authorizeProxy(w, r, id)
	if !ok {
		return
	}
	release, ok := s.admitProxied(w, r, id, cred)
	if !ok {
		return
	}
	defer release()
	rest := proxyRest(r.URL.EscapedPath(), portText)
	route := fileRouteOf(r, port, rest)
	if port == lifecycle.ExecdPort && r.ContentLength != 0 && !route.form() && !requireJSON(w, r) {
		return // execd takes JSON bodies only, but for uploads
	}
	if port == lifecycle.ExecdPort && r.ContentLength > 0 && r.ContentLength <= maxHeldBody && !route.form() {
		// Read whole, the body goes to the agent with the headers in one
		// write (a body still streaming from the client would be sent in
		// a frame of its own).
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			writeError(w, r, http.StatusBadRequest, codeInvalidRequestBody, "could not read the request body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	transport, err := s.proxyTransport(w, r, id, route)
	if transport == nil {
		if err != nil {
			s.fail(w, r, err)
		}
		return
	}
	target := rest
	if port != lifecycle.ExecdPort {
		target = "/proxy/" + portText + rest
		transport = readTimeout(transport, s.cfg.Server.ProxyReadTimeout.Duration)
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
			pr.Out.Host = "127.0.0.1:" + portText
			// The caller's credentials never reach the sandbox.
			for _, h := range []string{"Authorization", "Cookie", headerAPIKey, lifecycle.TokenHeader, lifecycle.EgressAuthHeader} {
				pr.Out.Header.Del(h)
			}
		},
		Transport:     transport,
		FlushInterval: -1,
		BufferPool:    proxyBuffers{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.proxyFailed(w, r, id, port, err)
		},
		ModifyResponse: func(res *http.Response) error {
			makeInert(res.Header)
			return nil
		},
	}
	// Without full duplex, net/http closes the request body as soon as the
	// response starts; the transport's last read of it then fails, it
	// drops the stream to the agent, and the agent kills the command as
	// if its client had gone.
	_ = http.NewResponseController(w).EnableFullDuplex()
	start := time.Now()
	pw := &proxyWriter{ResponseWriter: w, length: -1}
	rp.ServeHTTP(pw, r)
	pw.finish()
	if port == lifecycle.ExecdPort && rest == "/command" {
		s.metrics.CommandSeconds.Observe(time.Since(start))
	}
}

// proxyBuffers lends ReverseProxy its copy buffers: without a pool it
// allocates 32 KiB per request, the largest allocation (and most of the
// collector's work) of a command's round trip.
type proxyBuffers struct{}

var proxyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (proxyBuffers) Get() []byte  { return *proxyBufferPool.Get().(*[]byte) }
func (proxyBuffers) Put(b []byte) { proxyBufferPool.Put(&b) }

// proxyFailed answers a request that could not be relayed to the sandbox.
func (s *Server) proxyFailed(w http.ResponseWriter, r *http.Request, id string, port int, err error) {
	s.log.Warn("proxy to sandbox failed", "request_id", lifecycle.RequestID(r.Context()), "sandbox_id", id, "port", port, "err", err)
	status, code, msg := backendFailure(err)
	writeError(w, r, status, code, fmt.Sprintf("%s port %d of sandbox %s: %v", msg, port, id, err))
}

// MaxHeaderBytes bounds the headers of a request (the server's
// MaxHeaderBytes; Go's default is 1 MiB): a token holder's requests in
// flight hold theirs while sandboxd relays them. Past it the answer is 431.
const MaxHeaderBytes = 64 << 10

// maxHeldBody is the largest execd request body read whole before it is
// forwarded: JSON requests, commands with their scripts.
const maxHeldBody = 64 << 10

// codeInvalidRequestBody is execd's code for a body it cannot read.
const codeInvalidRequestBody = "INVALID_REQUEST_BODY"

// proxyWriter skips the flushes of a response of known length before its
// body starts and after it is written whole: the handler's return sends it,
// in one write with its headers. (ReverseProxy flushes the headers at once
// and an event stream after every write: three writes to the client for a
// quick command.) Streams of unknown length flush as ReverseProxy says.
type proxyWriter struct {
	http.ResponseWriter
	length  int64 // the Content-Length, -1 if unknown
	written int64
}

func (w *proxyWriter) WriteHeader(code int) {
	w.length = -1
	if n, err := strconv.ParseInt(w.Header().Get("Content-Length"), 10, 64); err == nil {
		w.length = n
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *proxyWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.written += int64(n)
	return n, err
}

func (w *proxyWriter) FlushError() error {
	if w.length >= 0 && w.written == 0 || w.whole() {
		return nil
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// whole reports whether a response of known length is all written.
func (w *proxyWriter) whole() bool { return w.length >= 0 && w.written >= w.length }

// finish sends a response of known length that is whole now: the
// handler's return would send it only after the access log's write.
func (w *proxyWriter) finish() {
	if w.whole() {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer's other methods.
func (w *proxyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// proxyRoute parses /sandboxes/{id}/proxy/{port}[/...] (also under /v1)
// from the escaped path, as the router's pattern
// /sandboxes/{id}/proxy/{port:[0-9]+}[/{rest:.*}] would, without its
// regular expressions: every request into a sandbox takes this way.
func proxyRoute(escaped string) (id, port string, ok bool) {
	p, ok := strings.CutPrefix(strings.TrimPrefix(escaped, "/v1"), "/sandboxes/")
	if !ok {
		return "", "", false
	}
	id, p, ok = strings.Cut(p, "/")
	if !ok || id == "" {
		return "", "", false
	}
	if p, ok = strings.CutPrefix(p, "proxy/"); !ok {
		return "", "", false
	}
	port, _, _ = strings.Cut(p, "/")
	if port == "" || strings.Trim(port, "0123456789") != "" {
		return "", "", false
	}
	return id, port, true
}

// backendFailure names a failed proxied request as upstream does: the
// stream to the agent could not be opened, the transport timed out, or the
// answer was broken (reset, malformed, headers past the limit).
func backendFailure(err error) (status int, code, msg string) {
	var op *net.OpError
	var ne net.Error
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		return http.StatusBadGateway, codeBackendConnectionFailed, "Could not connect to the backend sandbox:"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return http.StatusGatewayTimeout, codeBackendTimeout, "Timed out waiting for"
	}
	return http.StatusBadGateway, codeBackendResponseFailed, "Broken response from"
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
// headers only (never the query string or cookies). It returns the name of
// the credential used, for the cap on requests in flight per credential.
func (s *Server) authorizeProxy(w http.ResponseWriter, r *http.Request, id string) (string, bool) {
	if len(s.keys) == 0 {
		return "anonymous", true
	}
	tok := r.Header.Get(lifecycle.TokenHeader)
	key := r.Header.Get(headerAPIKey)
	if s.proxy.CheckToken(id, tok) {
		return "token:" + id, true
	}
	for _, k := range []string{tok, key} {
		if i := s.keyIndex(k); i >= 0 {
			return "key:" + strconv.Itoa(i), true
		}
	}
	if tok == "" && key == "" {
		writeError(w, r, http.StatusUnauthorized, "MISSING_API_KEY", "Authentication credentials are missing. Send the endpoint's headers ("+lifecycle.TokenHeader+") or an OPEN-SANDBOX-API-KEY header.")
		return "", false
	}
	writeError(w, r, http.StatusUnauthorized, "INVALID_API_KEY", "Authentication credentials are invalid for this sandbox.")
	return "", false
}
