package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// Large files stream with the size derived from Content-Length; when that
// derivation is wrong (a file part that is not last, an epilogue) the
// upload must still be exact.
func TestUploadLargeFiles(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	e.stop(t, id)
	base := "/sandboxes/" + id + "/proxy/44772"
	auth := map[string]string{headerAPIKey: "", lifecycle.TokenHeader: e.mgr.Sandboxes.Token(id)}
	big1 := strings.Repeat("a1b2c3d4", (2<<20)/8+3)
	big2 := strings.Repeat("e5f6", (3<<20)/4)
	tests := []struct {
		name     string
		parts    [][2]string
		epilogue string
		files    map[string]string
	}{
		{"last part", [][2]string{{"metadata", `{"path":"/tmp/big1"}`}, {"file", big1}}, "", map[string]string{"/tmp/big1": big1}},
		{"two large parts", [][2]string{{"metadata", `{"path":"/tmp/big2"}`}, {"file", big2}, {"metadata", `{"path":"/tmp/big3"}`}, {"file", big1}}, "", map[string]string{"/tmp/big2": big2, "/tmp/big3": big1}},
		{"epilogue", [][2]string{{"metadata", `{"path":"/tmp/big4"}`}, {"file", big2}}, "an epilogue\r\n", map[string]string{"/tmp/big4": big2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ct := multipartBody(t, tt.parts...)
			h := map[string]string{"Content-Type": ct}
			for k, v := range auth {
				h[k] = v
			}
			if r := e.do(t, "POST", base+"/files/upload", body+tt.epilogue, h); r.status != 200 {
				t.Fatalf("upload = %d %s", r.status, r.body)
			}
			for p, want := range tt.files {
				got := e.do(t, "GET", base+"/files/download?path="+p, "", auth)
				if got.status != 200 || string(got.body) != want {
					t.Errorf("download %s = %d, %d bytes; want the %d uploaded", p, got.status, len(got.body), len(want))
				}
			}
		})
	}
}

// What a proxied request is to the file routes is decided once, from the
// port, the path and the method: only POST /files/upload and GET or HEAD
// /files/download of the execd port are served here, and any request to
// /files/upload carries a form, not JSON.
func TestFileRouteOf(t *testing.T) {
	for _, tt := range []struct {
		method, rest string
		port         int
		want         fileRoute
		form         bool
	}{
		{http.MethodPost, "/files/upload", lifecycle.ExecdPort, routeUpload, true},
		{http.MethodPut, "/files/upload", lifecycle.ExecdPort, routeForm, true},
		{http.MethodGet, "/files/download", lifecycle.ExecdPort, routeDownload, false},
		{http.MethodHead, "/files/download", lifecycle.ExecdPort, routeDownload, false},
		{http.MethodPost, "/files/download", lifecycle.ExecdPort, routeNone, false},
		{http.MethodPost, "/files/upload", 8080, routeNone, false},
		{http.MethodGet, "/files/download", 8080, routeNone, false},
		{http.MethodPost, "/files/upload/", lifecycle.ExecdPort, routeNone, false},
		{http.MethodPost, "/command", lifecycle.ExecdPort, routeNone, false},
	} {
		got := fileRouteOf(httptest.NewRequest(tt.method, "/x", nil), tt.port, tt.rest)
		if got != tt.want || got.form() != tt.form {
			t.Errorf("%s %s on %d = %v (form %v), want %v (form %v)", tt.method, tt.rest, tt.port, got, got.form(), tt.want, tt.form)
		}
	}
}
