package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/agent"
	"github.com/sandboxd/sandboxd/runtime/egress"
)

// helperSpec is spec made into an egress helper: sandboxd from the agent
// volume as root with NET_ADMIN (to program nftables) and NET_BIND_SERVICE
// (the resolver on port 53), nothing else; its main process only holds on.
func helperSpec(spec runtime.Spec) runtime.Spec {
	spec.Cmd = []string{agentPath, "egress", "hold"}
	spec.Env = nil
	spec.User = "0"
	spec.Capabilities = runtime.Capabilities{DropAll: true, Add: []string{"NET_ADMIN", "NET_BIND_SERVICE"}}
	spec.NoNewPrivileges = true
	// Go needs threads for blocking syscalls; 256 is ample for the daemon.
	spec.Resources = runtime.Resources{Pids: 256, MemoryBytes: 128 << 20}
	spec.Mounts = nil
	return spec
}

// CreateEgressHelper implements runtime.Egress: the helper's main process
// is the daemon's guard, which programs the default drop as it starts.
func (d *Docker) CreateEgressHelper(ctx context.Context, sandbox string, spec runtime.Spec, args []string) (string, error) {
	spec = helperSpec(spec)
	spec.Cmd = append([]string{agentPath, "egress", "guard"}, args...)
	spec.Network = runtime.Network{Mode: runtime.NetworkJoin, Name: sandbox}
	return d.Create(ctx, spec)
}

// StartEgressHelper implements runtime.Egress: it attaches to the helper's
// output before the start, so the guard's egress.Ready line cannot pass
// unseen, and waits for that line (no polling).
func (d *Docker) StartEgressHelper(ctx context.Context, helper string) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	hr, err := d.cli.ContainerAttach(cctx, helper, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return wrap(err, "attach egress helper %s", helper)
	}
	conn := newExecConn(hr, d.agentLog(helper))
	defer conn.Close()
	stop := context.AfterFunc(cctx, func() { conn.Close() })
	defer stop()
	if err := d.cli.ContainerStart(cctx, helper, container.StartOptions{}); err != nil {
		return wrap(err, "start egress helper %s", helper)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, 4<<10)).ReadString('\n')
	if strings.TrimSpace(line) == egress.Ready {
		return nil
	}
	if cctx.Err() != nil {
		return wrap(cctx.Err(), "egress helper %s: default drop not in force", helper)
	}
	return fmt.Errorf("egress helper %s exited before its default drop was in force (output %q, %v)", helper, line, err)
}

// DetachNetwork implements runtime.Egress.
func (d *Docker) DetachNetwork(ctx context.Context, id string, nw runtime.Network) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	name := string(networkMode(nw))
	return wrap(d.cli.NetworkDisconnect(cctx, name, id, true), "disconnect container %s from %s", id, name)
}

// AttachNetwork implements runtime.Egress.
func (d *Docker) AttachNetwork(ctx context.Context, id string, nw runtime.Network) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	name := string(networkMode(nw))
	return wrap(d.cli.NetworkConnect(cctx, name, id, &network.EndpointSettings{}), "connect container %s to %s", id, name)
}

// HostResolvers implements runtime.Egress with a helper-like container on
// Docker's bridge network, whose resolver file Docker fills from the
// host's (without loopback resolvers, which a container cannot reach).
func (d *Docker) HostResolvers(ctx context.Context, spec runtime.Spec) ([]string, error) {
	spec = helperSpec(spec)
	spec.Capabilities.Add = nil
	spec.Network = runtime.Network{Mode: runtime.NetworkDefault}
	id, err := d.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer func() { _ = d.Remove(context.WithoutCancel(ctx), id) }()
	if err := d.Start(ctx, id); err != nil {
		return nil, err
	}
	rc, _, err := d.GetArchive(ctx, id, egress.ResolvConf)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return nil, fmt.Errorf("read %s of the bridge network: %w", egress.ResolvConf, err)
	}
	ups, err := egress.Nameservers(io.LimitReader(tr, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("the bridge network's %s: %w", egress.ResolvConf, err)
	}
	return ups, nil
}

// StartEgress implements runtime.Egress: like the agent, the daemon speaks
// yamux on its exec stream, so no port is ever opened for it.
func (d *Docker) StartEgress(ctx context.Context, helper string, args []string) (runtime.Session, error) {
	return d.execClient(ctx, helper, "egress daemon", append([]string{agentPath, "egress", "serve"}, args...), "0")
}

// execClient runs cmd in container id as user ("": the container's) and
// dials the yamux session it serves on its stdin and stdout, as the agent's.
func (d *Docker) execClient(ctx context.Context, id, what string, cmd []string, user string) (*agent.Client, error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	exec, err := d.cli.ContainerExecCreate(cctx, id, container.ExecOptions{
		Cmd:          cmd,
		User:         user,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return nil, wrap(err, "start %s in %s", what, id)
	}
	return d.attachAgent(id, exec.ID)
}
