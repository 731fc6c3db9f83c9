package api

import (
	"fmt"
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
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidPort, "port must be between 1 and 65535")
		return
	}
	if !s.authorizeProxy(w, r, id) {
		return
	}
	rest := proxyRest(r.URL.EscapedPath(), vars["port"])
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
