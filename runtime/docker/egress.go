package docker

import (
	"context"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/agent"
)

var _ runtime.Egress = (*Docker)(nil)

// CreateEgressHelper implements runtime.Egress. The helper runs sandboxd
// from the agent volume as root with NET_ADMIN (to program nftables) and
// NET_BIND_SERVICE (the resolver on port 53), nothing else; its main
// process only holds the network namespace.
func (d *Docker) CreateEgressHelper(ctx context.Context, spec runtime.Spec) (string, error) {
	spec.Cmd = []string{agentPath, "egress", "hold"}
	spec.Env = nil
	spec.User = "0"
	spec.Capabilities = runtime.Capabilities{DropAll: true, Add: []string{"NET_ADMIN", "NET_BIND_SERVICE"}}
	spec.NoNewPrivileges = true
	// Go needs threads for blocking syscalls; 256 is ample for the daemon.
	spec.Resources = runtime.Resources{Pids: 256, MemoryBytes: 128 << 20}
	spec.Mounts = nil
	id, err := d.Create(ctx, spec)
	if err != nil {
		return "", err
	}
	if err := d.Start(ctx, id); err != nil {
		_ = d.Remove(context.WithoutCancel(ctx), id)
		return "", err
	}
	return id, nil
}

// StartEgress implements runtime.Egress: like the agent, the daemon speaks
// yamux on its exec stream, so no port is ever opened for it.
func (d *Docker) StartEgress(ctx context.Context, helperID string, args []string) (runtime.Session, error) {
	return d.execClient(ctx, helperID, "egress daemon", append([]string{agentPath, "egress", "serve"}, args...), "0")
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
