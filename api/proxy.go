package api

import (
	"context"
	"errors"
	"fmt"
	"net"
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
// execd API, served by the agent (uploads and downloads of a stopped
// sandbox by Docker's archive API), any other port is forwarded by the
// agent to that port inside the sandbox. Nothing is ever published on the
// host.
func (s *Server) handleProxy(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	id := vars["id"]
	port, err := strconv.Atoi(vars["port"])
	if err != nil || port < 1 || port > 65535 {
		s.refuse(w, r, http.StatusBadRequest, lifecycle.CodeInvalidPort, "port must be between 1 and 65535")
		return
	}
	cred, ok := s.authorizeProxy(w, r, id)
	if !ok {
		return
	}
	release, ok := s.inflight.acquire(id, cred)
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeError(w, r, http.StatusTooManyRequests, codeTooManyRequests, fmt.Sprintf("too many requests in flight to sandbox %s or with this credential ([server] max_proxy_requests_per_sandbox, max_proxy_requests_per_token)", id))
		return
	}
	defer release()
	rest := proxyRest(r.URL.EscapedPath(), vars["port"])
	if port == lifecycle.EgressPort {
		// The egress API is sandboxd's own, never the sandbox's.
		s.mgr.ServeEgress(w, r, id, rest)
		return
	}
	if port == lifecycle.ExecdPort && r.ContentLength != 0 && rest != "/files/upload" && !requireJSON(w, r) {
		return // execd takes JSON bodies only, but for uploads
	}
	transport, err := s.proxyTransport(w, r, id, port, rest)
	if transport == nil {
		if err != nil {
			s.fail(w, r, err)
		}
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
			s.proxyFailed(w, r, id, port, err)
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

// proxyFailed answers a request that could not be relayed to the sandbox.
func (s *Server) proxyFailed(w http.ResponseWriter, r *http.Request, id string, port int, err error) {
	s.log.Warn("proxy to sandbox failed", "request_id", lifecycle.RequestID(r.Context()), "sandbox_id", id, "port", port, "err", err)
	status, code, msg := backendFailure(err)
	writeError(w, r, status, code, fmt.Sprintf("%s port %d of sandbox %s: %v", msg, port, id, err))
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
	if s.mgr.CheckToken(id, tok) {
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
