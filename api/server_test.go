package api

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
)

func TestRoutesAtRootAndV1(t *testing.T) {
	for _, prefix := range []string{"", "/v1"} {
		t.Run("prefix "+prefix, func(t *testing.T) {
			e := newEnv(t, nil)
			id := e.create(t)
			future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			tests := []struct {
				method, path, body string
				status             int
				code               string // error code expected, if any
			}{
				{"POST", "/sandboxes", createBody, 202, ""},
				{"GET", "/sandboxes", "", 200, ""},
				{"GET", "/sandboxes/{id}", "", 200, ""},
				{"PATCH", "/sandboxes/{id}/metadata", `{"x":"1"}`, 200, ""},
				{"POST", "/sandboxes/{id}/renew-expiration", `{"expiresAt":"` + future + `"}`, 200, ""},
				{"GET", "/sandboxes/{id}/endpoints/44772", "", 200, ""},
				{"POST", "/sandboxes/{id}/pause", "", 202, ""},
				{"POST", "/sandboxes/{id}/resume", "", 202, ""},
				{"GET", "/sandboxes/{id}/proxy/44772/ping", "", 200, ""},
				{"POST", "/sandboxes/{id}/snapshots", "", 202, ""},
				{"GET", "/snapshots", "", 200, ""},
				{"GET", "/snapshots/nope", "", 404, "SNAPSHOT::NOT_FOUND"},
				{"DELETE", "/snapshots/nope", "", 404, "SNAPSHOT::NOT_FOUND"},
				{"GET", "/sandboxes/{id}/diagnostics/logs", "", 200, ""},
				{"GET", "/sandboxes/{id}/diagnostics/events", "", 200, ""},
				{"GET", "/sandboxes/{id}/diagnostics/inspect", "", 501, "DIAGNOSTICS_NOT_IMPLEMENTED"},
				{"GET", "/pools", "", 200, ""},
				{"GET", "/pools/p1", "", 404, "POOL::NOT_FOUND"},
				{"DELETE", "/pools/p1", "", 404, "POOL::NOT_FOUND"},
				{"DELETE", "/sandboxes/{id}", "", 204, ""},
				{"GET", "/sandboxes/{id}", "", 404, "DOCKER::SANDBOX_NOT_FOUND"},
			}
			for _, tt := range tests {
				path := prefix + strings.ReplaceAll(tt.path, "{id}", id)
				r := e.do(t, tt.method, path, tt.body, nil)
				if tt.code != "" {
					wantError(t, r, tt.status, tt.code)
					continue
				}
				if r.status != tt.status {
					t.Errorf("%s %s = %d, want %d (body %s)", tt.method, path, r.status, tt.status, r.body)
				}
			}
		})
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Server.APIKeys = []string{"second-key"} })
	id := e.create(t)
	noKey := map[string]string{headerAPIKey: ""}
	paths := []struct{ method, path string }{
		{"GET", "/v1/sandboxes"},
		{"GET", "/sandboxes"},
		{"POST", "/v1/sandboxes"},
		{"GET", "/v1/sandboxes/" + id},
		{"DELETE", "/v1/sandboxes/" + id},
		{"GET", "/v1/sandboxes/" + id + "/endpoints/44772"},
		{"GET", "/v1/snapshots"},
		{"GET", "/v1/pools"},
		{"GET", "/v1/no-such-route"},
		{"GET", "/v1/health"},
		// An encoded slash must not make a lifecycle route look like the proxy route.
		{"GET", "/v1/sandboxes/" + id + "%2Fproxy%2F44772"},
		{"DELETE", "/v1/sandboxes/" + id + "%2Fproxy%2F44772"},
		{"GET", "/v1/sandboxes/" + id + "%2Fproxy%2F44772/diagnostics/logs"},
	}
	for _, p := range paths {
		t.Run("missing key "+p.method+" "+p.path, func(t *testing.T) {
			r := e.do(t, p.method, p.path, "", noKey)
			wantError(t, r, http.StatusUnauthorized, "MISSING_API_KEY")
			if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(r.header.Get("X-Request-ID")) {
				t.Errorf("generated X-Request-ID = %q, want 32 hex digits", r.header.Get("X-Request-ID"))
			}
		})
		t.Run("wrong key "+p.method+" "+p.path, func(t *testing.T) {
			r := e.do(t, p.method, p.path, "", map[string]string{headerAPIKey: "wrong"})
			wantError(t, r, http.StatusUnauthorized, "INVALID_API_KEY")
		})
	}
	if _, err := e.mgr.Sandboxes.Get(t.Context(), id); err != nil {
		t.Errorf("an unauthenticated DELETE removed the sandbox: %v", err)
	}

	t.Run("request id echoed", func(t *testing.T) {
		for _, h := range []map[string]string{
			{headerAPIKey: "", "X-Request-ID": "req-123"},
			{headerAPIKey: "wrong", "X-Request-ID": "req-123"},
			{"X-Request-ID": "req-123"},
		} {
			r := e.do(t, "GET", "/v1/sandboxes/nope", "", h)
			if got := r.header.Get("X-Request-ID"); got != "req-123" {
				t.Errorf("status %d: X-Request-ID = %q, want req-123", r.status, got)
			}
		}
		long := strings.Repeat("x", 129)
		if got := e.do(t, "GET", "/v1/sandboxes", "", map[string]string{"X-Request-ID": long}).header.Get("X-Request-ID"); got == long || got == "" {
			t.Errorf("oversized X-Request-ID echoed back (%d chars)", len(got))
		}
	})
	t.Run("second key accepted", func(t *testing.T) {
		if r := e.do(t, "GET", "/v1/sandboxes", "", map[string]string{headerAPIKey: "second-key"}); r.status != http.StatusOK {
			t.Errorf("second key: %d %s", r.status, r.body)
		}
	})
	t.Run("health without key", func(t *testing.T) {
		r := e.do(t, "GET", "/health", "", noKey)
		if r.status != http.StatusOK || r.json(t)["status"] != "healthy" {
			t.Errorf("health = %d %s", r.status, r.body)
		}
	})
}

func TestHealthUnavailable(t *testing.T) {
	e := newEnv(t, nil)
	e.rt.FailPing(errors.New("no daemon"))
	r := e.do(t, "GET", "/health", "", nil)
	if r.status != http.StatusServiceUnavailable || r.json(t)["status"] != "unhealthy" {
		t.Errorf("health with the engine down = %d %s", r.status, r.body)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/nothing-here", 404, "GENERAL::NOT_FOUND"},
		{"GET", "/v2/sandboxes", 404, "GENERAL::NOT_FOUND"},
		{"GET", "/v1/sandboxes/a/b/c", 404, "GENERAL::NOT_FOUND"},
		{"PUT", "/v1/sandboxes", 405, "GENERAL::METHOD_NOT_ALLOWED"},
		{"GET", "/v1/sandboxes/x/pause", 405, "GENERAL::METHOD_NOT_ALLOWED"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := e.do(t, tt.method, tt.path, "", map[string]string{"X-Request-ID": "rid"})
			wantError(t, r, tt.status, tt.code)
			if r.header.Get("X-Request-ID") != "rid" {
				t.Errorf("X-Request-ID not echoed")
			}
		})
	}
}

func TestCORS(t *testing.T) {
	const allowed = "https://app.example.com"
	tests := []struct {
		name    string
		origins []string
		method  string
		headers map[string]string
		status  int
		cors    bool
	}{
		{"foreign origin preflight", []string{allowed}, "OPTIONS",
			map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "DELETE", headerAPIKey: ""}, 403, false},
		{"no origins configured", nil, "OPTIONS",
			map[string]string{"Origin": allowed, "Access-Control-Request-Method": "GET", headerAPIKey: ""}, 403, false},
		{"foreign origin simple request", []string{allowed}, "GET",
			map[string]string{"Origin": "https://evil.example"}, 403, false},
		{"configured origin preflight", []string{allowed}, "OPTIONS",
			map[string]string{"Origin": allowed, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "open-sandbox-api-key", headerAPIKey: ""}, 204, true},
		{"configured origin request", []string{allowed}, "GET",
			map[string]string{"Origin": allowed}, 200, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) { c.Server.CORSOrigins = tt.origins })
			r := e.do(t, tt.method, "/v1/sandboxes", "", tt.headers)
			if r.status != tt.status {
				t.Errorf("status = %d, want %d", r.status, tt.status)
			}
			var acao []string
			for k := range r.header {
				if strings.HasPrefix(k, "Access-Control-") {
					acao = append(acao, k)
				}
			}
			if !tt.cors {
				if len(acao) > 0 {
					t.Errorf("CORS headers %v sent to an origin that is not configured", acao)
				}
				return
			}
			if got := r.header.Get("Access-Control-Allow-Origin"); got != allowed {
				t.Errorf("Access-Control-Allow-Origin = %q, want %q", got, allowed)
			}
			if tt.method == "OPTIONS" {
				if r.header.Get("Access-Control-Allow-Methods") == "" || r.header.Get("Access-Control-Allow-Headers") != "open-sandbox-api-key" {
					t.Errorf("preflight headers = %v", r.header)
				}
			}
		})
	}
}

func TestIsProxyPath(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"/sandboxes/abc/proxy/44772", true},
		{"/v1/sandboxes/abc/proxy/44772/command", true},
		{"/sandboxes/abc/proxy/", false},
		{"/sandboxes/abc/proxy", false},
		{"/sandboxes/abc", false},
		{"/sandboxes/abc/endpoints/44772", false},
		{"/v2/sandboxes/abc/proxy/1", false},
		{"/snapshots/abc/proxy/1", false},
	}
	for _, tt := range tests {
		if got := isProxyPath(tt.path); got != tt.want {
			t.Errorf("isProxyPath(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}
