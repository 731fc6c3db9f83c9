package lifecycle

import (
	"bytes"
	"mime/multipart"
	"strings"
	"testing"
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
