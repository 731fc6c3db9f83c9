//go:build linux

package agent

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestUploadReplacesAtomically: an upload replaces the file by a rename,
// keeps an existing file's mode, and leaves no temp file behind.
func TestUploadReplacesAtomically(t *testing.T) {
	a := newTestAgent(t)
	p := filepath.Join(a.dir, "run.sh")
	if err := os.WriteFile(p, []byte("old"), 0o750); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(p)
	if resp := a.upload(t, []uploadPart{meta(p, 0), file(p, "new")}); resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	after, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "new" || after.Mode().Perm() != 0o750 {
		t.Errorf("file %q mode %o, want new with 0750", got, after.Mode().Perm())
	}
	if os.SameFile(before, after) {
		t.Error("the file was rewritten in place, not replaced")
	}
	left, _ := filepath.Glob(filepath.Join(a.dir, ".sandboxd-upload-*"))
	if len(left) > 0 {
		t.Errorf("temp files left: %v", left)
	}
	// A directory at the path is a clean 400, and is left alone.
	d := filepath.Join(a.dir, "dir")
	os.Mkdir(d, 0o755)
	wantError(t, a.upload(t, []uploadPart{meta(d, 0), file(d, "x")}), http.StatusBadRequest, codeInvalidFileMetadata)
}

// TestUploadTruncated: a client that goes away mid-file leaves the file
// as it was, and no temp file.
func TestUploadTruncated(t *testing.T) {
	a := newTestAgent(t)
	p := filepath.Join(a.dir, "keep.txt")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ct, body := uploadBody(t, []uploadPart{meta(p, 0), file(p, strings.Repeat("new", 100000))})
	cut := body.Bytes()[:body.Len()/2] // no closing boundary
	resp, err := http.Post(a.url+"/files/upload", ct, bytes.NewReader(cut))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Error("a truncated upload succeeded")
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Errorf("file after a truncated upload: %d bytes, want the old content", len(got))
	}
	if left, _ := filepath.Glob(filepath.Join(a.dir, ".sandboxd-upload-*")); len(left) > 0 {
		t.Errorf("temp files left: %v", left)
	}
}

// TestUploadOverSymlink: a symlink at the path is replaced by the file
// with the default mode (never the link's 0777), and its target, here
// outside the directory, is not written through.
func TestUploadOverSymlink(t *testing.T) {
	a := newTestAgent(t)
	outside := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(a.dir, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(a.dir, "dangling")
	if err := os.Symlink(filepath.Join(a.dir, "nowhere", "x"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, dangling} {
		if resp := a.upload(t, []uploadPart{meta(p, 0), file(p, "data")}); resp.StatusCode != http.StatusOK {
			t.Fatalf("upload over %s: %d", p, resp.StatusCode)
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s after upload: %v %v; want a regular file with mode 0644", p, fi.Mode(), err)
		}
	}
	if got, _ := os.ReadFile(outside); string(got) != "keep" {
		t.Errorf("the link's target was written through: %q", got)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "nowhere")); err == nil {
		t.Error("a dangling link's target directory was created")
	}
}

// TestOverwriteInPlace: where a rename is impossible (a mount point) the
// file is written in place, and a symlink there is not followed.
func TestOverwriteInPlace(t *testing.T) {
	dir := t.TempDir()
	p, tmp := filepath.Join(dir, "f"), filepath.Join(dir, "tmp")
	os.WriteFile(p, []byte("a long old content"), 0o640)
	os.WriteFile(tmp, []byte("new"), 0o600)
	if err := overwrite(p, tmp); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "new" {
		t.Errorf("file = %q", got)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(p, link)
	if err := overwrite(link, tmp); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("overwrite through a symlink = %v, want ELOOP", err)
	}
}

// TestDownloadLines covers line mode as execd 1.0.19 serves it (reference
// execd-1.1.md §1.2), including upstream's e2e test 03a.
func TestDownloadLines(t *testing.T) {
	a := newTestAgent(t)
	write := func(name, content string) string {
		p := filepath.Join(a.dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return url.QueryEscape(p)
	}
	five := write("five", "line1\nline2\nline3\nline4\nline5")
	crlf := write("crlf", "a\r\nb\r\r\nc\rd\n\n\re\r")
	long := strings.Repeat("x", 200<<10)
	longCR := write("long", long+strings.Repeat("\r", 70<<10)+"\n"+long+strings.Repeat("\r", 70<<10)+"y\nz")
	empty := write("empty", "")
	tests := []struct {
		query string
		want  string
	}{
		{"path=" + five + "&offset=2&limit=2", "line2\nline3"},
		{"path=" + five + "&offset=4", "line4\nline5"},
		{"path=" + five + "&limit=2", "line1\nline2"},
		{"path=" + five + "&offset=5&limit=9", "line5"},
		{"path=" + five + "&offset=6", ""},
		{"path=" + five + "&offset=4&limit=9223372036854775807", "line4\nline5"},
		{"path=" + five + "&offset=9223372036854775807&limit=9", ""},
		{"path=" + crlf + "&offset=1", "a\nb\nc\rd\n\n\re"},
		{"path=" + crlf + "&offset=4&limit=1", ""},
		{"path=" + longCR + "&limit=1", long},
		{"path=" + longCR + "&offset=2", long + strings.Repeat("\r", 70<<10) + "y\nz"},
		{"path=" + empty + "&limit=3", ""},
	}
	for _, tt := range tests {
		resp := a.do(t, http.MethodGet, "/files/download?"+tt.query, nil)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != tt.want {
			t.Errorf("%s: %d %q, want %q", tt.query, resp.StatusCode, trim(body), trim([]byte(tt.want)))
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
			t.Errorf("%s: Content-Type %q, want text/plain; charset=utf-8", tt.query, ct)
		}
	}
	missing := url.QueryEscape(filepath.Join(a.dir, "missing"))
	for _, tt := range []struct {
		query, rng string
		status     int
		code       string
	}{
		{"offset=1", "", http.StatusBadRequest, codeMissingQuery},
		{"path=" + five + "&offset=1", "bytes=0-1", http.StatusBadRequest, codeInvalidRequest},
		{"path=" + missing + "&offset=1", "bytes=0-1", http.StatusBadRequest, codeInvalidRequest},
		{"path=" + missing + "&offset=x", "", http.StatusNotFound, codeFileNotFound},
		{"path=" + five + "&offset=0", "", http.StatusBadRequest, codeInvalidRequest},
		{"path=" + five + "&offset=-1", "", http.StatusBadRequest, codeInvalidRequest},
		{"path=" + five + "&limit=0", "", http.StatusBadRequest, codeInvalidRequest},
		{"path=" + five + "&limit=two", "", http.StatusBadRequest, codeInvalidRequest},
	} {
		req, _ := http.NewRequest(http.MethodGet, a.url+"/files/download?"+tt.query, nil)
		if tt.rng != "" {
			req.Header.Set("Range", tt.rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, resp, tt.status, tt.code)
		resp.Body.Close()
	}
}

func trim(b []byte) string {
	if len(b) > 80 {
		return string(b[:40]) + "..." + string(b[len(b)-40:])
	}
	return string(b)
}

// TestDownloadRangeSeeks: a range at the end of a huge sparse file is
// served by seeking, not by reading what comes before it.
func TestDownloadRangeSeeks(t *testing.T) {
	a := newTestAgent(t)
	p := filepath.Join(a.dir, "sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// 1 TiB of nothing: reading it would take hours.
	if err := f.Truncate(1 << 40); err != nil {
		t.Skip("no sparse files here:", err)
	}
	f.WriteAt([]byte("end"), 1<<40-3)
	f.Close()
	req, _ := http.NewRequest(http.MethodGet, a.url+"/files/download?path="+url.QueryEscape(p), nil)
	req.Header.Set("Range", "bytes=-3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, []byte("end")) || resp.Header.Get("Content-Range") != "bytes 1099511627773-1099511627775/1099511627776" {
		t.Errorf("range = %d %q %q", resp.StatusCode, body, resp.Header.Get("Content-Range"))
	}
}

// FuzzParseRange checks that an accepted Range never reaches outside the
// file.
func FuzzParseRange(f *testing.F) {
	for _, seed := range []struct {
		h    string
		size int64
	}{
		{"", 10}, {"bytes=0-", 10}, {"bytes=2-5", 10}, {"bytes=-3", 10}, {"bytes=-30", 10}, {"bytes=9-", 10},
		{"bytes=10-", 10}, {"bytes=5-2", 10}, {"bytes=0-0", 0}, {"bytes=-1", 0}, {"bytes=1-2,4-5", 10},
		{"bytes= 1 - 2", 10}, {"items=0-1", 10}, {"bytes=-9223372036854775808", 10}, {"bytes=0-9223372036854775807", 10},
	} {
		f.Add(seed.h, seed.size)
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			return // sizes come from a file
		}
		start, length, partial, ok := parseRange(h, size)
		switch {
		case !ok:
		case !partial:
			if start != 0 || length != size {
				t.Fatalf("parseRange(%q, %d): whole file as %d+%d", h, size, start, length)
			}
		case start < 0 || length < 1 || start >= size || length > size-start:
			t.Fatalf("parseRange(%q, %d) = %d+%d, outside the file", h, size, start, length)
		}
	})
}

func TestParseRange(t *testing.T) {
	tests := []struct {
		h             string
		size          int64
		start, length int64
		partial, ok   bool
	}{
		{"", 10, 0, 10, false, true},
		{"items=0-1", 10, 0, 10, false, true},
		{"bytes=0-9", 10, 0, 10, true, true},
		{"bytes=0-0", 10, 0, 1, true, true},
		{"bytes=5-", 10, 5, 5, true, true},
		{"bytes=-3", 10, 7, 3, true, true},
		{"bytes=-30", 10, 0, 10, true, true},
		{"bytes=2-100", 10, 2, 8, true, true},
		{"bytes=0-1,4-5", 10, 0, 2, true, true},
		{"bytes= 1-2", 10, 1, 2, true, true},
		{"bytes=10-", 10, 0, 0, false, false},
		{"bytes=10-12", 10, 0, 0, false, false},
		{"bytes=5-2", 10, 0, 0, false, false},
		{"bytes=-0", 10, 0, 0, false, false},
		{"bytes=-1", 0, 0, 0, false, false},
		{"bytes=0-", 0, 0, 0, false, false},
		{"bytes=x-1", 10, 0, 0, false, false},
		{"bytes=1-x", 10, 0, 0, false, false},
		{"bytes=-1-2", 10, 0, 0, false, false},
		{"bytes=5", 10, 0, 0, false, false},
	}
	for _, tt := range tests {
		start, length, partial, ok := parseRange(tt.h, tt.size)
		if start != tt.start || length != tt.length || partial != tt.partial || ok != tt.ok {
			t.Errorf("parseRange(%q, %d) = %d, %d, %v, %v; want %d, %d, %v, %v",
				tt.h, tt.size, start, length, partial, ok, tt.start, tt.length, tt.partial, tt.ok)
		}
	}
}
