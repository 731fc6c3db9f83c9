package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestArchivesAreReproducible: an archive's bytes depend on the files'
// contents, names and modes and the given time only, not on the files'
// own times or owners nor on when it is written.
func TestArchivesAreReproducible(t *testing.T) {
	dir := t.TempDir()
	bin, doc := filepath.Join(dir, "sandboxd"), filepath.Join(dir, "README.md")
	for _, f := range []string{bin, doc} {
		if err := os.WriteFile(f, []byte("content of "+f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files := []archiveFile{{"pkg/sandboxd", bin, 0o755}, {"pkg/README.md", doc, 0o644}}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	for _, tt := range []struct {
		name  string
		write func(io.Writer, []archiveFile, time.Time) error
		check func(t *testing.T, data []byte)
	}{
		{"tar.gz", writeTarGz, func(t *testing.T, data []byte) {
			gz, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if !gz.ModTime.IsZero() || gz.Name != "" {
				t.Errorf("gzip header carries time %v, name %q", gz.ModTime, gz.Name)
			}
			tr := tar.NewReader(gz)
			for i := 0; ; i++ {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if h.Name != files[i].name || h.Mode != files[i].mode || !h.ModTime.Equal(mtime) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
					t.Errorf("entry %d: %+v", i, h)
				}
			}
		}},
		{"zip", writeZip, func(t *testing.T, data []byte) {
			zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range zr.File {
				if f.Name != files[i].name || f.Mode().Perm() != os.FileMode(files[i].mode) || !f.Modified.Equal(mtime) {
					t.Errorf("entry %d: %s %v %v", i, f.Name, f.Mode(), f.Modified)
				}
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var first, second bytes.Buffer
			if err := tt.write(&first, files, mtime); err != nil {
				t.Fatal(err)
			}
			later := time.Now().Add(time.Hour)
			for _, f := range files {
				if err := os.Chtimes(f.src, later, later); err != nil {
					t.Fatal(err)
				}
			}
			if err := tt.write(&second, files, mtime); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first.Bytes(), second.Bytes()) {
				t.Error("two archives of the same files differ")
			}
			tt.check(t, first.Bytes())
		})
	}
}
