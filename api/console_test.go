package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The console's static files are public and carry the strict headers; its
// data route, and every other spelling under /console, needs the key.
func TestConsoleRoutes(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	noKey := map[string]string{headerAPIKey: ""}

	for _, path := range []string{"/console/", "/console/app.js", "/console/style.css", "/console/index.html"} {
		r := e.do(t, http.MethodGet, path, "", noKey)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s without key: %d %s", path, r.status, r.body)
		}
		csp := r.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("GET %s: CSP %q allows inline or eval", path, csp)
		}
		if got := r.header.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("GET %s: X-Frame-Options = %q", path, got)
		}
		if r.header.Get("Set-Cookie") != "" {
			t.Errorf("GET %s sets a cookie", path)
		}
	}
	if r := e.do(t, http.MethodGet, "/console/", "", noKey); !strings.Contains(string(r.body), `<script src="app.js" defer></script>`) ||
		strings.Contains(string(r.body), "<script>") {
		t.Errorf("index.html must load only app.js, no inline script:\n%s", r.body)
	}
	if r := e.do(t, http.MethodGet, "/console/app.js", "", noKey); !strings.HasPrefix(r.header.Get("Content-Type"), "text/javascript") {
		t.Errorf("app.js Content-Type = %q", r.header.Get("Content-Type"))
	}
	if r := e.do(t, http.MethodGet, "/console/nothing.js", "", noKey); r.status != http.StatusNotFound {
		t.Errorf("unknown console file: %d", r.status)
	}

	// None of these may reach data without the key.
	for _, path := range []string{
		"/console/api/activity?id=" + id,
		"/console/api",
		"/console/x/../api/activity?id=" + id,
		"/console/%61pi/activity?id=" + id,
		"/console/./api/activity?id=" + id,
		"/console//api/activity?id=" + id,
		"/console/%2e%2e/v1/sandboxes",
		"/console/../v1/sandboxes",
	} {
		r := e.do(t, http.MethodGet, path, "", noKey)
		if r.status == http.StatusOK || strings.Contains(string(r.body), id) {
			t.Errorf("GET %s without key: %d %s", path, r.status, r.body)
		}
	}
	r := e.do(t, http.MethodGet, "/console/api/activity?id="+id, "", noKey)
	wantError(t, r, http.StatusUnauthorized, "MISSING_API_KEY")

	r = e.do(t, http.MethodGet, "/console/api/activity?id="+id+"&id=no-such-sandbox", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("activity: %d %s", r.status, r.body)
	}
	var act map[string]time.Time
	if err := json.Unmarshal(r.body, &act); err != nil {
		t.Fatal(err)
	}
	if len(act) != 1 || act[id].IsZero() || time.Since(act[id]) > time.Hour {
		t.Errorf("activity = %v, want only %s with its creation time", act, id)
	}
	many := strings.Repeat("id=x&", 201)
	wantError(t, e.do(t, http.MethodGet, "/console/api/activity?"+many, "", nil), http.StatusBadRequest, "CONSOLE::TOO_MANY_IDS")
	if r := e.do(t, http.MethodPost, "/console/", "", noKey); r.status == http.StatusOK {
		t.Errorf("POST /console/ without key: %d", r.status)
	}
}
