//go:build linux

package agent

import (
	"net/http"
	"testing"
)

func TestIsolatedUnavailable(t *testing.T) {
	a := newTestAgent(t)
	caps := decode[map[string]any](t, a.do(t, http.MethodGet, "/v1/isolated/capabilities", nil), http.StatusOK)
	if caps["available"] != false || caps["message"] == "" || caps["commit_supported"] != false || caps["diff_supported"] != false {
		t.Errorf("capabilities %v", caps)
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/v1/isolated/session"},
		{http.MethodGet, "/v1/isolated/sessions"},
		{http.MethodPost, "/v1/isolated/session/x/run"},
		{http.MethodGet, "/v1/isolated/session/x/files/info?path=/"},
		{http.MethodDelete, "/v1/isolated/session/x"},
	} {
		wantError(t, a.do(t, r.method, r.path, nil), http.StatusServiceUnavailable, codeNotSupported)
	}
}
