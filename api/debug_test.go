package api

import (
	"net/http"
	"testing"
)

func TestDebugPprof(t *testing.T) {
	tests := []struct {
		name    string
		env     string
		headers map[string]string
		status  int
	}{
		{"off by default", "", nil, http.StatusNotFound},
		{"other value", "yes", nil, http.StatusNotFound},
		{"on", "1", nil, http.StatusOK},
		{"on without API key", "1", map[string]string{headerAPIKey: ""}, http.StatusUnauthorized},
		{"on with a wrong key", "1", map[string]string{headerAPIKey: "wrong"}, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envPprof, tt.env)
			e := newEnv(t, nil)
			if r := e.do(t, http.MethodGet, "/debug/pprof/goroutine?debug=1", "", tt.headers); r.status != tt.status {
				t.Errorf("status = %d, want %d (body %.200s)", r.status, tt.status, r.body)
			}
		})
	}
}
