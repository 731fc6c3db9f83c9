package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime"
)

// nestedTree makes root/allowed/shared and root/outside (holding a file
// no mount may reach) and returns their paths.
func nestedTree(t testing.TB) (allowed, shared, outside string) {
	root := t.TempDir()
	allowed, outside = filepath.Join(root, "allowed"), filepath.Join(root, "outside")
	shared = filepath.Join(allowed, "shared")
	for _, d := range []string{filepath.Join(shared, "data"), filepath.Join(outside, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "data", "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	return allowed, shared, outside
}

// swapForSymlink does what a sandbox with allowed mounted read-write can:
// moves the inner prefix away and puts a symlink to outside in its place.
func swapForSymlink(t testing.TB, shared, outside string) {
	if err := os.Rename(shared, shared+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, shared); err != nil {
		t.Fatal(err)
	}
}

// notOutside fails the test if f is outside (or below it).
func notOutside(t testing.TB, f *os.File, outside string) {
	t.Helper()
	at, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		at = f.Name()
	}
	if Within(at, outside) {
		t.Fatalf("opened %s, below %s", at, outside)
	}
}

// TestNestedPrefixes is the attack on nested prefixes, with the prefixes
// listed in both orders: after the sandbox swaps the inner prefix for a
// symlink, a mount below the inner prefix reaches the inner prefix's own
// directory or nothing, never the symlink's target; and a sandboxd started
// after the swap refuses the configuration.
func TestNestedPrefixes(t *testing.T) {
	for _, order := range []string{"outer first", "inner first"} {
		t.Run(order, func(t *testing.T) {
			allowed, shared, outside := nestedTree(t)
			list := []string{allowed, shared}
			if order == "inner first" {
				slices.Reverse(list)
			}
			ps, err := Open(list)
			if err != nil {
				t.Fatal(err)
			}
			defer ps.Close()
			m, err := ps.Check(filepath.Join(shared, "data"), nil)
			if err != nil || m.Source != filepath.Join(shared, "data") || m.Beneath != shared {
				t.Fatalf("before the swap: Check = %+v, %v", m, err)
			}

			swapForSymlink(t, shared, outside)
			for _, rel := range []string{"data", "data/secret", "new"} {
				m, err := ps.Check(filepath.Join(shared, rel), nil)
				if err == nil {
					if Within(m.Source, outside) {
						t.Fatalf("Check(%s) = %s", rel, m.Source)
					}
					r, _ := filepath.Rel(m.Beneath, m.Source)
					if f, err := ps.OpenBeneath(m.Beneath, r); err == nil {
						notOutside(t, f, outside)
						f.Close()
					}
				}
			}
			if _, err := os.Lstat(filepath.Join(outside, "new")); !os.IsNotExist(err) {
				t.Errorf("a walk created %s/new", outside)
			}

			// sandboxd restarted after the swap.
			if ps2, err := Open(list); err == nil {
				ps2.Close()
				t.Fatalf("Open(%v) after the swap succeeded", list)
			} else if !strings.Contains(err.Error(), "symlink") {
				t.Errorf("Open after the swap: %v, want it to name the symlink", err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	root := t.TempDir()
	allowed, outside, other := filepath.Join(root, "allowed"), filepath.Join(root, "outside"), filepath.Join(root, "other")
	for _, d := range []string{filepath.Join(allowed, "dir"), outside, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(allowed, "file"), nil, 0o644))
	must(os.Symlink(outside, filepath.Join(allowed, "out")))
	must(os.Symlink(filepath.Join(allowed, "dir"), filepath.Join(allowed, "in")))
	// An operator's symlink outside every prefix, listed as a prefix.
	must(os.Symlink(other, filepath.Join(root, "alias")))
	ps, err := Open([]string{allowed, filepath.Join(root, "alias"), filepath.Join(root, "missing"), filepath.Join(allowed, "later")})
	must(err)
	defer ps.Close()
	tests := []struct {
		p          string
		source     string // "" = refused
		notAllowed bool
	}{
		{p: allowed, source: allowed},
		{p: filepath.Join(allowed, "dir"), source: filepath.Join(allowed, "dir")},
		{p: filepath.Join(allowed, "file"), source: filepath.Join(allowed, "file")},
		{p: filepath.Join(allowed, "new", "deep"), source: filepath.Join(allowed, "new", "deep")},
		{p: filepath.Join(root, "alias", "x"), source: filepath.Join(other, "x")},
		{p: filepath.Join(allowed, "out"), notAllowed: true},
		{p: filepath.Join(allowed, "out", "x"), notAllowed: true},
		{p: filepath.Join(allowed, "in"), notAllowed: true},
		{p: filepath.Join(allowed, "file", "x")},
		{p: filepath.Join(root, "missing", "x"), notAllowed: true},
		// A nested prefix missing at start leaves its outer prefix to judge.
		{p: filepath.Join(allowed, "later", "x"), source: filepath.Join(allowed, "later", "x")},
		{p: outside, notAllowed: true},
		{p: allowed + "2", notAllowed: true},
		{p: other, notAllowed: true},
	}
	for _, tt := range tests {
		m, err := ps.Check(tt.p, nil)
		var he *runtime.HostPathError
		switch {
		case tt.source != "" && (err != nil || m.Source != tt.source):
			t.Errorf("Check(%s) = %q, %v; want %q", tt.p, m.Source, err, tt.source)
		case tt.source == "" && (!errors.As(err, &he) || he.NotAllowed != tt.notAllowed):
			t.Errorf("Check(%s) = %+v, %v; want a refusal (not allowed %v)", tt.p, m, err, tt.notAllowed)
		}
	}
	if _, err := os.Lstat(filepath.Join(allowed, "new")); !os.IsNotExist(err) {
		t.Errorf("Check created %s/new", allowed)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("Check created %d entries outside", len(entries))
	}
}

// A prefix reached through a symlink that lies inside another prefix is
// refused at start, whatever the order; one reached through a symlink
// elsewhere is not.
func TestOpenRefusesSymlinkInsideAnotherPrefix(t *testing.T) {
	root := t.TempDir()
	a, target := filepath.Join(root, "a"), filepath.Join(root, "t")
	for _, d := range []string{a, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(target, filepath.Join(a, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(a, "link"), filepath.Join(root, "via")); err != nil {
		t.Fatal(err)
	}
	for _, list := range [][]string{
		{a, filepath.Join(a, "link")}, {filepath.Join(a, "link"), a},
		{a, filepath.Join(root, "via")}, {filepath.Join(root, "via"), a},
	} {
		if ps, err := Open(list); err == nil {
			ps.Close()
			t.Errorf("Open(%v) succeeded", list)
		}
	}
	ps, err := Open([]string{filepath.Join(a, "link")})
	if err != nil {
		t.Fatalf("a single prefix through a symlink: %v", err)
	}
	ps.Close()
}

// FuzzPrefixLayouts builds a tree of directories from the input, lists
// some of them as prefixes, lets a "sandbox" replace directories by
// symlinks to a directory outside every prefix (before and after start),
// and mounts paths below the prefixes: whatever the layout, nothing is
// opened or created outside, and a layout without symlinks always opens.
func FuzzPrefixLayouts(f *testing.F) {
	f.Add([]byte{2, 0, 0, 1, 1, 3, 1, 1, 1, 1, 0})       // a, a/b; both prefixes; swap a/b; mount below it
	f.Add([]byte{2, 1, 1, 0, 0, 3, 1, 0, 1, 0, 1})       // the other order
	f.Add([]byte{3, 0, 0, 1, 1, 2, 5, 7, 2, 1, 2, 1, 9}) // three levels
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(b)
		}
		root := t.TempDir()
		tree, outside := filepath.Join(root, "tree"), filepath.Join(root, "outside")
		if err := os.MkdirAll(filepath.Join(outside, "keep"), 0o755); err != nil {
			t.Fatal(err)
		}
		names := []string{"a", "b", "c"}
		var dirs []string
		for n := next()%6 + 1; n > 0; n-- {
			p, depth := tree, next()%3+1
			for i := 0; i < depth; i++ {
				p = filepath.Join(p, names[next()%len(names)])
			}
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, p)
		}
		var prefixes []string
		for i, mask := 0, next(); i < len(dirs); i++ {
			if mask&(1<<i) != 0 {
				prefixes = append(prefixes, dirs[i])
			}
		}
		// A sandbox can only replace what lies strictly below a prefix.
		swap := func() {
			d := dirs[next()%len(dirs)]
			if !slices.ContainsFunc(prefixes, func(p string) bool { return d != p && Within(d, p) }) {
				return
			}
			if os.Rename(d, d+".old") == nil {
				os.Symlink(outside, d)
			}
		}
		request := func(ps *Prefixes) {
			p := dirs[next()%len(dirs)]
			if next()%2 == 1 {
				p = filepath.Join(p, "x")
			}
			m, err := ps.Check(p, nil)
			if err != nil {
				return
			}
			if Within(m.Source, outside) {
				t.Fatalf("Check(%s) = %s", p, m.Source)
			}
			rel, err := filepath.Rel(m.Beneath, m.Source)
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("Check(%s) = %s, not below %s", p, m.Source, m.Beneath)
			}
			if f, err := ps.OpenBeneath(m.Beneath, rel); err == nil {
				notOutside(t, f, outside)
				f.Close()
			}
		}
		ps, err := Open(prefixes)
		if err != nil {
			t.Fatalf("Open(%v) of a tree without symlinks: %v", prefixes, err)
		}
		defer ps.Close()
		for ops := next() % 8; ops > 0; ops-- {
			if next()%2 == 0 {
				swap()
			} else {
				request(ps)
			}
		}
		// sandboxd restarted after the swaps.
		if ps2, err := Open(prefixes); err == nil {
			for ops := next() % 4; ops > 0; ops-- {
				request(ps2)
			}
			ps2.Close()
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 1 {
			t.Fatalf("%d entries in %s, want only keep", len(entries), outside)
		}
		if entries, _ := os.ReadDir(filepath.Join(outside, "keep")); len(entries) != 0 {
			t.Fatalf("%d entries created in %s/keep", len(entries), outside)
		}
	})
}
