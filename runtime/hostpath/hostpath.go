// Package hostpath checks host paths for bind mounts on the machine
// sandboxd runs on, for runtimes whose engine shares its filesystem.
//
// The allowed prefixes are resolved and opened once, when sandboxd
// starts (Open), and every request is walked from the kept descriptor
// without following symlinks. A prefix is never resolved again: a sandbox
// that has one prefix mounted read-write can replace anything below it by
// a symlink, including another prefix nested in it, and a per-request
// resolution would then judge (and mount) wherever that symlink points.
package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/runtime"
)

// never can be mounted, whatever the allow-list says: they hand the
// sandbox the kernel's pseudo filesystems, or a local engine (Docker's or
// containerd's default data and socket paths).
var never = []string{
	"/var/run/docker.sock", "/run/docker.sock", "/var/run/docker", "/run/docker",
	"/var/lib/docker", "/var/lib/containerd", "/run/containerd", "/var/run/containerd",
	"/proc", "/sys", "/dev",
}

// Prefixes are the allowed prefixes ([storage] allowed_host_paths), each
// opened once.
type Prefixes struct {
	list []prefix // longest configured path first: the closest prefix wins
}

type prefix struct {
	path string   // as configured, cleaned
	real string   // where it was when opened
	dir  *os.File // the opened directory; nil if it did not exist then
}

// Open resolves and opens each allowed prefix. A prefix reached through a
// symlink that lies inside another allowed prefix is refused: a sandbox
// with that other prefix mounted could have replaced it (before this
// start, too), so the operator must list the directory it points to. A
// prefix that does not exist is kept closed: paths below it are refused.
func Open(allowed []string) (*Prefixes, error) {
	ps := &Prefixes{}
	var paths []string
	for _, a := range allowed {
		if a = filepath.Clean(a); !slices.Contains(paths, a) {
			paths = append(paths, a)
		}
	}
	// Where the others are, to know which symlinks a sandbox could own;
	// an unresolvable one is judged by its name alone.
	others := make(map[string][]string, len(paths))
	for _, a := range paths {
		for _, o := range paths {
			if o == a {
				continue
			}
			others[a] = append(others[a], o)
			if r, err := filepath.EvalSymlinks(o); err == nil && r != o {
				others[a] = append(others[a], r)
			}
		}
	}
	for _, a := range paths {
		f, real, err := openPrefix(a, others[a])
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			ps.Close()
			return nil, fmt.Errorf("[storage] allowed_host_paths: %w", err)
		}
		ps.list = append(ps.list, prefix{path: a, real: real, dir: f})
	}
	slices.SortStableFunc(ps.list, func(x, y prefix) int { return len(y.path) - len(x.path) })
	return ps, nil
}

// Close releases the prefixes' descriptors.
func (ps *Prefixes) Close() error {
	for _, p := range ps.list {
		if p.dir != nil {
			p.dir.Close()
		}
	}
	return nil
}

// Check judges host path p (absolute, normalised) for a bind mount as
// runtime.HostPaths describes: it must lie below one of the prefixes by
// name, be reached from that prefix's opened directory without a symlink,
// and neither be nor contain any of forbidden (nor any of never). It
// returns the mount with Source where it is and Beneath the prefix's
// opened directory; a refusal is a *runtime.HostPathError.
func (ps *Prefixes) Check(p string, forbidden []string) (runtime.Mount, error) {
	refuse := func(notAllowed bool, format string, args ...any) (runtime.Mount, error) {
		return runtime.Mount{}, &runtime.HostPathError{NotAllowed: notAllowed, Reason: fmt.Sprintf(format, args...)}
	}
	// The closest prefix that was there at start.
	i := slices.IndexFunc(ps.list, func(a prefix) bool { return a.dir != nil && Within(p, a.path) })
	if i < 0 {
		if j := slices.IndexFunc(ps.list, func(a prefix) bool { return Within(p, a.path) }); j >= 0 {
			return refuse(true, "host path %q refused: the allowed prefix %s did not exist when sandboxd started (create it and restart sandboxd)", p, ps.list[j].path)
		}
		if len(ps.list) == 0 {
			return refuse(true, "host path %q refused: host mounts are disabled; list allowed prefixes in [storage] allowed_host_paths", p)
		}
		return refuse(true, "host path %q is not under [storage] allowed_host_paths %v", p, ps.paths())
	}
	a := ps.list[i]
	rel, _ := filepath.Rel(a.path, p)
	source := filepath.Join(a.real, rel)
	for _, f := range slices.Concat(never, forbidden) {
		rf, err := Resolve(f)
		if err != nil {
			rf = f
		}
		if Within(source, rf) || Within(rf, source) || Within(p, f) || Within(f, p) {
			return refuse(true, "host path %q would expose %s to the sandbox and is never allowed", p, f)
		}
	}
	// An early answer for the common mistakes; the runtime walks again
	// (Prefixes.OpenBeneath), creates a missing directory, and mounts what
	// it reached.
	if err := lookBeneath(a.dir, rel); err != nil {
		return refuse(errors.Is(err, errSymlink), "host path %q: %v", p, err)
	}
	return runtime.Mount{Kind: runtime.MountHost, Source: source, Beneath: a.real}, nil
}

// OpenBeneath opens rel below the prefix whose opened directory is at
// beneath (a Mount's Beneath) as the package OpenBeneath does, walking
// from the descriptor kept since start.
func (ps *Prefixes) OpenBeneath(beneath, rel string) (*os.File, error) {
	for _, a := range ps.list {
		if a.dir != nil && a.real == beneath {
			return walkBeneath(a.dir, rel)
		}
	}
	return nil, fmt.Errorf("%s is not an allowed prefix opened at start", beneath)
}

func (ps *Prefixes) paths() []string {
	out := make([]string, len(ps.list))
	for i, a := range ps.list {
		out[i] = a.path
	}
	return out
}

// OpenBeneath opens base (a volume's mountpoint: the engine's choice, so
// symlinks in it are followed), then rel below it one component at a time
// without following symlinks, creating missing directories. The result is
// a directory or a regular file, whose path by descriptor is base/rel.
func OpenBeneath(base, rel string) (*os.File, error) {
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", base, err)
	}
	dir, err := openDir(realBase)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return walkBeneath(dir, rel)
}

// errKind is a path that exists but cannot be mounted; errSymlink a
// symlink met below a prefix.
var (
	errKind    = errors.New("neither a directory nor a regular file")
	errSymlink = errors.New("is a symlink, and host paths are reached below an allowed prefix without following symlinks")
)

// Within reports whether p is base or below it.
func Within(p, base string) bool {
	if base == "/" {
		return true
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// Resolve resolves symlinks in the longest existing prefix of p and
// appends the rest, so a path that does not exist yet is still judged by
// where it would really be created.
func Resolve(p string) (string, error) {
	rest := ""
	cur := p
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// components splits a normalised relative path; "." is none.
func components(rel string) ([]string, error) {
	if rel == "." || rel == "" {
		return nil, nil
	}
	names := strings.Split(filepath.ToSlash(rel), "/")
	for _, n := range names {
		if n == "" || n == "." || n == ".." {
			return nil, fmt.Errorf("%q is not a normalised relative path", rel)
		}
	}
	return names, nil
}
