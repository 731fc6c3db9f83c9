package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/versions"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/hostpath"
)

// Host mounts are a time-of-check/time-of-use problem: lifecycle checks a
// path, Docker resolves the same string again when the container starts,
// and a sandbox that can write a directory on that path (it has a parent
// mounted read-write) can swap a component for a symlink in between
// (renameat2 RENAME_EXCHANGE in a loop), so that Docker mounts the host's
// `/` instead. Two ways out, chosen once per runtime:
//
//   - pinned (sandboxd is root in the engine's mount namespace): the
//     checked directory is opened component by component without
//     following symlinks, and that descriptor is bind-mounted onto a
//     directory under sandboxd's state dir, which no sandbox can reach.
//     Docker is given that directory: whatever happens to the original
//     path afterwards, the engine mounts the directory that was opened.
//     The pin stays while the container exists (Docker mounts the source
//     again for its archive API and on a restart) and goes with it.
//   - refused (no privilege, or the engine lives elsewhere): Docker gets
//     the path string, but only when no container has a read-write bind
//     mount above it, i.e. when no sandbox can swap any part of it.
//
// Volume subPath on engines before API 1.45 (which ignore the option and
// would mount the whole volume) is bound from the volume's mountpoint the
// pinned way, or refused.

// subPathAPI is the first Engine API version that honours
// VolumeOptions.Subpath.
const subPathAPI = "1.45"

// engineHost says whether sandboxd runs as root on the engine's own host
// (whyNot nil), which both pinned mounts and the agent's direct path
// (direct.go) need, or why not. It is decided once; err is an engine
// that did not answer, which is asked again next time.
func (d *Docker) engineHost(ctx context.Context) (whyNot, err error) {
	if err := d.hostMu.lock(ctx); err != nil {
		return nil, wrap(err, "wait for docker info")
	}
	defer d.hostMu.unlock()
	if d.hostDecided {
		return d.hostErr, nil
	}
	if sock, ok := strings.CutPrefix(d.cli.DaemonHost(), "unix://"); !ok {
		d.hostErr = fmt.Errorf("the engine at %s is not on this host", d.cli.DaemonHost())
	} else {
		cctx, cancel := d.call(ctx)
		info, err := d.cli.Info(cctx)
		cancel()
		switch {
		case err != nil:
			return nil, wrap(err, "docker info")
		case strings.Contains(info.OperatingSystem, "Docker Desktop"):
			// Its socket is a proxy on this host; the engine is in a VM.
			d.hostErr = errors.New("the engine runs in Docker Desktop's VM")
		default:
			d.hostErr = onEngineHost(sock)
		}
	}
	d.hostDecided = true
	return d.hostErr, nil
}

// pinner says whether this runtime can pin mounts (whyNot nil) or why
// not; err is an engine that did not answer.
func (d *Docker) pinner(ctx context.Context) (whyNot, err error) {
	if d.mountDir == "" {
		return errors.New("no state directory to pin mounts in"), nil
	}
	if whyNot, err := d.engineHost(ctx); whyNot != nil || err != nil {
		return whyNot, err
	}
	if err := os.MkdirAll(d.mountDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", d.mountDir, err), nil
	}
	return nil, nil
}

// planMounts turns the spec's mounts into Docker's, pinning what needs it
// under <mountDir>/<name>. It returns the pin directory ("" if none), for
// the caller to release if the container is not made.
func (d *Docker) planMounts(ctx context.Context, name string, ms []runtime.Mount) ([]mount.Mount, string, error) {
	var out []mount.Mount
	pinDir := ""
	var containers []container.Summary // listed once, in the refused mode
	listed := false
	fail := func(err error) ([]mount.Mount, string, error) {
		if pinDir != "" {
			unpinAll(pinDir)
		}
		return nil, "", err
	}
	for i, m := range ms {
		mm := mount.Mount{Type: mount.TypeVolume, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly}
		base, rel := "", ""
		switch {
		case m.Kind == runtime.MountHost:
			r, err := filepath.Rel(m.Beneath, m.Source)
			if m.Beneath == "" || err != nil || r == ".." || strings.HasPrefix(r, "../") {
				return fail(&runtime.MountError{Target: m.Target, Reason: fmt.Sprintf("host path %s is not below the checked directory %q", m.Source, m.Beneath)})
			}
			base, rel = m.Beneath, r
			mm.Type = mount.TypeBind
			mm.BindOptions = &mount.BindOptions{CreateMountpoint: false}
		case m.SubPath != "" && !versions.LessThan(d.cli.ClientVersion(), subPathAPI):
			mm.VolumeOptions = &mount.VolumeOptions{Subpath: m.SubPath}
		case m.SubPath != "":
			mp, err := d.subPathBase(ctx, m)
			if err != nil {
				return fail(err)
			}
			base, rel = mp, m.SubPath
			mm.Type, mm.Source = mount.TypeBind, ""
			mm.BindOptions = &mount.BindOptions{CreateMountpoint: false}
		}
		if base == "" {
			out = append(out, mm)
			continue
		}
		perr, err := d.pinner(ctx) // subPathBase refused the unpinnable volumes
		if err != nil {
			return fail(err)
		}
		if perr != nil {
			if !listed {
				ctx, cancel := d.call(ctx)
				var err error
				containers, err = d.cli.ContainerList(ctx, container.ListOptions{All: true})
				cancel()
				if err != nil {
					return fail(wrap(err, "list containers"))
				}
				listed = true
			}
			if w := writableAbove(m.Source, containers); w != "" {
				return fail(&runtime.MountError{Target: m.Target, Reason: fmt.Sprintf(
					"host path %s is below %s, which a container mounts read-write: a sandbox could swap part of the path before the engine mounts it, and sandboxd cannot pin the mount here (%v)", m.Source, w, perr)})
			}
		}
		var f *os.File
		if m.Kind == runtime.MountHost {
			f, err = d.prefixes.OpenBeneath(base, rel)
		} else {
			f, err = hostpath.OpenBeneath(base, rel)
		}
		if err != nil {
			return fail(&runtime.MountError{Target: m.Target, SubPath: m.Kind != runtime.MountHost, Reason: err.Error()})
		}
		if perr != nil {
			f.Close()
			mm.Source = m.Source
			out = append(out, mm)
			continue
		}
		if pinDir == "" {
			pinDir = filepath.Join(d.mountDir, name)
			unpinAll(pinDir) // a leftover of a crash between pin and create
			if err := os.MkdirAll(pinDir, 0o700); err != nil {
				f.Close()
				return fail(fmt.Errorf("create pin directory: %w", err))
			}
		}
		mm.Source = filepath.Join(pinDir, strconv.Itoa(i))
		err = pin(f, mm.Source)
		f.Close()
		if err != nil {
			return fail(fmt.Errorf("pin %s for %s: %w", filepath.Join(base, rel), m.Target, err))
		}
		out = append(out, mm)
	}
	return out, pinDir, nil
}

// subPathBase returns the host directory of a named volume whose subPath
// an old engine would ignore: only a local-driver volume without mount
// options has its content there.
func (d *Docker) subPathBase(ctx context.Context, m runtime.Mount) (string, error) {
	cctx, cancel := d.call(ctx)
	v, err := d.cli.VolumeInspect(cctx, m.Source)
	cancel()
	if err != nil {
		return "", wrap(err, "inspect volume %s", m.Source)
	}
	if v.Driver != "local" || len(v.Options) > 0 || v.Mountpoint == "" {
		return "", &runtime.MountError{Target: m.Target, SubPath: true, Reason: fmt.Sprintf(
			"this engine (API %s) ignores subPath and would mount the whole volume; sandboxd binds a sub-directory itself only for local-driver volumes without mount options (volume %s has driver %q); use Docker 26 or newer", d.cli.ClientVersion(), m.Source, v.Driver)}
	}
	whyNot, err := d.pinner(ctx)
	if err != nil {
		return "", err
	}
	if whyNot != nil {
		return "", &runtime.MountError{Target: m.Target, SubPath: true, Reason: fmt.Sprintf(
			"this engine (API %s) ignores subPath and would mount the whole volume, and sandboxd cannot bind the sub-directory safely here (%v); use Docker 26 or newer, or run sandboxd as root beside the engine", d.cli.ClientVersion(), whyNot)}
	}
	return v.Mountpoint, nil
}

// writableAbove returns the source of a read-write bind mount of one of
// the containers that p lies strictly below, or "". p itself mounted
// read-write elsewhere is fine: a sandbox cannot rename its own mount.
func writableAbove(p string, cs []container.Summary) string {
	for _, c := range cs {
		for _, m := range c.Mounts {
			if m.Type != mount.TypeBind || !m.RW || m.Source == "" {
				continue
			}
			src := filepath.Clean(m.Source)
			if src == "/" || strings.HasPrefix(p, src+"/") {
				if p != src {
					return src
				}
			}
		}
	}
	return ""
}

// releasePins returns what releases a container's pins once it is
// removed; it asks the engine for the container's name only when there
// are pins at all.
func (d *Docker) releasePins(ctx context.Context, id string) func() {
	if entries, err := os.ReadDir(d.mountDir); d.mountDir == "" || err != nil || len(entries) == 0 {
		return func() {}
	}
	cctx, cancel := d.call(ctx)
	info, err := d.cli.ContainerInspect(cctx, id)
	cancel()
	if err != nil {
		return func() {}
	}
	dir := filepath.Join(d.mountDir, strings.TrimPrefix(info.Name, "/"))
	return func() { unpinAll(dir) }
}

// unpinAll detaches every pin in dir and removes the empty mount points.
// It never removes recursively: a pin still attached would hand it the
// checked host directory's content.
func unpinAll(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		unpin(p)
		os.Remove(p)
	}
	os.Remove(dir)
}

// sweepPins releases the pins of containers that no longer exist (removed
// while sandboxd was down, or a create that crashed); one sandboxd owns
// the state directory. If the engine does not answer, pins stay.
func (d *Docker) sweepPins(ctx context.Context) {
	entries, err := os.ReadDir(d.mountDir)
	if d.mountDir == "" || err != nil || len(entries) == 0 {
		return
	}
	cctx, cancel := d.call(ctx)
	list, err := d.cli.ContainerList(cctx, container.ListOptions{All: true})
	cancel()
	if err != nil {
		d.log.Warn("cannot list containers to release their mount pins", "err", err)
		return
	}
	alive := map[string]bool{}
	for _, c := range list {
		for _, n := range c.Names {
			alive[strings.TrimPrefix(n, "/")] = true
		}
	}
	for _, e := range entries {
		if !alive[e.Name()] {
			unpinAll(filepath.Join(d.mountDir, e.Name()))
		}
	}
}
