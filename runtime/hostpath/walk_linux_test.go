package hostpath

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenBeneath(t *testing.T) {
	root := t.TempDir()
	base, outside := filepath.Join(root, "base"), filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(base, "dir", "deep"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"out": outside, "in": filepath.Join(base, "dir"), "dangling": filepath.Join(outside, "nothing")} {
		if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink in base itself is the operator's and is followed.
	alias := filepath.Join(root, "alias")
	if err := os.Symlink(base, alias); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		base, rel string
		ok        bool
		created   string // must exist afterwards
		absent    string // must not exist afterwards
	}{
		{base: base, rel: ".", ok: true},
		{base: base, rel: "dir/deep", ok: true},
		{base: base, rel: "file", ok: true},
		{base: alias, rel: "dir", ok: true},
		{base: base, rel: "new/deeper", ok: true, created: filepath.Join(base, "new", "deeper")},
		{base: base, rel: "out"},
		{base: base, rel: "out/made", absent: filepath.Join(outside, "made")},
		{base: base, rel: "in"},
		{base: base, rel: "in/deep"},
		{base: base, rel: "dangling", absent: filepath.Join(outside, "nothing")},
		{base: base, rel: "dangling/x", absent: filepath.Join(outside, "nothing")},
		{base: base, rel: "file/x"},
		{base: base, rel: "../outside"},
		{base: base, rel: "dir/../../outside"},
		{base: base, rel: "dir//deep"},
	}
	for _, tt := range tests {
		f, err := OpenBeneath(tt.base, tt.rel)
		if tt.ok != (err == nil) {
			t.Errorf("OpenBeneath(%s, %q): err %v, want ok=%v", tt.base, tt.rel, err, tt.ok)
		}
		if err == nil {
			if want := filepath.Join(base, tt.rel); f.Name() != want {
				t.Errorf("OpenBeneath(%s, %q) opened %s, want %s", tt.base, tt.rel, f.Name(), want)
			}
			f.Close()
		}
		if tt.created != "" {
			if fi, err := os.Lstat(tt.created); err != nil || !fi.IsDir() {
				t.Errorf("OpenBeneath(%s, %q) did not create %s: %v", tt.base, tt.rel, tt.created, err)
			}
		}
		if tt.absent != "" {
			if _, err := os.Lstat(tt.absent); !os.IsNotExist(err) {
				t.Errorf("OpenBeneath(%s, %q) created %s outside base", tt.base, tt.rel, tt.absent)
			}
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("%d entries appeared outside base", len(entries))
	}
}

// While another goroutine swaps base/sub (a directory) with base/link (a
// symlink out of base) with RENAME_EXCHANGE, what OpenBeneath opens is
// base/sub's directory or nothing, never the directory outside.
func TestOpenBeneathSwapRace(t *testing.T) {
	root := t.TempDir()
	base, outside := filepath.Join(root, "base"), filepath.Join(root, "outside")
	sub, link := filepath.Join(base, "sub"), filepath.Join(base, "link")
	for _, d := range []string{sub, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	var outsideSt unix.Stat_t
	if err := unix.Stat(outside, &outsideSt); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE) == nil {
				swaps.Add(1)
			}
		}
	}()
	for swaps.Load() == 0 {
		goruntime.Gosched()
	}
	opened, refused := 0, 0
	for i := 0; i < 2000; i++ {
		f, err := OpenBeneath(base, "sub")
		if err != nil {
			refused++
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		if st.Dev == outsideSt.Dev && st.Ino == outsideSt.Ino {
			t.Fatalf("try %d: OpenBeneath(base, sub) opened the directory outside base", i)
		}
		opened++
		f.Close()
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d opened, %d refused, %d swaps", opened, refused, swaps.Load())
}
