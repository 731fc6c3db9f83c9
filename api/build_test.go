package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHealthReportsBuild: /health names the version and commit, healthy
// or not, and omits what the build did not stamp.
func TestHealthReportsBuild(t *testing.T) {
	e := newEnv(t, nil)
	rt := e.rt
	for _, tt := range []struct {
		name  string
		build Build
		down  bool
		want  map[string]string
	}{
		{"stamped", Build{Version: "v1.2.3", Commit: "0123abc"}, false, map[string]string{"status": "healthy", "version": "v1.2.3", "commit": "0123abc"}},
		{"engine down", Build{Version: "v1.2.3", Commit: "0123abc"}, true, map[string]string{"status": "unhealthy", "version": "v1.2.3", "commit": "0123abc"}},
		{"no commit", Build{Version: "dev"}, false, map[string]string{"status": "healthy", "version": "dev", "commit": ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.down {
				rt.FailPing(errors.New("no daemon"))
			} else {
				rt.FailPing(nil)
			}
			s := &Server{health: rt, life: e.mgr}
			s.SetBuild(tt.build)
			rec := httptest.NewRecorder()
			s.handleHealth(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
			var got map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("%s: %v", rec.Body, err)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (body %s)", k, got[k], v, rec.Body)
				}
			}
		})
	}
}
