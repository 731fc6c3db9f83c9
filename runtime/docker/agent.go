package docker

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/runtime/agent"
)

// AgentDir is where the agent volume is mounted (read-only) in every sandbox.
const AgentDir = "/opt/sandboxd"

const (
	agentPath = AgentDir + "/sandboxd"
	// LabelAgentVolume marks the volumes that hold an agent binary.
	LabelAgentVolume = "opensandbox.io/sandboxd-agent"
)

// agentVolume is the named volume holding the agent binary of one sandbox
// platform (see agentbin.go). It is filled once (its name carries the
// platform and the binary's hash), checked to still exist at each create,
// and mounted read-only into every sandbox of that platform, so creating a
// sandbox copies nothing.
type agentVolume struct {
	platform string
	open     func() (io.ReadCloser, error)
	size     int64
	hash     string

	mu    sync.Mutex
	ready bool
}

// agentVolumePrefix begins the name of every build's agent volume.
const agentVolumePrefix = "sandboxd-agent-"

func (a *agentVolume) name() string {
	return agentVolumePrefix + strings.ReplaceAll(a.platform, "/", "-") + "-" + a.hash
}

// ensure makes sure the agent volume exists and holds the binary. It needs an
// image to create a never-started helper container through which the volume
// is written; the sandbox's own image serves.
func (a *agentVolume) ensure(ctx context.Context, d *Docker, image string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		if a.intact(ctx, d) {
			return a.name(), nil
		}
		d.log.Warn("agent volume removed or replaced behind sandboxd's back; refilling it", "volume", a.name())
	}
	created, _, err := d.EnsureVolume(ctx, a.name(), true, map[string]string{LabelAgentVolume: a.hash})
	if err != nil {
		return "", err
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	helper, err := d.cli.ContainerCreate(cctx, &container.Config{
		Image:      image,
		Entrypoint: []string{agentPath},
		Labels:     map[string]string{LabelAgentVolume: a.hash},
	}, &container.HostConfig{
		NetworkMode: "none",
		Mounts:      []mount.Mount{{Type: mount.TypeVolume, Source: a.name(), Target: AgentDir}},
	}, nil, nil, "")
	if err != nil {
		return "", wrap(err, "create agent volume helper from %s", image)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), d.timeout)
		defer cancel()
		_ = d.cli.ContainerRemove(rctx, helper.ID, container.RemoveOptions{Force: true})
	}()
	if !created {
		// A volume left by an earlier run: trust it only if complete.
		if st, err := d.cli.ContainerStatPath(cctx, helper.ID, agentPath); err == nil && st.Size == a.size {
			a.ready = true
			return a.name(), nil
		}
	}
	if err := a.fill(cctx, d, helper.ID); err != nil {
		return "", err
	}
	d.log.Info("agent volume ready", "volume", a.name(), "platform", a.platform, "bytes", a.size)
	a.ready = true
	return a.name(), nil
}

// intact reports whether the volume filled earlier is still there. Someone
// may remove it (docker volume prune), and the engine would then mount an
// empty volume of that name, without the label, into the next sandbox.
func (a *agentVolume) intact(ctx context.Context, d *Docker) bool {
	_, labels, err := d.EnsureVolume(ctx, a.name(), false, nil)
	return err == nil && labels[LabelAgentVolume] == a.hash
}

// fill streams the binary as a one-file tar into the volume.
func (a *agentVolume) fill(ctx context.Context, d *Docker, helperID string) error {
	f, err := a.open()
	if err != nil {
		return fmt.Errorf("open agent binary: %w", err)
	}
	defer f.Close()
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "sandboxd", Mode: 0o755, Size: a.size, ModTime: time.Now(), Typeflag: tar.TypeReg})
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err = d.cli.CopyToContainer(ctx, helperID, AgentDir, pr, container.CopyToContainerOptions{})
	pr.Close()
	return wrap(err, "copy agent into volume %s", a.name())
}

// Agent implements runtime.Runtime. It starts the agent on first use and
// again whenever it died (killed from inside, OOM, container restart): a
// yamux session over an exec's stdin/stdout, or straight to its daemon
// (direct.go).
func (d *Docker) Agent(ctx context.Context, id string) (http.RoundTripper, error) {
	client, err := d.sessions.Get(ctx, id, func(ctx context.Context) (*agent.Client, error) { return d.connectAgent(ctx, id) })
	if err != nil {
		return nil, err
	}
	return client.Transport(), nil
}

// agentStartTimeout bounds an agent's start: exec create and start, and
// its first answer (the agent may have to start its daemon first, which a
// loaded machine can make slow).
const agentStartTimeout = 30 * time.Second

// startAgent starts the agent's exec and waits until the agent answers. The
// exec counts as being set up (see gates) until then: once the agent
// answers, runc has finished starting it, and a pause can no longer catch
// runc half-way.
func (d *Docker) startAgent(ctx context.Context, id string) (*agent.Client, error) {
	cctx, cancel := context.WithTimeout(ctx, min(d.timeout, agentStartTimeout))
	defer cancel()
	release, err := d.gates.start(cctx, id)
	if err != nil {
		return nil, fmt.Errorf("start agent in %s: %w", id, err)
	}
	exec, err := d.cli.ContainerExecCreate(cctx, id, container.ExecOptions{
		Cmd:          []string{agentPath, "agent"},
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		release()
		return nil, d.wrapContainer(ctx, err, id, "start agent in %s", id)
	}
	// The exec start cannot be cancelled (the hijacked connection outlives
	// the request and ignores its context), so it runs on its own; if it
	// answers after cctx ends, it is dropped and only then is the gate
	// released.
	started := make(chan agentStart, 1)
	go func() {
		client, err := d.attachAgent(id, exec.ID)
		release()
		started <- agentStart{client, err}
	}()
	select {
	case st := <-started:
		if st.err != nil {
			return nil, st.err
		}
		d.log.Debug("agent started", "sandbox_container", id)
		return st.client, nil
	case <-cctx.Done():
		go func() {
			if st := <-started; st.client != nil {
				st.client.Close()
			}
		}()
		return nil, d.wrapContainer(ctx, cctx.Err(), id, "start agent in %s", id)
	}
}

type agentStart struct {
	client *agent.Client
	err    error
}

// attachAgent starts exec execID of container id and returns the session to
// the agent once the agent has answered. It returns when the agent answers
// or its stream ends.
func (d *Docker) attachAgent(id, execID string) (*agent.Client, error) {
	hr, err := d.cli.ContainerExecAttach(context.Background(), execID, container.ExecAttachOptions{})
	if err != nil {
		return nil, wrap(err, "attach agent in %s", id)
	}
	conn := newExecConn(hr, d.agentLog(id))
	client, err := agent.Dial(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent session in %s: %w", id, err)
	}
	if err := client.Ping(context.Background()); err != nil {
		client.Close()
		return nil, fmt.Errorf("agent in %s %w", id, err)
	}
	return client, nil
}

// agentLog returns a writer that logs the agent's stderr line by line, at
// most as fast as the sandbox's limiter allows.
func (d *Docker) agentLog(id string) io.WriteCloser {
	return agent.NewStderrLog(d.log.With("container", id), d.sessions.LogLimit(id))
}

// execConn adapts a hijacked exec attach to an io.ReadWriteCloser: reads
// see the exec's stdout, demultiplexed in place (no goroutine and pipe per
// chunk: every agent message crosses this), stderr goes to a log writer,
// writes go to the exec's stdin. One goroutine reads (yamux's).
type execConn struct {
	hr        types.HijackedResponse
	stderr    io.WriteCloser
	closeOnce sync.Once
	hdr       [8]byte
	left      int // stdout bytes left in the current frame
}

func newExecConn(hr types.HijackedResponse, stderr io.WriteCloser) *execConn {
	return &execConn{hr: hr, stderr: stderr}
}

func (c *execConn) Read(p []byte) (int, error) {
	for c.left == 0 {
		if _, err := io.ReadFull(c.hr.Reader, c.hdr[:]); err != nil {
			c.closeStderr()
			return 0, err
		}
		size := int(binary.BigEndian.Uint32(c.hdr[4:]))
		switch c.hdr[0] {
		case byte(stdcopy.Stdin), byte(stdcopy.Stdout):
			c.left = size
		case byte(stdcopy.Stderr):
			if _, err := io.CopyN(c.stderr, c.hr.Reader, int64(size)); err != nil {
				return 0, fmt.Errorf("agent stderr: %w", err)
			}
		case byte(stdcopy.Systemerr):
			msg := make([]byte, size)
			if _, err := io.ReadFull(c.hr.Reader, msg); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("agent exec stream: %s", msg)
		default:
			return 0, fmt.Errorf("agent exec stream: unknown frame type %d", c.hdr[0])
		}
	}
	if len(p) > c.left {
		p = p[:c.left]
	}
	n, err := c.hr.Reader.Read(p)
	c.left -= n
	if err == io.EOF && c.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (c *execConn) closeStderr() { c.closeOnce.Do(func() { c.stderr.Close() }) }

func (c *execConn) Write(p []byte) (int, error) { return c.hr.Conn.Write(p) }

func (c *execConn) Close() error {
	c.hr.Close()
	c.closeStderr()
	return nil
}
