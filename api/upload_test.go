package api

import (
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
