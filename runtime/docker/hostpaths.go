package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/runtime"
)

// CheckHostPath implements runtime.HostPaths. The path is judged on this
// host's filesystem (see package hostpath), which is the engine's only
// when the engine is reached over a local socket (Docker Desktop shares
// the host's files with its VM): an engine reached over the network is
// refused host paths, since nothing here can check its host. The allowed
// prefixes were opened in New; planMounts walks from the returned
// prefix's descriptor to the path without following symlinks and mounts
// what it reached, so a path swapped after this check is not what gets
// mounted.
func (d *Docker) CheckHostPath(ctx context.Context, p string, forbidden []string) (runtime.Mount, error) {
	if host := d.cli.DaemonHost(); !strings.HasPrefix(host, "unix://") && !strings.HasPrefix(host, "npipe://") {
		return runtime.Mount{}, &runtime.HostPathError{NotAllowed: true, Reason: fmt.Sprintf(
			"host path %q refused: the engine at %s is on another host, whose paths sandboxd cannot check", p, host)}
	}
	engine, err := d.enginePaths(ctx)
	if err != nil {
		return runtime.Mount{}, err
	}
	return d.prefixes.Check(p, slices.Concat(engine, forbidden))
}

// enginePaths returns the host paths through which a container could take
// the engine over: Docker's root directory and, for a local daemon, its
// socket. They are asked for once (the first time a host path is
// mounted) and kept; until the engine answers, no host path can be
// mounted. The lock is not held across the engine call, so a slow engine
// holds up no caller past its own deadline; callers that meet at the
// start may each ask.
func (d *Docker) enginePaths(ctx context.Context) ([]string, error) {
	d.engineMu.Lock()
	known := d.enginePathsKnown
	d.engineMu.Unlock()
	if known != nil {
		return known, nil
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	info, err := d.cli.Info(cctx)
	if err != nil {
		return nil, wrap(err, "ask the engine where it keeps its data (docker info)")
	}
	paths := []string{}
	if info.DockerRootDir != "" {
		paths = append(paths, info.DockerRootDir)
	}
	if sock, ok := strings.CutPrefix(d.cli.DaemonHost(), "unix://"); ok {
		paths = append(paths, sock)
	}
	d.engineMu.Lock()
	defer d.engineMu.Unlock()
	if d.enginePathsKnown == nil {
		d.enginePathsKnown = paths
	}
	return d.enginePathsKnown, nil
}
