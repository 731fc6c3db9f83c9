//go:build linux

package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// newProxyTransport returns the client for servers inside the sandbox.
func newProxyTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil, // sandbox-local traffic never goes through a proxy from the environment
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
}

// proxy serves /proxy/{port}/{path...}: any method, forwarded to
// http://127.0.0.1:{port}/{path}?{query} inside the sandbox. Responses are
// streamed as they come (SSE works) and WebSocket upgrades pass through.
func (s *server) proxy(w http.ResponseWriter, r *http.Request) {
	portText := r.PathValue("port")
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "invalid port: "+portText)
		return
	}
	// Keep the path as the client escaped it (%2F stays %2F).
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/proxy/"+portText)
	if rest == "" {
		rest = "/"
	}
	target, err := url.Parse("http://127.0.0.1:" + portText + rest)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "invalid path: "+err.Error())
		return
	}
	target.RawQuery = r.URL.RawQuery
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = target
			// Keep what sandboxd says about the original client.
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Proto"} {
				if v := pr.In.Header.Values(h); len(v) > 0 {
					pr.Out.Header[h] = v
				}
			}
			if pr.Out.Header.Get("X-Forwarded-Proto") == "" {
				pr.Out.Header.Set("X-Forwarded-Proto", "http")
			}
		},
		Transport:     s.proxyTransport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Debug("proxy error", "port", port, "err", err)
			// Upstream's codes: nothing listening (or no answer to the
			// connect) is a connection failure, any later timeout a 504.
			var op *net.OpError
			var ne net.Error
			switch {
			case errors.As(err, &op) && op.Op == "dial":
				writeError(w, http.StatusBadGateway, "BACKEND_CONNECTION_FAILED", fmt.Sprintf("Could not connect to the backend sandbox 127.0.0.1:%d: %v", port, err))
			case errors.As(err, &ne) && ne.Timeout():
				writeError(w, http.StatusGatewayTimeout, "BACKEND_TIMEOUT", fmt.Sprintf("Timed out waiting for 127.0.0.1:%d: %v", port, err))
			default:
				writeError(w, http.StatusBadGateway, "BACKEND_RESPONSE_FAILED", fmt.Sprintf("Broken response from 127.0.0.1:%d: %v", port, err))
			}
		},
	}
	rp.ServeHTTP(w, r)
}
