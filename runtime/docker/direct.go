package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/agent"
	filetransfer "github.com/sandboxd/sandboxd/runtime/transfer"
)

// The agent's direct path. Over the exec stream every byte to the agent
// crosses dockerd, the containerd-shim, and a bridge process in the
// sandbox; that caps bulk transfers near 100 MiB/s on a small machine and
// adds four process hops to each command. Where sandboxd is root on the
// engine's own host (engineHost, as for pinned mounts), it connects to
// the agent daemon's abstract unix socket itself: a thread enters the
// container's network namespace, where the name lives, just long enough
// to create the socket (direct_linux.go). No path is resolved, so there is
// no symlink a sandbox could plant, and one yamux session runs straight
// to the daemon, so there is no bridge. The daemon admits the connection
// because its pid reads 0 there (outside the sandbox's pid namespace) and
// it is root (runtime/agent admit; SECURITY.md).
//
// Starting a daemon still takes an exec (the bridge spawns it when
// nobody listens): then that exec's session is closed as soon as the
// direct one works, and its bridge exits. The exec stream stays the path
// for remote engines, Docker Desktop, a sandboxd that is not root, a
// sandbox on the host's network, agent_transport = "exec", and whenever
// the direct dial fails.
//
// Pauses: a direct dial starts no process, so it needs no gate (gate.go);
// a paused sandbox is left to the exec path, whose gate waits for the
// resume. A connection to a daemon frozen later is an ordinary socket
// whose reads honour the request's deadline and cancellation.

// Agent transports, the [docker] agent_transport setting.
const (
	TransportAuto = "auto" // direct where possible, else exec
	TransportExec = "exec" // always the exec stream
)

// connectAgent returns a session to the agent of container id, direct if
// it can, over an exec stream otherwise, and logs which.
func (d *Docker) connectAgent(ctx context.Context, id string) (*agent.Client, error) {
	why := d.directWhyNot(ctx)
	if why == nil {
		client, err := d.dialDirect(ctx, id)
		if errors.Is(err, errNoDaemon) {
			// The exec's bridge starts the daemon.
			exec, err := d.startAgent(ctx, id)
			if err != nil {
				return nil, err
			}
			if client, err = d.dialDirect(ctx, id); err != nil {
				d.log.Debug("agent transport", "sandbox_container", id, "transport", "exec", "why", err)
				return exec, nil
			}
			exec.Close()
		} else if err != nil {
			why = err
		}
		if client != nil {
			d.log.Debug("agent transport", "sandbox_container", id, "transport", "direct")
			return client, nil
		}
	}
	d.log.Debug("agent transport", "sandbox_container", id, "transport", "exec", "why", why)
	return d.startAgent(ctx, id)
}

// directWhyNot says why the direct path is not tried; nil if it is.
func (d *Docker) directWhyNot(ctx context.Context) error {
	if d.opts.AgentTransport == TransportExec {
		return errors.New("agent_transport is exec")
	}
	whyNot, err := d.engineHost(ctx)
	if err != nil {
		return err
	}
	return whyNot
}

// runningPid returns the pid of container id's init, if it runs and is not
// paused.
func (d *Docker) runningPid(ctx context.Context, id string) (int, error) {
	cctx, cancel := d.call(ctx)
	info, err := d.cli.ContainerInspect(cctx, id)
	cancel()
	switch {
	case err != nil:
		return 0, d.wrapContainer(ctx, err, id, "inspect %s", id)
	case info.State == nil || !info.State.Running || info.State.Pid <= 0:
		return 0, fmt.Errorf("container %s is not running", id)
	case info.State.Paused:
		return 0, fmt.Errorf("container %s is paused", id)
	}
	return info.State.Pid, nil
}

// FileWriter implements runtime.BulkFiles: a direct session's transport
// writes an upload's files itself, an exec stream's has no such path.
func (d *Docker) FileWriter(t http.RoundTripper) runtime.FileWriter {
	if fw := agent.Files(t); fw != nil {
		return agentFiles{fw}
	}
	return nil
}

// agentFiles writes files with the agent's own metadata.
type agentFiles struct{ fw agent.FileWriter }

func (a agentFiles) WriteFile(ctx context.Context, meta runtime.FileMeta, content io.Reader) error {
	m := filetransfer.Meta{Path: meta.Path}
	m.Owner, m.Group, m.Mode = meta.Owner, meta.Group, meta.Mode
	return a.fw.WriteFile(ctx, m, content)
}
