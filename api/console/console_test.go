package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestPublic(t *testing.T) {
	for _, tt := range []struct {
		target string
		want   bool
	}{
		{"/console", true},
		{"/console/", true},
		{"/console/app.js", true},
		{"/console/api/activity", false},
		{"/console/api", false},
		{"/console/API/activity", true}, // no such route: the static handler answers 404
		{"/console/%61pi/activity", false},
		{"/console/x/../api/activity", false},
		{"/console/./app.js", false},
		{"/console//api/activity", false},
		{"/console/%2e%2e/v1/sandboxes", false},
		{"/consoleX/app.js", false},
		{"/v1/sandboxes", false},
		{"/", false},
	} {
		u, err := url.ParseRequestURI(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := Public(u); got != tt.want {
			t.Errorf("Public(%s) = %v, want %v", tt.target, got, tt.want)
		}
	}
}

// Static serves the embedded files by exact name only, with the security
// headers on every answer, errors included.
func TestStatic(t *testing.T) {
	h := Static()
	for _, tt := range []struct {
		target string
		status int
	}{
		{"/console/", http.StatusOK},
		{"/console/style.css", http.StatusOK},
		{"/console", http.StatusMovedPermanently},
		{"/console/missing.js", http.StatusNotFound},
		{"/console/static/app.js", http.StatusNotFound},
		{"/console/../console/app.js", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.target, nil))
		if rec.Code != tt.status {
			t.Errorf("GET %s: %d, want %d", tt.target, rec.Code, tt.status)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: CSP %q", tt.target, csp)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("index Content-Type %q", ct)
	}
}
