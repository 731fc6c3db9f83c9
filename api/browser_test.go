package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/config"
)

// What a web page can send without a preflight is refused before any
// handler runs: a foreign Origin, a body that is not declared JSON, and,
// without an API key, a Host that names another server (DNS rebinding).
// The SDKs' own requests pass: JSON with a charset, bodiless POSTs without
// a Content-Type, the configured origin, loopback and configured Hosts.
func TestBrowserRequests(t *testing.T) {
	const allowed = "https://app.example.com"
	keyed := newEnv(t, func(c *config.Config) { c.Server.CORSOrigins = []string{allowed} })
	open := newEnv(t, func(c *config.Config) { c.Server.APIKey = ""; c.Server.EIP = "sandbox.example.com" })
	id := keyed.create(t)
	cmd := "/v1/sandboxes/" + id + "/proxy/44772/command"
	tests := []struct {
		name         string
		e            *env
		method, path string
		body         string
		headers      map[string]string
		status       int
		code         string // of a refusal
	}{
		{"text/plain create", keyed, "POST", "/v1/sandboxes", createBody, map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, 415, codeUnsupportedMedia},
		{"form create", keyed, "POST", "/sandboxes", createBody, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, codeUnsupportedMedia},
		{"untyped create", keyed, "POST", "/v1/sandboxes", createBody, map[string]string{"Content-Type": ""}, 415, codeUnsupportedMedia},
		{"text/plain metadata", keyed, "PATCH", "/v1/sandboxes/" + id + "/metadata", `{"a":"b"}`, map[string]string{"Content-Type": "text/plain"}, 415, codeUnsupportedMedia},
		{"text/plain command", keyed, "POST", cmd, `{"command":"id"}`, map[string]string{"Content-Type": "text/plain"}, 415, codeUnsupportedMedia},
		{"foreign origin", keyed, "GET", "/v1/sandboxes", "", map[string]string{"Origin": "https://evil.example"}, 403, codeForbiddenOrigin},
		{"foreign origin to the proxy", keyed, "POST", cmd, `{"command":"id"}`, map[string]string{"Origin": "null"}, 403, codeForbiddenOrigin},
		{"foreign origin, open server", open, "POST", "/v1/sandboxes", createBody, map[string]string{"Origin": "http://localhost:5173"}, 403, codeForbiddenOrigin},
		{"rebinding host, open server", open, "POST", "/v1/sandboxes", createBody, map[string]string{"Host": "attacker.example:8080"}, 403, codeForbiddenHost},
		{"rebinding host to health", open, "GET", "/health", "", map[string]string{"Host": "attacker.example"}, 403, codeForbiddenHost},

		{"JSON with charset", keyed, "POST", "/v1/sandboxes", createBody, map[string]string{"Content-Type": "application/json; charset=utf-8"}, 202, ""},
		{"bodiless pause", keyed, "POST", "/v1/sandboxes/" + id + "/pause", "", map[string]string{"Content-Type": ""}, 202, ""},
		{"bodiless resume, text/plain", keyed, "POST", "/v1/sandboxes/" + id + "/resume", "", map[string]string{"Content-Type": "text/plain"}, 202, ""},
		{"bodiless snapshot", keyed, "POST", "/v1/sandboxes/" + id + "/snapshots", "", nil, 202, ""},
		{"configured origin", keyed, "GET", "/v1/sandboxes", "", map[string]string{"Origin": allowed}, 200, ""},
		{"the console's own origin", keyed, "POST", "/v1/sandboxes", createBody, map[string]string{"Origin": "http://127.0.0.1:8080", "Host": "127.0.0.1:8080"}, 202, ""},
		{"another port of the host", keyed, "POST", "/v1/sandboxes", createBody, map[string]string{"Origin": "http://127.0.0.1:3000", "Host": "127.0.0.1:8080"}, 403, codeForbiddenOrigin},
		{"any Host with a key", keyed, "GET", "/v1/sandboxes", "", map[string]string{"Host": "sandboxd.internal:8080"}, 200, ""},
		{"localhost", open, "GET", "/v1/sandboxes", "", map[string]string{"Host": "localhost:8080"}, 200, ""},
		{"IPv6 loopback", open, "GET", "/v1/sandboxes", "", map[string]string{"Host": "[::1]:8080"}, 200, ""},
		{"configured eip", open, "GET", "/v1/sandboxes", "", map[string]string{"Host": "sandbox.example.com"}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := containers(t, tt.e)
			r := tt.e.do(t, tt.method, tt.path, tt.body, tt.headers)
			if tt.code == "" {
				if r.status != tt.status {
					t.Errorf("status = %d, want %d (body %s)", r.status, tt.status, r.body)
				}
				return
			}
			wantError(t, r, tt.status, tt.code)
			if n := containers(t, tt.e); n != before {
				t.Errorf("a refused request changed the containers: %d -> %d", before, n)
			}
		})
	}
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                true,
		"Application/JSON; charset=utf-8": true,
		"application/merge-patch+json":    true,
		"":                                false,
		"text/plain":                      false,
		"text/json":                       false,
		"application/jsonx":               false,
		"multipart/form-data; boundary=x": false,
	} {
		if got := isJSON(ct); got != want {
			t.Errorf("isJSON(%q) = %v, want %v", ct, got, want)
		}
	}
}

// containers counts the fake runtime's containers.
func containers(t *testing.T, e *env) int {
	t.Helper()
	cs, err := e.rt.List(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(cs)
}

// TestProxiedAnswersInert: whatever a sandbox answers through the proxy
// route (a forwarded port, the execd port, a download from its agent or,
// stopped, from its filesystem) carries the sandbox CSP as the last policy,
// after a hostile page's own allow-same-origin, and nosniff; its cookies and
// Clear-Site-Data are dropped. Without these a sandbox's HTML would run in
// the console's origin.
func TestProxiedAnswersInert(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Server.APIKey = "" })
	e.rt.SetAgent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html")
		h.Add("Content-Security-Policy", "sandbox allow-scripts allow-same-origin")
		h.Set("Set-Cookie", "session=tossed; Path=/")
		h.Set("Clear-Site-Data", `"storage"`)
		h.Set("X-Content-Type-Options", "sniff-me")
		fmt.Fprint(w, "<script>fetch('/v1/sandboxes',{method:'POST'})</script>")
	}))
	id := e.create(t)
	base := "/sandboxes/" + id + "/proxy/"
	check := func(t *testing.T, r response) {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("status %d %s", r.status, r.body)
		}
		// A browser takes the last sandbox directive: it must give an
		// opaque origin.
		csp := r.header.Values("Content-Security-Policy")
		if len(csp) == 0 || !strings.HasPrefix(csp[len(csp)-1], "sandbox ") || strings.Contains(csp[len(csp)-1], "allow-same-origin") {
			t.Errorf("Content-Security-Policy = %q, want a sandbox without allow-same-origin last", csp)
		}
		if got := r.header.Values("X-Content-Type-Options"); !slices.Equal(got, []string{"nosniff"}) {
			t.Errorf("X-Content-Type-Options = %q", got)
		}
		for _, h := range []string{"Set-Cookie", "Clear-Site-Data"} {
			if v := r.header.Get(h); v != "" {
				t.Errorf("%s = %q reached the browser", h, v)
			}
		}
	}
	for _, path := range []string{"8080/", "8080/page.html", "44772/ping", "44772/files/download?path=/tmp/a.html"} {
		for _, prefix := range []string{"", "/v1"} {
			t.Run(prefix+path, func(t *testing.T) { check(t, e.do(t, http.MethodGet, prefix+base+path, "", nil)) })
		}
	}
	t.Run("stopped sandbox download", func(t *testing.T) {
		body, ct := multipartBody(t, [2]string{"metadata", `{"path":"/tmp/a.html"}`}, [2]string{"file", "<script>alert(1)</script>"})
		e.stop(t, id)
		if r := e.do(t, http.MethodPost, base+"44772/files/upload", body, map[string]string{"Content-Type": ct}); r.status != http.StatusOK {
			t.Fatalf("upload: %d %s", r.status, r.body)
		}
		check(t, e.do(t, http.MethodGet, base+"44772/files/download?path=/tmp/a.html", "", nil))
	})
}
