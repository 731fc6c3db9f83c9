// Package hostpath checks host paths for bind mounts on the machine
// sandboxd runs on, for runtimes whose engine shares its filesystem.
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

// Check judges host path p for a bind mount as runtime.HostPaths
// describes, after resolving symlinks on this machine's filesystem: it
// must lie under one of allowed and neither be nor contain any of
// forbidden (nor any of never). It returns the mount with Source resolved and Beneath the
// resolved allowed prefix; a refusal is a *runtime.HostPathError.
func Check(p string, allowed, forbidden []string) (runtime.Mount, error) {
	refuse := func(notAllowed bool, format string, args ...any) (runtime.Mount, error) {
		return runtime.Mount{}, &runtime.HostPathError{NotAllowed: notAllowed, Reason: fmt.Sprintf(format, args...)}
	}
	resolved, err := Resolve(p)
	if err != nil {
		return refuse(false, "host path %q cannot be resolved: %v", p, err)
	}
	for _, f := range slices.Concat(never, forbidden) {
		rf, err := Resolve(f)
		if err != nil {
			rf = f
		}
		if Within(resolved, rf) || Within(rf, resolved) || Within(p, f) || Within(f, p) {
			return refuse(true, "host path %q would expose %s to the sandbox and is never allowed", p, f)
		}
	}
	prefix := ""
	for _, a := range allowed {
		ra, err := Resolve(filepath.Clean(a))
		if err != nil {
			continue
		}
		if Within(p, filepath.Clean(a)) && Within(resolved, ra) {
			prefix = ra
			break
		}
	}
	if prefix == "" {
		if len(allowed) == 0 {
			return refuse(true, "host path %q refused: host mounts are disabled; list allowed prefixes in [storage] allowed_host_paths", p)
		}
		return refuse(true, "host path %q (resolved %q) is not under [storage] allowed_host_paths %v", p, resolved, allowed)
	}
	// An early answer for the common mistakes; the runtime checks again
	// by descriptor, and creates a missing directory.
	fi, err := os.Stat(resolved)
	switch {
	case err == nil && !fi.IsDir() && !fi.Mode().IsRegular():
		return refuse(false, "host path %q is neither a directory nor a regular file", p)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return refuse(false, "host path %q: %v", p, err)
	}
	return runtime.Mount{Kind: runtime.MountHost, Source: resolved, Beneath: prefix}, nil
}

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
