package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/runtime"
)

// LabelVolumeManaged marks named volumes that sandboxd created.
const LabelVolumeManaged = "opensandbox.io/volume-managed-by"

// forbiddenHostPaths can never be mounted, whatever the allow-list says:
// they hand the sandbox the Docker daemon or its storage.
var forbiddenHostPaths = []string{
	"/var/run/docker.sock", "/run/docker.sock", "/var/run/docker", "/run/docker",
	"/var/lib/docker", "/var/lib/containerd", "/run/containerd", "/var/run/containerd",
	"/proc", "/sys", "/dev",
}

// within reports whether p is base or below it.
func within(p, base string) bool {
	if base == "/" {
		return true
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// resolveExisting resolves symlinks in the longest existing prefix of p and
// appends the rest, so a path that does not exist yet is still judged by
// where it would really be created.
func resolveExisting(p string) (string, error) {
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

// engineHostPaths returns where this engine keeps its data and socket, as
// the runtime reports them. They are asked for once (the first time a host
// path is mounted) and kept; until the engine answers, no host path can be
// mounted. The lock is not held across the engine call, so a slow engine
// holds up no caller past its own deadline; callers that meet at the start
// may each ask.
func (m *Manager) engineHostPaths(ctx context.Context) ([]string, error) {
	m.engineMu.Lock()
	known := m.enginePaths
	m.engineMu.Unlock()
	if known != nil {
		return known, nil
	}
	paths, err := m.rt.EnginePaths(ctx)
	if err != nil {
		return nil, m.engineError(err, "ask the engine where it keeps its data")
	}
	m.engineMu.Lock()
	defer m.engineMu.Unlock()
	if m.enginePaths == nil {
		m.enginePaths = append([]string{}, paths...)
	}
	return m.enginePaths, nil
}

// checkHostPath validates a bind-mount source against the allow-list after
// symlink resolution. It returns the resolved path and the resolved allowed
// prefix it lies in: the runtime walks from that prefix to the path without
// following symlinks, creates what is missing there and mounts what it
// reached, so a path swapped after this check is not what gets mounted.
func (m *Manager) checkHostPath(ctx context.Context, name, p string) (resolved, prefix string, err error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.Contains(p, "\x00") {
		return "", "", errf(KindInvalid, CodeVolInvalidHostPath, "volume %q: host path %q must be absolute and normalised (no '..', '//' or trailing '/')", name, p)
	}
	resolved, err = resolveExisting(p)
	if err != nil {
		return "", "", errf(KindInvalid, CodeVolInvalidHostPath, "volume %q: host path %q cannot be resolved: %v", name, p, err)
	}
	engine, err := m.engineHostPaths(ctx)
	if err != nil {
		return "", "", err
	}
	forbidden := append(slices.Concat(forbiddenHostPaths, engine), m.cfg.Store.Dir)
	for _, f := range forbidden {
		rf, err := resolveExisting(f)
		if err != nil {
			rf = f
		}
		if within(resolved, rf) || within(rf, resolved) || within(p, f) || within(f, p) {
			return "", "", errf(KindInvalid, CodeVolHostNotAllowed, "volume %q: host path %q would expose %s to the sandbox and is never allowed", name, p, f)
		}
	}
	for _, a := range m.cfg.Storage.AllowedHostPaths {
		ra, err := resolveExisting(filepath.Clean(a))
		if err != nil {
			continue
		}
		if within(p, filepath.Clean(a)) && within(resolved, ra) {
			prefix = ra
			break
		}
	}
	if prefix == "" {
		if len(m.cfg.Storage.AllowedHostPaths) == 0 {
			return "", "", errf(KindInvalid, CodeVolHostNotAllowed, "volume %q: host path %q refused: host mounts are disabled; list allowed prefixes in [storage] allowed_host_paths", name, p)
		}
		return "", "", errf(KindInvalid, CodeVolHostNotAllowed, "volume %q: host path %q (resolved %q) is not under [storage] allowed_host_paths %v", name, p, resolved, m.cfg.Storage.AllowedHostPaths)
	}
	// An early answer for the common mistakes; the runtime checks again
	// by descriptor, and creates a missing directory.
	fi, err := os.Stat(resolved)
	switch {
	case err == nil && !fi.IsDir() && !fi.Mode().IsRegular():
		return "", "", errf(KindInvalid, CodeVolInvalidHostPath, "volume %q: host path %q is neither a directory nor a regular file", name, p)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return "", "", errf(KindInvalid, CodeVolInvalidHostPath, "volume %q: host path %q: %v", name, p, err)
	}
	return resolved, prefix, nil
}

// mountRefusal is the client error for a mount the runtime refused to
// make as checked, or nil if err is not one.
func mountRefusal(err error) *Error {
	var me *runtime.MountError
	if !errors.As(err, &me) {
		return nil
	}
	code := CodeVolHostNotAllowed
	if me.SubPath {
		code = CodeVolInvalidSubPath
	}
	return &Error{Kind: KindInvalid, Code: code, Message: "volume at " + me.Target + " refused: " + me.Reason, Err: err}
}

// preparedVolumes are the mounts of a create request.
type preparedVolumes struct {
	mounts  []runtime.Mount
	managed []string // named volumes to delete with the sandbox
	created []string // named volumes this request created: removed if the create fails
}

// prepareVolumes validates the requested volumes, creating named volumes as
// needed. On error it removes the volumes it created.
func (m *Manager) prepareVolumes(ctx context.Context, vols []Volume) (*preparedVolumes, error) {
	pv := &preparedVolumes{}
	if err := m.addVolumes(ctx, vols, pv); err != nil {
		m.removeVolumes(context.WithoutCancel(ctx), pv.created)
		return nil, err
	}
	return pv, nil
}

// removeVolumes removes named volumes, logging failures.
func (m *Manager) removeVolumes(ctx context.Context, names []string) {
	for _, v := range names {
		if err := m.rt.RemoveVolume(ctx, v); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			m.log.Warn("remove named volume", "volume", v, "err", err)
		}
	}
}

func (m *Manager) addVolumes(ctx context.Context, vols []Volume, pv *preparedVolumes) error {
	seen := map[string]bool{}
	for _, v := range vols {
		if err := validateVolumeShape(v, seen); err != nil {
			return err
		}
	}
	for _, v := range vols {
		switch {
		case v.Host != nil:
			src, prefix, err := m.checkHostPath(ctx, v.Name, v.Host.Path)
			if err != nil {
				return err
			}
			if v.SubPath != "" {
				src, prefix, err = m.checkHostPath(ctx, v.Name, filepath.Join(src, v.SubPath))
				if err != nil {
					return err
				}
			}
			pv.mounts = append(pv.mounts, runtime.Mount{Type: "bind", Source: src, Beneath: prefix, Target: v.MountPath, ReadOnly: v.ReadOnly})
		case v.PVC != nil:
			name := v.PVC.ClaimName
			create := v.PVC.CreateIfNotExists == nil || *v.PVC.CreateIfNotExists
			allowedExisting := slices.Contains(m.cfg.Storage.AllowedVolumes, name)
			created, labels, err := m.rt.EnsureVolume(ctx, name, create, map[string]string{LabelVolumeManaged: "server", LabelInstance: m.instance})
			if errors.Is(err, runtime.ErrNotFound) {
				return errf(KindInvalid, CodeVolPVCNotFound, "volume %q: named volume %q does not exist", v.Name, name)
			}
			if err != nil {
				return m.engineError(err, "prepare volume")
			}
			if created {
				pv.created = append(pv.created, name)
			}
			// Another instance's managed volume is not ours to mount or to
			// delete: the instance label decides, not the managed label.
			owned := created || (labels[LabelVolumeManaged] == "server" && labels[LabelInstance] == m.instance)
			if !owned && !allowedExisting {
				return errf(KindInvalid, CodeVolPVCNotAllowed, "volume %q: existing named volume %q was not created by this sandboxd instance; list it in [storage] allowed_volumes to allow it", v.Name, name)
			}
			if v.PVC.DeleteOnSandboxTermination && owned {
				pv.managed = append(pv.managed, name)
			}
			pv.mounts = append(pv.mounts, runtime.Mount{Type: "volume", Source: name, Target: v.MountPath, ReadOnly: v.ReadOnly, SubPath: v.SubPath})
		}
	}
	return nil
}
