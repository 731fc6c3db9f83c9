//go:build linux

package agent

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// uploadPart is one part of an upload, in the order it is sent.
type uploadPart struct {
	name, filename, content string
}

// uploadBody builds multipart/form-data the way the Python SDK does: both
// metadata and file parts carry a filename.
func uploadBody(t *testing.T, parts []uploadPart) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		disp := fmt.Sprintf(`form-data; name=%q`, p.name)
		if p.filename != "" {
			disp += fmt.Sprintf(`; filename=%q`, p.filename)
		}
		h.Set("Content-Disposition", disp)
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.content)
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

func meta(path string, mode int) uploadPart {
	return uploadPart{"metadata", "metadata", fmt.Sprintf(`{"path":%q,"owner":null,"group":null,"mode":%d}`, path, mode)}
}

func file(path, content string) uploadPart {
	return uploadPart{"file", path, content}
}

func (a *testAgent) upload(t *testing.T, parts []uploadPart) *http.Response {
	t.Helper()
	ct, body := uploadBody(t, parts)
	resp, err := http.Post(a.url+"/files/upload", ct, body)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (a *testAgent) info(t *testing.T, paths ...string) map[string]fileInfo {
	t.Helper()
	q := url.Values{"path": paths}
	return decode[map[string]fileInfo](t, a.do(t, http.MethodGet, "/files/info?"+q.Encode(), nil), http.StatusOK)
}

func TestUpload(t *testing.T) {
	a := newTestAgent(t)
	binary := make([]byte, 3<<20)
	rand.Read(binary)
	p1 := filepath.Join(a.dir, "a", "b", "bin")
	p2 := filepath.Join(a.dir, "empty")
	p3 := filepath.Join(a.dir, "exec.sh")
	resp := a.upload(t, []uploadPart{
		meta(p1, 644), file(p1, string(binary)),
		meta(p2, 600), file(p2, ""),
		meta(p3, 0), file(p3, "#!/bin/sh\n"),
	})
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upload: %s %s", resp.Status, b)
	}
	for _, c := range []struct {
		path    string
		content []byte
		mode    int
	}{{p1, binary, 644}, {p2, nil, 600}, {p3, []byte("#!/bin/sh\n"), 644}} {
		got, err := os.ReadFile(c.path)
		if err != nil || !bytes.Equal(got, c.content) {
			t.Errorf("%s: %d bytes, err %v; want %d bytes", c.path, len(got), err, len(c.content))
		}
		if fi := a.info(t, c.path)[c.path]; fi.Mode != c.mode || fi.Type != "file" || fi.Size != int64(len(c.content)) {
			t.Errorf("%s: info %+v, want mode %d", c.path, fi, c.mode)
		}
	}

	// Uploading again truncates; a file part may come before its metadata.
	resp = a.upload(t, []uploadPart{file(p1, "short"), meta(p1, 640)})
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("reordered upload: %s %s", resp.Status, b)
	}
	if got, _ := os.ReadFile(p1); string(got) != "short" {
		t.Fatalf("after overwrite: %q", got)
	}
	if fi := a.info(t, p1)[p1]; fi.Mode != 640 {
		t.Fatalf("mode %d, want 640", fi.Mode)
	}
}

func TestUploadErrors(t *testing.T) {
	a := newTestAgent(t)
	p := filepath.Join(a.dir, "f")
	tests := []struct {
		name  string
		parts []uploadPart
		code  string
	}{
		{"no metadata", []uploadPart{file(p, "x")}, codeInvalidFileMetadata},
		{"metadata as a plain field", []uploadPart{{"metadata", "", `{"path":"` + p + `"}`}, file(p, "x")}, codeInvalidFileMetadata},
		{"no file", []uploadPart{meta(p, 644)}, codeInvalidFileContent},
		{"count mismatch", []uploadPart{meta(p, 644), file(p, "x"), meta(p, 644)}, codeInvalidFile},
		{"bad metadata", []uploadPart{{"metadata", "metadata", "{"}, file(p, "x")}, codeInvalidFileMetadata},
		{"empty path", []uploadPart{meta("", 644), file(p, "x")}, codeInvalidFileMetadata},
		{"mode digit 9", []uploadPart{meta(p, 649), file(p, "x")}, codeInvalidFileMetadata},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, a.upload(t, tt.parts), http.StatusBadRequest, tt.code)
		})
	}
	resp, err := http.Post(a.url+"/files/upload", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantError(t, resp, http.StatusBadRequest, codeInvalidFile)
}

func TestDownload(t *testing.T) {
	a := newTestAgent(t)
	content := make([]byte, 1<<20)
	rand.Read(content)
	p := filepath.Join(a.dir, "data.bin")
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	get := func(path, rng string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, a.url+path, nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	q := "/files/download?path=" + url.QueryEscape(p)
	tests := []struct {
		rng    string
		status int
		body   []byte
	}{
		{"", http.StatusOK, content},
		{"bytes=2-5", http.StatusPartialContent, content[2:6]},
		{"bytes=-3", http.StatusPartialContent, content[len(content)-3:]},
		{"bytes=1048570-", http.StatusPartialContent, content[1048570:]},
		{"bytes=2000000-3000000", http.StatusRequestedRangeNotSatisfiable, nil},
	}
	for _, tt := range tests {
		resp := get(q, tt.rng)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tt.status {
			t.Errorf("range %q: status %d, want %d", tt.rng, resp.StatusCode, tt.status)
			continue
		}
		if tt.body != nil && (!bytes.Equal(body, tt.body) || resp.ContentLength != int64(len(tt.body))) {
			t.Errorf("range %q: %d bytes (Content-Length %d), want %d", tt.rng, len(body), resp.ContentLength, len(tt.body))
		}
	}
	resp := get(q, "")
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != "application/octet-stream" || cd != `attachment; filename="data.bin"` {
		t.Errorf("headers %q %q", ct, cd)
	}
	wantError(t, get("/files/download?path="+url.QueryEscape(filepath.Join(a.dir, "nope")), ""), http.StatusNotFound, codeFileNotFound)
	wantError(t, get("/files/download", ""), http.StatusBadRequest, codeMissingQuery)
	wantError(t, get("/files/download?path="+url.QueryEscape(a.dir), ""), http.StatusBadRequest, codeInvalidFile)
}

func TestContentDisposition(t *testing.T) {
	tests := map[string]string{
		"a.txt":    `attachment; filename="a.txt"`,
		`q"b\.txt`: `attachment; filename="q\"b\\.txt"`,
		"é t.txt":  `attachment; filename="%C3%A9%20t.txt"; filename*=UTF-8''%C3%A9%20t.txt`,
	}
	for in, want := range tests {
		if got := contentDisposition(in); got != want {
			t.Errorf("%q: got %s, want %s", in, got, want)
		}
	}
}

func TestFilesInfo(t *testing.T) {
	a := newTestAgent(t)
	f := filepath.Join(a.dir, "f")
	locked := filepath.Join(a.dir, "locked")
	link := filepath.Join(a.dir, "link")
	for _, p := range []string{f, locked} {
		if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	got := a.info(t, f, locked, link, a.dir)
	tests := []struct {
		path, typ string
		mode      int
	}{{f, "file", 644}, {locked, "file", 0}, {link, "symlink", 777}, {a.dir, "directory", 700}}
	for _, tt := range tests {
		fi, ok := got[tt.path]
		if !ok {
			t.Fatalf("no info for %s in %v", tt.path, got)
		}
		if fi.Path != tt.path || fi.Type != tt.typ || fi.Mode != tt.mode || fi.Owner == "" || fi.Group == "" ||
			fi.ModifiedAt.IsZero() || fi.CreatedAt.IsZero() {
			t.Errorf("%s: %+v, want type %s mode %d", tt.path, fi, tt.typ, tt.mode)
		}
	}
	if os.Getuid() == 0 && got[f].Owner != "root" {
		t.Errorf("owner %q, want root", got[f].Owner)
	}
	if got := a.info(t); len(got) != 0 {
		t.Errorf("no path: %v, want {}", got)
	}
	wantError(t, a.do(t, http.MethodGet, "/files/info?path="+url.QueryEscape(f)+"&path="+url.QueryEscape(f+".missing"), nil), http.StatusNotFound, codeFileNotFound)
}

func TestRemoveFiles(t *testing.T) {
	a := newTestAgent(t)
	f := filepath.Join(a.dir, "f")
	os.WriteFile(f, nil, 0o644)
	q := url.Values{"path": {f, filepath.Join(a.dir, "missing")}}
	if resp := a.do(t, http.MethodDelete, "/files?"+q.Encode(), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %s", resp.Status)
	}
	if _, err := os.Stat(f); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
	wantError(t, a.do(t, http.MethodDelete, "/files?path="+url.QueryEscape(a.dir), nil), http.StatusInternalServerError, codeRuntimeError)
}

func TestMoveFiles(t *testing.T) {
	a := newTestAgent(t)
	src := filepath.Join(a.dir, "src")
	other := filepath.Join(a.dir, "other")
	os.WriteFile(src, []byte("data"), 0o644)
	os.WriteFile(other, nil, 0o644)
	dest := filepath.Join(a.dir, "new", "dir", "dest")
	if resp := a.post(t, "/files/mv", []map[string]string{{"src": src, "dest": dest}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("mv: %s", resp.Status)
	}
	if got, err := os.ReadFile(dest); err != nil || string(got) != "data" {
		t.Fatalf("dest: %q %v", got, err)
	}
	wantError(t, a.post(t, "/files/mv", []map[string]string{{"src": src, "dest": dest}}), http.StatusNotFound, codeFileNotFound)
	wantError(t, a.post(t, "/files/mv", []map[string]string{{"src": other, "dest": dest}}), http.StatusInternalServerError, codeRuntimeError)
}

func TestPermissions(t *testing.T) {
	a := newTestAgent(t)
	f := filepath.Join(a.dir, "f")
	os.WriteFile(f, nil, 0o644)
	body := map[string]transfer.Permission{f: {Mode: 755, Owner: "65534", Group: "65534"}}
	if os.Getuid() != 0 {
		body[f] = transfer.Permission{Mode: 755}
	}
	if resp := a.post(t, "/files/permissions", body); resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("permissions: %s %s", resp.Status, b)
	}
	fi := a.info(t, f)[f]
	if fi.Mode != 755 {
		t.Fatalf("mode %d, want 755", fi.Mode)
	}
	if os.Getuid() == 0 && (fi.Owner == "root" || fi.Group == "root") {
		t.Fatalf("owner %s:%s, want 65534", fi.Owner, fi.Group)
	}
	wantError(t, a.post(t, "/files/permissions", map[string]transfer.Permission{f + ".missing": {Mode: 600}}), http.StatusNotFound, codeFileNotFound)
}

func TestSearchFiles(t *testing.T) {
	a := newTestAgent(t)
	for _, p := range []string{"a.py", "b.txt", "sub/c.py", "sub/deeper/d.go", "sub/e.TXT"} {
		full := filepath.Join(a.dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		os.WriteFile(full, nil, 0o644)
	}
	tests := []struct {
		pattern string
		want    []string
	}{
		{"", []string{"a.py", "b.txt", "sub/c.py", "sub/deeper/d.go", "sub/e.TXT"}},
		{"**", []string{"a.py", "b.txt", "sub/c.py", "sub/deeper/d.go", "sub/e.TXT"}},
		{"*.py", []string{"a.py", "sub/c.py"}},
		{"**/*.py", []string{"a.py", "sub/c.py"}},
		{"sub/*.py", nil}, // only base names are matched
		{"*.{go,txt}", []string{"b.txt", "sub/deeper/d.go"}},
		{"?.TXT", []string{"sub/e.TXT"}},
		{"nothing*", nil},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			q := url.Values{"path": {a.dir}, "pattern": {tt.pattern}}
			res := decode[[]fileInfo](t, a.do(t, http.MethodGet, "/files/search?"+q.Encode(), nil), http.StatusOK)
			var got []string
			for _, fi := range res {
				rel, _ := filepath.Rel(a.dir, fi.Path)
				got = append(got, rel)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	wantError(t, a.do(t, http.MethodGet, "/files/search?path="+url.QueryEscape(a.dir)+"&pattern=%5B", nil), http.StatusBadRequest, codeInvalidRequest)
	wantError(t, a.do(t, http.MethodGet, "/files/search", nil), http.StatusBadRequest, codeMissingQuery)
	wantError(t, a.do(t, http.MethodGet, "/files/search?path="+url.QueryEscape(a.dir+"/nope"), nil), http.StatusNotFound, codeFileNotFound)
}

func TestExpandBraces(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  bool
	}{
		{"plain", []string{"plain"}, false},
		{"a{b,c}d", []string{"abd", "acd"}, false},
		{"{a,b{c,d}}", []string{"a", "bc", "bd"}, false},
		{`\{a,b}`, nil, true},
		{"{a,b", nil, true},
		{"a}", nil, true},
		{"{x}", []string{"x"}, false},
	}
	for _, tt := range tests {
		got, err := expandBraces(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %q, %v; want %q (error %v)", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestReplaceInFiles(t *testing.T) {
	a := newTestAgent(t)
	f := filepath.Join(a.dir, "f")
	os.WriteFile(f, []byte("foo bar foo"), 0o600)
	resp := a.post(t, "/files/replace?verbose=true", map[string]map[string]string{f: {"old": "foo", "new": "baz"}})
	got := decode[map[string]map[string]int](t, resp, http.StatusOK)
	if got[f]["replacedCount"] != 2 {
		t.Fatalf("verbose answer %v", got)
	}
	if b, _ := os.ReadFile(f); string(b) != "baz bar baz" {
		t.Fatalf("content %q", b)
	}
	if fi := a.info(t, f)[f]; fi.Mode != 600 {
		t.Fatalf("mode changed to %d", fi.Mode)
	}
	resp = a.post(t, "/files/replace", map[string]map[string]string{f: {"old": "bar", "new": ""}})
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || len(b) != 0 {
		t.Fatalf("non-verbose answer %s %q", resp.Status, b)
	}
	if b, _ := os.ReadFile(f); string(b) != "baz  baz" {
		t.Fatalf("content %q", b)
	}
	wantError(t, a.post(t, "/files/replace", map[string]map[string]string{f: {"old": ""}}), http.StatusBadRequest, codeInvalidRequest)
	wantError(t, a.post(t, "/files/replace", map[string]map[string]string{f + "x": {"old": "a"}}), http.StatusNotFound, codeFileNotFound)
}

func TestDirectories(t *testing.T) {
	a := newTestAgent(t)
	root := filepath.Join(a.dir, "root")
	if resp := a.post(t, "/directories", map[string]transfer.Permission{filepath.Join(root, "b", "deep"): {Mode: 750}, filepath.Join(root, "a"): {}}); resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("mkdir: %s %s", resp.Status, b)
	}
	if fi := a.info(t, filepath.Join(root, "b", "deep"))[filepath.Join(root, "b", "deep")]; fi.Mode != 750 || fi.Type != "directory" {
		t.Fatalf("deep: %+v", fi)
	}
	os.WriteFile(filepath.Join(root, "a", "file"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "c"), nil, 0o644)
	os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "link"))

	tests := []struct {
		depth string
		want  []string
	}{
		{"", []string{"a", "b", "c", "link"}},
		{"1", []string{"a", "b", "c", "link"}},
		{"2", []string{"a", "a/file", "b", "b/deep", "c", "link"}},
		{"0", nil},
	}
	for _, tt := range tests {
		q := url.Values{"path": {root}}
		if tt.depth != "" {
			q.Set("depth", tt.depth)
		}
		res := decode[[]fileInfo](t, a.do(t, http.MethodGet, "/directories/list?"+q.Encode(), nil), http.StatusOK)
		var got []string
		for _, fi := range res {
			rel, _ := filepath.Rel(root, fi.Path)
			got = append(got, rel)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("depth %q: got %q, want %q", tt.depth, got, tt.want)
		}
	}
	wantError(t, a.do(t, http.MethodGet, "/directories/list?path="+url.QueryEscape(filepath.Join(root, "link")), nil), http.StatusBadRequest, codeInvalidRequest)
	wantError(t, a.do(t, http.MethodGet, "/directories/list?path="+url.QueryEscape(filepath.Join(root, "c")), nil), http.StatusBadRequest, codeInvalidRequest)
	wantError(t, a.do(t, http.MethodGet, "/directories/list?path="+url.QueryEscape(filepath.Join(root, "nope")), nil), http.StatusNotFound, codeFileNotFound)
	wantError(t, a.do(t, http.MethodGet, "/directories/list?path="+url.QueryEscape(root)+"&depth=x", nil), http.StatusBadRequest, codeInvalidRequest)
	wantError(t, a.do(t, http.MethodGet, "/directories/list", nil), http.StatusBadRequest, codeMissingQuery)

	if resp := a.do(t, http.MethodDelete, "/directories?path="+url.QueryEscape(root), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("rmdir: %s", resp.Status)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("directory still there: %v", err)
	}
}

func TestOctalDigits(t *testing.T) {
	for _, m := range []os.FileMode{0, 0o644, 0o755, 0o777, 0o7} {
		n := octalDigits(m)
		back, err := fileMode(n)
		if err != nil || back != m {
			t.Errorf("%o → %d → %o, %v", m, n, back, err)
		}
	}
	if m, err := fileMode(4755); err != nil || m != os.ModeSetuid|0o755 {
		t.Errorf("4755 → %v, %v", m, err)
	}
	for _, bad := range []int{8, 19, 99999, -1} {
		if _, err := fileMode(bad); err == nil {
			t.Errorf("%d accepted", bad)
		}
	}
}
