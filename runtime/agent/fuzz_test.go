//go:build linux

package agent

import (
	"io/fs"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// FuzzUploadMeta feeds arbitrary metadata parts to the upload parser: a
// refusal is a 400 INVALID_FILE_METADATA; an accepted part has a path that
// expands to an absolute one and a mode that parses.
func FuzzUploadMeta(f *testing.F) {
	for _, s := range []string{
		`{"path":"/tmp/a.txt","mode":644}`, `{"path":"/tmp/a","owner":"root","group":"0","mode":4755}`,
		`{"path":""}`, `{"path":"x","mode":999}`, `{"path":"~/x","mode":-1}`, `{"path":"$HOME/x"}`, `{"path":"${NOPE}/x"}`,
		`{"path":"/a","mode":1e30}`, `{"path":1}`, `null`, `[]`, ``, `{"path":"/a\u0000b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		meta, herr := transfer.ParseMeta(b)
		if herr != nil {
			if herr.Status != http.StatusBadRequest || herr.Code != codeInvalidFileMetadata || herr.Message == "" {
				t.Fatalf("ParseMeta(%q) refused with %+v, want a 400 %s", b, herr, codeInvalidFileMetadata)
			}
			return
		}
		if meta.Path == "" {
			t.Fatalf("ParseMeta(%q) accepted an empty path", b)
		}
		if _, err := fileMode(meta.Mode); meta.Mode != 0 && err != nil {
			t.Fatalf("ParseMeta(%q) accepted mode %d: %v", b, meta.Mode, err)
		}
		if p, err := absPath(meta.Path); err == nil && !filepath.IsAbs(p) {
			t.Fatalf("absPath(%q) = %q, not absolute", meta.Path, p)
		}
	})
}

// FuzzParseOctalDigits checks execd's "octal digits as a decimal" modes:
// an accepted mode holds only permission and setuid/setgid/sticky bits, and
// plain permissions read back as the same digits.
func FuzzParseOctalDigits(f *testing.F) {
	for _, n := range []int{0, 644, 755, 777, 1777, 4755, 7777, 8, 800, 10000, -644} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int) {
		mode, err := fileMode(n)
		if err != nil {
			return
		}
		if extra := mode &^ (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky); extra != 0 {
			t.Fatalf("fileMode(%d) = %v, with bits %v beyond a file mode", n, mode, extra)
		}
		if n <= 777 && octalDigits(mode) != n {
			t.Fatalf("fileMode(%d) = %o, which reads back as %d", n, mode, octalDigits(mode))
		}
	})
}
