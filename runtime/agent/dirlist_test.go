//go:build linux

package agent

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestListDirTypesAndErrors covers what TestDirectories does not: entry
// types, a symlink to a directory listed but not entered, a negative depth,
// and a subtree that cannot be read failing the whole listing (500, as
// execd) instead of coming back silently shorter.
func TestListDirTypesAndErrors(t *testing.T) {
	a := newTestAgent(t)
	root := filepath.Join(a.dir, "types")
	os.MkdirAll(filepath.Join(root, "dir", "inner"), 0o755)
	os.WriteFile(filepath.Join(root, "file"), []byte("x"), 0o644)
	os.Symlink(filepath.Join(root, "dir"), filepath.Join(root, "dirlink"))
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	list := func(q url.Values) *http.Response {
		return a.do(t, http.MethodGet, "/directories/list?"+q.Encode(), nil)
	}
	got := map[string]string{}
	for _, fi := range decode[[]fileInfo](t, list(url.Values{"path": {root}, "depth": {"5"}}), http.StatusOK) {
		rel, _ := filepath.Rel(root, fi.Path)
		got[rel] = fi.Type
	}
	want := map[string]string{"dir": "directory", "dir/inner": "directory", "dirlink": "symlink", "file": "file", "fifo": "other"}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %v (the symlink's target is not entered)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: type %q, want %q", k, got[k], v)
		}
	}
	wantError(t, list(url.Values{"path": {root}, "depth": {"-1"}}), http.StatusBadRequest, codeInvalidRequest)

	// A path longer than PATH_MAX cannot be opened, even by root.
	deep := filepath.Join(a.dir, "deep")
	os.Mkdir(deep, 0o755)
	fd, err := syscall.Open(deep, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("d", 250)
	for i := 0; i < 20; i++ {
		if err := syscall.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := syscall.Openat(fd, name, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		syscall.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	syscall.Close(fd)
	t.Cleanup(func() { removeDeep(deep, name) })
	wantError(t, list(url.Values{"path": {deep}, "depth": {"30"}}), http.StatusInternalServerError, codeRuntimeError)
	if n := len(decode[[]fileInfo](t, list(url.Values{"path": {deep}, "depth": {"3"}}), http.StatusOK)); n != 3 {
		t.Errorf("depth 3 of the deep tree: %d entries, want 3", n)
	}
}

// removeDeep removes a chain of directories too deep for os.RemoveAll's
// absolute paths, from the bottom up, by walking into it.
func removeDeep(top, name string) {
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	if os.Chdir(top) != nil {
		return
	}
	depth := 0
	for os.Chdir(name) == nil {
		depth++
	}
	for ; depth > 0; depth-- {
		os.Chdir("..")
		os.Remove(name)
	}
}

// TestReplaceOrderOfChecks: as in execd, a missing file is 404 before an
// empty old is 400; several files each get their count, a file without
// the text 0, and verbose must be exactly "true".
func TestReplaceOrderOfChecks(t *testing.T) {
	a := newTestAgent(t)
	f, g := filepath.Join(a.dir, "f"), filepath.Join(a.dir, "g")
	os.WriteFile(f, []byte("aaaa"), 0o644)
	os.WriteFile(g, []byte("b"), 0o644)
	wantError(t, a.post(t, "/files/replace", map[string]map[string]string{f + "x": {"old": ""}}), http.StatusNotFound, codeFileNotFound)
	got := decode[map[string]map[string]int](t, a.post(t, "/files/replace?verbose=true", map[string]map[string]string{f: {"old": "aa", "new": "c"}, g: {"old": "z"}}), http.StatusOK)
	if len(got) != 2 || got[f]["replacedCount"] != 2 || got[g]["replacedCount"] != 0 {
		t.Errorf("verbose answer %v, want f: 2 (non-overlapping), g: 0", got)
	}
	resp := a.post(t, "/files/replace?verbose=1", map[string]map[string]string{f: {"old": "c", "new": "d"}})
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || len(b) != 0 {
		t.Errorf("verbose=1: %s %q, want 200 and no body", resp.Status, b)
	}
}
