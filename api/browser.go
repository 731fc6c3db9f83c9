package api

import (
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
)

// A web page in the operator's browser can send requests to sandboxd
// without being able to read the answers: "simple" requests (a text/plain
// or form POST) need no CORS preflight, and a DNS name the page controls
// can be pointed at 127.0.0.1. What only browsers send is refused here.

// browserCheck refuses a request that carries an Origin other than the
// server's own (the console's pages) and not listed in [server]
// cors_origins (browsers send it on every cross-origin POST, and no SDK
// sends it), and, on a server without an API key, a Host header that
// does not name this server (DNS rebinding: the page's own name resolving
// to loopback). With a key, the key is what a page cannot have; Host is not
// checked, so reverse proxies that forward their own Host keep working.
func (s *Server) browserCheck(w http.ResponseWriter, r *http.Request) bool {
	if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r.Host) && !slices.Contains(s.cfg.Server.CORSOrigins, origin) {
		writeError(w, r, http.StatusForbidden, codeForbiddenOrigin, "requests from web pages are refused unless their origin is listed in [server] cors_origins")
		return false
	}
	if len(s.keys) == 0 && !s.ownHost(r.Host) {
		writeError(w, r, http.StatusForbidden, codeForbiddenHost, "without an API key only requests to a loopback address or the configured [server] host are served (the Host header names another server)")
		return false
	}
	return true
}

// sameOrigin reports whether origin is the page's own server: the Host
// the request was sent to, over http or https (behind a TLS proxy).
func sameOrigin(origin, host string) bool {
	return host != "" && (origin == "http://"+host || origin == "https://"+host)
}

// ownHost reports whether the Host header hostport names this server: a
// loopback name or address, or the configured host or eip.
func (s *Server) ownHost(hostport string) bool {
	if hostport == "" { // HTTP/1.0 without Host: no browser sends that
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || strings.EqualFold(host, s.cfg.Server.Host) || (s.cfg.Server.EIP != "" && strings.EqualFold(host, s.cfg.Server.EIP)) {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isJSON reports whether a Content-Type names JSON: application/json or a
// +json type, with any parameters, as FastAPI accepts.
func isJSON(contentType string) bool {
	media, _, err := mime.ParseMediaType(contentType)
	return err == nil && (media == "application/json" || strings.HasPrefix(media, "application/") && strings.HasSuffix(media, "+json"))
}

// requireJSON writes a 415 unless the request's body is declared JSON. A
// text/plain, form or untyped body is what a web page can send without a
// preflight; every SDK declares its JSON bodies.
func requireJSON(w http.ResponseWriter, r *http.Request) bool {
	if isJSON(r.Header.Get("Content-Type")) {
		return true
	}
	writeError(w, r, http.StatusUnsupportedMediaType, codeUnsupportedMedia, "a request body must be JSON, sent with Content-Type: application/json")
	return false
}
