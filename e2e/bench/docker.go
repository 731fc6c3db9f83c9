package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// Labels on the benchmark's own containers, so that they are cleaned up.
const (
	labelBench       = "sandboxd-bench"
	labelSandboxID   = "opensandbox.io/id"
	labelInstance    = "opensandbox.io/sandboxd-instance"
	labelPool        = "opensandbox.io/sandboxd-pool"
	baselineMemory   = 512 << 20
	baselineNanoCPUs = 1e9
)

// raw is Docker's own floor: the Engine API called directly.
type raw struct {
	cli   *client.Client
	image string
	run   string // value of labelBench on this run's containers
}

// createStartExec is the baseline of a sandbox create: create and start a
// container of the same image with the same limits, then run one exec in
// it. It returns the container id and the time taken.
func (r *raw) createStartExec(ctx context.Context) (string, time.Duration, error) {
	start := time.Now()
	resp, err := r.cli.ContainerCreate(ctx, &container.Config{
		Image:      r.image,
		Entrypoint: []string{"tail", "-f", "/dev/null"},
		Labels:     map[string]string{labelBench: r.run},
	}, &container.HostConfig{
		Resources: container.Resources{Memory: baselineMemory, NanoCPUs: baselineNanoCPUs},
	}, nil, nil, "")
	if err != nil {
		return "", 0, fmt.Errorf("create: %w", err)
	}
	if err := r.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return resp.ID, 0, fmt.Errorf("start: %w", err)
	}
	if _, err := r.exec(ctx, resp.ID, "true"); err != nil {
		return resp.ID, 0, err
	}
	return resp.ID, time.Since(start), nil
}

// exec is the baseline of a command: exec create, start (attached, read to
// the end) and inspect for the exit code.
func (r *raw) exec(ctx context.Context, cid string, cmd ...string) (time.Duration, error) {
	start := time.Now()
	ex, err := r.cli.ContainerExecCreate(ctx, cid, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return 0, fmt.Errorf("exec create: %w", err)
	}
	hr, err := r.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return 0, fmt.Errorf("exec start: %w", err)
	}
	_, err = stdcopy.StdCopy(io.Discard, io.Discard, hr.Reader)
	hr.Close()
	if err != nil {
		return 0, fmt.Errorf("exec output: %w", err)
	}
	info, err := r.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return 0, fmt.Errorf("exec inspect: %w", err)
	}
	if info.ExitCode != 0 {
		return 0, fmt.Errorf("exec %v: exit code %d", cmd, info.ExitCode)
	}
	return time.Since(start), nil
}

// put is the baseline of an upload: a one-file tar streamed into dir.
func (r *raw) put(ctx context.Context, cid, dir, name string, size int64, src io.Reader) error {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: time.Now(), Typeflag: tar.TypeReg})
		if err == nil {
			_, err = io.CopyN(tw, src, size)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err := r.cli.CopyToContainer(ctx, cid, dir, pr, container.CopyToContainerOptions{})
	pr.Close()
	return err
}

// get is the baseline of a download: the archive of one file, read to the
// end. It returns the file's size as the tar stream reports it.
func (r *raw) get(ctx context.Context, cid, p string) (int64, error) {
	rc, _, err := r.cli.CopyFromContainer(ctx, cid, p)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var n int64
	for {
		_, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		c, err := io.Copy(io.Discard, tr)
		n += c
		if err != nil {
			return n, err
		}
	}
}

// sandboxContainer finds the container of a sandbox by its label.
func (r *raw) sandboxContainer(ctx context.Context, id string) (container.Summary, error) {
	list, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelSandboxID+"="+id))})
	if err != nil {
		return container.Summary{}, err
	}
	if len(list) != 1 {
		return container.Summary{}, fmt.Errorf("sandbox %s: %d containers", id, len(list))
	}
	return list[0], nil
}

// agentPIDs finds the host pids of the agent's two processes in a
// container: the daemon, which holds the commands and sessions, and the
// bridge that connects sandboxd's exec stream to it (0 on the direct path,
// where there is none).
func (r *raw) agentPIDs(ctx context.Context, cid string) (daemon, bridge int, err error) {
	top, err := r.cli.ContainerTop(ctx, cid, nil)
	if err != nil {
		return 0, 0, err
	}
	pidCol, cmdCol := -1, -1
	for i, t := range top.Titles {
		switch t {
		case "PID":
			pidCol = i
		case "CMD", "COMMAND":
			cmdCol = i
		}
	}
	if pidCol < 0 || cmdCol < 0 {
		return 0, 0, fmt.Errorf("docker top: unexpected titles %v", top.Titles)
	}
	for _, p := range top.Processes {
		cmd := p[cmdCol]
		if !strings.Contains(cmd, "sandboxd agent") {
			continue
		}
		pid := &bridge
		if strings.HasSuffix(cmd, "agent --daemon") {
			pid = &daemon
		}
		if _, err := fmt.Sscan(p[pidCol], pid); err != nil {
			return 0, 0, err
		}
	}
	if daemon == 0 {
		return 0, 0, fmt.Errorf("container %s: agent daemon pid %d, bridge pid %d", cid[:12], daemon, bridge)
	}
	return daemon, bridge, nil
}

// removeLabelled force-removes every container carrying label=value, and
// tries again for a while if the engine refuses a removal (a busy
// filesystem on a loaded host) or a container appears meanwhile (a create
// that was in flight).
func (r *raw) removeLabelled(ctx context.Context, label, value string) {
	for attempt := 1; ; attempt++ {
		list, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label+"="+value))})
		if err != nil || len(list) == 0 {
			return
		}
		for _, c := range list {
			if err := r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && attempt == removeAttempts {
				fmt.Fprintf(os.Stderr, "bench: could not remove container %s %v (%s): %v\n", c.ID[:12], c.Names, c.State, err)
			}
		}
		if attempt == removeAttempts {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// removeAttempts bounds removeLabelled's rounds.
const removeAttempts = 10

func (r *raw) remove(ctx context.Context, cid string) {
	_ = r.cli.ContainerRemove(ctx, cid, container.RemoveOptions{Force: true})
}
