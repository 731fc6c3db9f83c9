package transfer

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"os"
	"strings"
	"testing"
)

func TestParseMode(t *testing.T) {
	tests := []struct {
		in   int
		want os.FileMode
		ok   bool
	}{
		{644, 0o644, true},
		{755, 0o755, true},
		{600, 0o600, true},
		{7, 0o7, true},
		{0, 0, true},
		{4755, 0o4755, true},
		{7777, 0o7777, true},
		{648, 0, false},
		{9, 0, false},
		{8, 0, false},
		{680, 0, false},
		{-1, 0, false},
		{10000, 0, false},
	}
	for _, tt := range tests {
		got, err := ParseMode(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseMode(%d) = %o, %v; want %o, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

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

// FuzzParseMode checks upstream's "octal digits as a decimal" file mode:
// accepted modes fit in 07777 and read back as the same digits.
func FuzzParseMode(f *testing.F) {
	for _, m := range []int{0, 644, 755, 7777, 8, 9, 800, 10000, -1, 4755} {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, m int) {
		mode, err := ParseMode(m)
		if err != nil {
			return
		}
		if mode > 0o7777 {
			t.Fatalf("ParseMode(%d) = %o, above 07777", m, mode)
		}
		if got := fmt.Sprintf("%o", uint32(mode)); got != fmt.Sprint(m) {
			t.Fatalf("ParseMode(%d) = %s in octal", m, got)
		}
	})
}
