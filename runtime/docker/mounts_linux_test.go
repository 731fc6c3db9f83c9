package docker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/hostpath"
)

// A pin is the opened directory, whatever its path becomes afterwards.
func TestPin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pinning needs root")
	}
	root := t.TempDir()
	dir, outside, pins := filepath.Join(root, "dir"), filepath.Join(root, "outside"), filepath.Join(root, "pins")
	for _, d := range []string{dir, outside, pins} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "mine"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := hostpath.OpenBeneath(root, "dir")
	if err != nil {
		t.Fatal(err)
	}
	// Swapped for a symlink after the check.
	if err := os.Rename(dir, filepath.Join(root, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(pins, "p", "0")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	err = pin(f, target)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "mine")); err != nil {
		t.Errorf("the pin is not the opened directory: %v", err)
	}
	unpinAll(filepath.Join(pins, "p"))
	if _, err := os.Lstat(filepath.Join(pins, "p")); !os.IsNotExist(err) {
		t.Errorf("unpinAll left the pin directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "moved", "mine")); err != nil {
		t.Errorf("unpinAll touched the pinned directory's content: %v", err)
	}

	// A regular file is pinned onto a file.
	if err := os.WriteFile(filepath.Join(root, "moved", "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err = hostpath.OpenBeneath(root, "moved/f")
	if err != nil {
		t.Fatal(err)
	}
	err = pin(f, target)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "content" {
		t.Errorf("the file pin reads %q, %v", b, err)
	}
	unpinAll(filepath.Join(pins, "p"))
	if b, err := os.ReadFile(filepath.Join(root, "moved", "f")); err != nil || string(b) != "content" {
		t.Errorf("unpinAll touched the pinned file: %q, %v", b, err)
	}
}
