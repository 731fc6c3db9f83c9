package api

import (
	"bytes"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/lifecycle"
)

func TestLastPartSize(t *testing.T) {
	data := strings.Repeat("x", 5000)
	// Go's writer, as the bench and the Go SDK send it.
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	m, _ := w.CreateFormFile("metadata", "metadata")
	m.Write([]byte(`{"path":"/tmp/x"}`))
	f, _ := w.CreateFormFile("file", "x")
	f.Write([]byte(data))
	w.Close()
	body := buf.Bytes()
	if size, ok := lastPartSize(body[:600], w.Boundary(), int64(len(body)), 1); !ok || size != int64(len(data)) {
		t.Errorf("Go writer: lastPartSize = %d, %v; want %d", size, ok, len(data))
	}
	// The file part's headers are not in the prefix.
	if _, ok := lastPartSize(body[:150], w.Boundary(), int64(len(body)), 1); ok {
		t.Error("lastPartSize found a part whose headers were not recorded")
	}

	// As undici (Node's fetch, the TypeScript SDK) serialises FormData.
	b := "opensandbox_4f2a"
	node := "--" + b + "\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\nContent-Type: application/json\r\n\r\n{\"path\":\"/a\"}\r\n" +
		"--" + b + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\nContent-Type: application/octet-stream\r\n\r\n" + data + "\r\n--" + b + "--\r\n"
	if size, ok := lastPartSize([]byte(node[:400]), b, int64(len(node)), 1); !ok || size != int64(len(data)) {
		t.Errorf("undici body: lastPartSize = %d, %v; want %d", size, ok, len(data))
	}
	// A preamble before the first delimiter.
	pre := "preamble\r\n" + node
	if size, ok := lastPartSize([]byte(pre[:400]), b, int64(len(pre)), 1); !ok || size != int64(len(data)) {
		t.Errorf("with a preamble: lastPartSize = %d, %v; want %d", size, ok, len(data))
	}
	for _, tt := range []struct {
		name     string
		boundary string
		total    int64
	}{
		{"no boundary", "", int64(len(node))},
		{"no Content-Length", b, -1},
		{"Content-Length too short", b, 100},
	} {
		if size, ok := lastPartSize([]byte(node[:400]), tt.boundary, tt.total, 1); ok {
			t.Errorf("%s: lastPartSize = %d, true; want no size", tt.name, size)
		}
	}
}

// Large files stream with the size derived from Content-Length; when that
// derivation is wrong (a file part that is not last, an epilogue) the
// upload must still be exact.
func TestUploadLargeFiles(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	e.stop(t, id)
	base := "/sandboxes/" + id + "/proxy/44772"
	auth := map[string]string{headerAPIKey: "", lifecycle.TokenHeader: e.mgr.Token(id)}
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
