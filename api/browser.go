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

// proxiedPagePolicy is the Content-Security-Policy added to every answer a
// sandbox gives through the proxy route. The route shares the console's
// origin; without it a sandbox's HTML opened in a browser (the insecure
// mode has no key to stop the navigation) would run script in that origin
// and call the API with no key needed. "sandbox" without allow-same-origin
// gives the page an opaque origin: its scripts run, but every call they
// make to the server carries Origin: null, which browserCheck refuses, and
// no answer of the server is readable to them.
const proxiedPagePolicy = "sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox allow-modals allow-downloads"

// makeInert sets the headers of an answer that comes from a sandbox (its
// servers, its agent, files read out of it; a replaced agent serves what
// it likes): proxiedPagePolicy after the sandbox's own policies (CSP takes
// the last sandbox directive, Chromium the most restrictive: either way an
// allow-same-origin of the sandbox's cannot lift it), no MIME sniffing,
// and nothing that would act on the console's origin or the operator's
// other local servers (cookies are per host, not per port): no Set-Cookie
// (the proxy strips Cookie, so no app behind it can use one anyway), no
// Clear-Site-Data.
func makeInert(h http.Header) {
	h.Add("Content-Security-Policy", proxiedPagePolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Set-Cookie")
	h.Del("Clear-Site-Data")
}
