// Package docker implements runtime.Runtime on the Docker Engine API. It is
// the only package in sandboxd that imports the Docker client.
package docker

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/runtime"
)

// Options configure the Docker runtime.
type Options struct {
	Host       string        // Docker endpoint; "" = discovered (see discoverEndpoint)
	APITimeout time.Duration // bound on each non-streaming Engine API call
	// AgentBinaries are static Linux sandboxd binaries by sandbox platform
	// ("linux/arm64"), and EmbeddedAgents those built into a release
	// binary; see agentbin.go.
	AgentBinaries  map[string]string
	EmbeddedAgents map[string][]byte
	Logger         *slog.Logger
	// MountDir is a directory only sandboxd can reach (under its state
	// dir) where host mounts are pinned while their container exists;
	// "" never pins (see mounts.go).
	MountDir string
}

// Docker drives sandboxes through the Docker Engine API.
type Docker struct {
	cli     *client.Client
	timeout time.Duration
	log     *slog.Logger
	agents  *agentSet

	mu       sync.Mutex
	sessions map[string]*agentSession // by container id

	mountDir   string
	pinMu      sync.Mutex
	pinDecided bool
	pinErr     error // why mounts cannot be pinned; nil if they can
}

var _ runtime.Runtime = (*Docker)(nil)

// New connects to dockerd, negotiating the API version (1.41 and newer work).
func New(ctx context.Context, opts Options) (*Docker, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ep, err := discoverEndpoint(opts.Host, localHostEnv())
	if err != nil {
		return nil, err
	}
	opts.Logger.Info("docker endpoint", "host", ep.Host, "from", ep.Source)
	clientOpts := append([]client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}, ep.clientOpts()...)
	cli, err := client.NewClientWithOpts(clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if opts.APITimeout <= 0 {
		opts.APITimeout = 180 * time.Second
	}
	d := &Docker{
		cli:      cli,
		timeout:  opts.APITimeout,
		log:      opts.Logger,
		sessions: map[string]*agentSession{},
		mountDir: opts.MountDir,
	}
	if d.agents, err = newAgentSet(opts.AgentBinaries, opts.EmbeddedAgents, opts.Logger); err != nil {
		return nil, err
	}
	d.sweepPins(ctx)
	return d, nil
}

// call bounds a non-streaming Engine API call by the configured timeout.
func (d *Docker) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

// wrap maps Docker client errors onto the runtime's sentinel errors.
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf(format, args...)
	switch {
	case errdefs.IsNotFound(err):
		return fmt.Errorf("%s: %w: %v", msg, runtime.ErrNotFound, err)
	case errdefs.IsConflict(err):
		return fmt.Errorf("%s: %w: %v", msg, runtime.ErrConflict, err)
	case client.IsErrConnectionFailed(err), errors.Is(err, context.DeadlineExceeded):
		// Docker is down or hung past [docker] api_timeout.
		return fmt.Errorf("%s: %w: %v", msg, runtime.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", msg, err)
}

// Ping implements runtime.Runtime.
func (d *Docker) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := d.cli.Ping(ctx)
	if err != nil {
		return fmt.Errorf("ping docker: %w: %v", runtime.ErrUnavailable, err)
	}
	return nil
}

// EnginePaths implements runtime.Runtime: Docker's root directory and,
// for a local daemon, its socket.
func (d *Docker) EnginePaths(ctx context.Context) ([]string, error) {
	ctx, cancel := d.call(ctx)
	defer cancel()
	info, err := d.cli.Info(ctx)
	if err != nil {
		return nil, wrap(err, "docker info")
	}
	var paths []string
	if info.DockerRootDir != "" {
		paths = append(paths, info.DockerRootDir)
	}
	if sock, ok := strings.CutPrefix(d.cli.DaemonHost(), "unix://"); ok {
		paths = append(paths, sock)
	}
	return paths, nil
}

// ImageExists implements runtime.Runtime.
func (d *Docker) ImageExists(ctx context.Context, ref string) (bool, error) {
	ctx, cancel := d.call(ctx)
	defer cancel()
	_, err := d.cli.ImageInspect(ctx, ref)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, wrap(err, "inspect image %s", ref)
	}
	return true, nil
}

// EnsureImage implements runtime.Runtime.
func (d *Docker) EnsureImage(ctx context.Context, ref string, auth *runtime.RegistryAuth, platform string, progress func(string)) error {
	ok, err := d.ImageExists(ctx, ref)
	if err != nil || ok {
		return err
	}
	opts := image.PullOptions{Platform: platform}
	if auth != nil {
		buf, _ := json.Marshal(registry.AuthConfig{Username: auth.Username, Password: auth.Password})
		opts.RegistryAuth = base64.URLEncoding.EncodeToString(buf)
	}
	rc, err := d.cli.ImagePull(ctx, ref, opts)
	if err != nil {
		return wrap(err, "pull image %s", ref)
	}
	defer rc.Close()
	return readPullProgress(rc, progress)
}

// readPullProgress decodes the pull's JSON message stream, reporting one line
// per layer status change and returning the first error message.
func readPullProgress(r io.Reader, progress func(string)) error {
	dec := json.NewDecoder(bufio.NewReader(r))
	last := map[string]string{}
	for {
		var msg struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read pull progress: %w", err)
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
		if progress != nil && last[msg.ID] != msg.Status {
			last[msg.ID] = msg.Status
			if msg.ID != "" {
				progress(msg.ID + ": " + msg.Status)
			} else {
				progress(msg.Status)
			}
		}
	}
}

// Create implements runtime.Runtime. The agent volume is mounted read-only
// at AgentDir in every container.
func (d *Docker) Create(ctx context.Context, spec runtime.Spec) (string, error) {
	volName, err := d.agents.volume(ctx, d, spec)
	if err != nil {
		return "", err
	}
	cfg := &container.Config{
		Image:      spec.Image,
		Cmd:        spec.Cmd,
		Env:        spec.Env,
		Labels:     spec.Labels,
		User:       spec.User,
		WorkingDir: spec.WorkingDir,
	}
	if len(spec.Cmd) > 0 {
		// The request's entrypoint replaces the image's ENTRYPOINT and CMD,
		// as upstream does with its bootstrap launcher.
		cfg.Entrypoint = []string{spec.Cmd[0]}
		cfg.Cmd = spec.Cmd[1:]
	}
	pids := spec.PidsLimit
	// An init as PID 1 reaps the orphans of commands, which the agent
	// does not; without it zombies pile up against the pids limit.
	withInit := true
	host := &container.HostConfig{
		Init: &withInit,
		// Docker's default on cgroup v1 hosts is the host's cgroup
		// namespace, which shows the sandbox the host's cgroup paths.
		CgroupnsMode:   container.CgroupnsModePrivate,
		NetworkMode:    container.NetworkMode(spec.NetworkMode),
		CapDrop:        spec.CapDrop,
		CapAdd:         spec.CapAdd,
		SecurityOpt:    spec.SecurityOpt,
		ReadonlyRootfs: spec.ReadOnlyRootfs,
		Runtime:        spec.OCIRuntime,
		Tmpfs:          spec.Tmpfs,
		ShmSize:        spec.ShmSize,
		Resources: container.Resources{
			NanoCPUs:          spec.NanoCPUs,
			Memory:            spec.MemoryBytes,
			CPUShares:         spec.CPUShares,
			MemoryReservation: spec.MemoryReservationBytes,
		},
		Mounts: []mount.Mount{{
			Type: mount.TypeVolume, Source: volName, Target: AgentDir, ReadOnly: true,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true},
		}},
	}
	if pids > 0 {
		host.Resources.PidsLimit = &pids
	}
	if spec.MemoryBytes > 0 {
		// No swap beyond the memory limit: a memory hog is OOM-killed
		// instead of thrashing the host.
		host.Resources.MemorySwap = spec.MemoryBytes
	}
	if spec.GPUCount != 0 {
		host.Resources.DeviceRequests = []container.DeviceRequest{{Count: spec.GPUCount, Capabilities: [][]string{{"gpu"}}}}
	}
	mounts, pinDir, err := d.planMounts(ctx, spec.Name, spec.Mounts)
	if err != nil {
		return "", err
	}
	host.Mounts = append(host.Mounts, mounts...)
	var plat *ocispec.Platform
	if spec.Platform != "" {
		os, arch, _ := strings.Cut(spec.Platform, "/")
		plat = &ocispec.Platform{OS: os, Architecture: arch}
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	resp, err := d.cli.ContainerCreate(cctx, cfg, host, nil, plat, spec.Name)
	if err != nil {
		if pinDir != "" {
			unpinAll(pinDir)
		}
		return "", wrap(err, "create container %s", spec.Name)
	}
	return resp.ID, nil
}

// Start implements runtime.Runtime.
func (d *Docker) Start(ctx context.Context, id string) error {
	ctx, cancel := d.call(ctx)
	defer cancel()
	return wrap(d.cli.ContainerStart(ctx, id, container.StartOptions{}), "start container %s", id)
}

// Inspect implements runtime.Runtime.
func (d *Docker) Inspect(ctx context.Context, id string) (runtime.Container, error) {
	ctx, cancel := d.call(ctx)
	defer cancel()
	info, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return runtime.Container{}, wrap(err, "inspect container %s", id)
	}
	c := runtime.Container{
		ID:   info.ID,
		Name: strings.TrimPrefix(info.Name, "/"),
	}
	if info.Config != nil {
		c.Image = info.Config.Image
		c.Labels = info.Config.Labels
		c.Cmd = append(append([]string{}, info.Config.Entrypoint...), info.Config.Cmd...)
	}
	c.Created, _ = time.Parse(time.RFC3339Nano, info.Created)
	if st := info.State; st != nil {
		c.Status = string(st.Status)
		c.Running = st.Running
		c.Paused = st.Paused
		c.OOMKilled = st.OOMKilled
		c.ExitCode = st.ExitCode
		c.Error = st.Error
		if t, err := time.Parse(time.RFC3339Nano, st.StartedAt); err == nil && t.Year() > 1 {
			c.StartedAt = t
		}
		if t, err := time.Parse(time.RFC3339Nano, st.FinishedAt); err == nil && t.Year() > 1 {
			c.FinishedAt = t
		}
	}
	return c, nil
}

// List implements runtime.Runtime.
func (d *Docker) List(ctx context.Context, labels map[string]string) ([]runtime.Container, error) {
	args := filters.NewArgs()
	for k, v := range labels {
		if v == "" {
			args.Add("label", k)
		} else {
			args.Add("label", k+"="+v)
		}
	}
	ctx, cancel := d.call(ctx)
	defer cancel()
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, wrap(err, "list containers")
	}
	out := make([]runtime.Container, 0, len(list))
	for _, s := range list {
		c := runtime.Container{
			ID:      s.ID,
			Image:   s.Image,
			Labels:  s.Labels,
			Created: time.Unix(s.Created, 0).UTC(),
			Status:  string(s.State),
			Running: s.State == container.StateRunning,
			Paused:  s.State == container.StatePaused,
		}
		if len(s.Names) > 0 {
			c.Name = strings.TrimPrefix(s.Names[0], "/")
		}
		out = append(out, c)
	}
	return out, nil
}

// removeAttempts and removeRetryDelay shape Remove's retries.
const (
	removeAttempts   = 3
	removeRetryDelay = time.Second
)

// Remove implements runtime.Runtime. A loaded engine sometimes gives up
// waiting for a container it killed ("tried to kill container, but did
// not receive an exit event") although the container does exit, so a
// refused removal is tried again; a container already gone is removed.
func (d *Docker) Remove(ctx context.Context, id string) error {
	d.dropSession(id)
	release := d.releasePins(ctx, id)
	var err error
	for attempt := 1; ; attempt++ {
		cctx, cancel := d.call(ctx)
		err = wrap(d.cli.ContainerRemove(cctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}), "remove container %s", id)
		cancel()
		if err == nil || errors.Is(err, runtime.ErrNotFound) {
			release()
			return err
		}
		if errors.Is(err, runtime.ErrUnavailable) || attempt == removeAttempts {
			return err
		}
		d.log.Warn("container removal refused; retrying", "container", id, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(removeRetryDelay):
		}
	}
}

// Pause implements runtime.Runtime.
func (d *Docker) Pause(ctx context.Context, id string) error {
	ctx, cancel := d.call(ctx)
	defer cancel()
	return wrap(d.cli.ContainerPause(ctx, id), "pause container %s", id)
}

// Unpause implements runtime.Runtime.
func (d *Docker) Unpause(ctx context.Context, id string) error {
	ctx, cancel := d.call(ctx)
	defer cancel()
	return wrap(d.cli.ContainerUnpause(ctx, id), "unpause container %s", id)
}

// Commit implements runtime.Runtime.
func (d *Docker) Commit(ctx context.Context, id, ref string) error {
	_, err := d.cli.ContainerCommit(ctx, id, container.CommitOptions{Reference: ref, Pause: true})
	return wrap(err, "commit container %s", id)
}

// RemoveImage implements runtime.Runtime.
func (d *Docker) RemoveImage(ctx context.Context, ref string) error {
	ctx, cancel := d.call(ctx)
	defer cancel()
	_, err := d.cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true})
	return wrap(err, "remove image %s", ref)
}

// Logs implements runtime.Runtime.
func (d *Docker) Logs(ctx context.Context, id string, tail int, since time.Time) (io.ReadCloser, error) {
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: false}
	if tail > 0 {
		opts.Tail = fmt.Sprint(tail)
	}
	if !since.IsZero() {
		opts.Since = fmt.Sprint(since.Unix())
	}
	rc, err := d.cli.ContainerLogs(ctx, id, opts)
	if err != nil {
		return nil, wrap(err, "logs of container %s", id)
	}
	// Sandboxes never have a TTY, so the log stream is multiplexed.
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, rc)
		rc.Close()
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// PutArchive implements runtime.Runtime.
func (d *Docker) PutArchive(ctx context.Context, id, dir string, tar io.Reader) error {
	// CopyUIDGID: files belong to the container's user, as if it wrote them.
	err := d.cli.CopyToContainer(ctx, id, dir, tar, container.CopyToContainerOptions{CopyUIDGID: true})
	return wrap(err, "copy into container %s:%s", id, dir)
}

// GetArchive implements runtime.Runtime.
func (d *Docker) GetArchive(ctx context.Context, id, path string) (io.ReadCloser, runtime.PathStat, error) {
	rc, st, err := d.cli.CopyFromContainer(ctx, id, path)
	if err != nil {
		return nil, runtime.PathStat{}, wrap(err, "copy from container %s:%s", id, path)
	}
	return rc, pathStat(st), nil
}

// StatPath implements runtime.Runtime.
func (d *Docker) StatPath(ctx context.Context, id, path string) (runtime.PathStat, error) {
	ctx, cancel := d.call(ctx)
	defer cancel()
	st, err := d.cli.ContainerStatPath(ctx, id, path)
	if err != nil {
		return runtime.PathStat{}, wrap(err, "stat %s in container %s", path, id)
	}
	return pathStat(st), nil
}

func pathStat(st container.PathStat) runtime.PathStat {
	return runtime.PathStat{Name: st.Name, Size: st.Size, Mode: st.Mode, Mtime: st.Mtime, IsDir: st.Mode.IsDir()}
}

// EnsureVolume implements runtime.Runtime.
func (d *Docker) EnsureVolume(ctx context.Context, name string, create bool, labels map[string]string) (bool, map[string]string, error) {
	ctx, cancel := d.call(ctx)
	defer cancel()
	v, err := d.cli.VolumeInspect(ctx, name)
	if err == nil {
		return false, v.Labels, nil
	}
	if !errdefs.IsNotFound(err) || !create {
		return false, nil, wrap(err, "inspect volume %s", name)
	}
	if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels}); err != nil {
		return false, nil, wrap(err, "create volume %s", name)
	}
	return true, labels, nil
}

// RemoveVolume implements runtime.Runtime.
func (d *Docker) RemoveVolume(ctx context.Context, name string) error {
	ctx, cancel := d.call(ctx)
	defer cancel()
	return wrap(d.cli.VolumeRemove(ctx, name, false), "remove volume %s", name)
}

// Close implements runtime.Runtime.
func (d *Docker) Close() error {
	d.mu.Lock()
	for id, s := range d.sessions {
		s.close()
		delete(d.sessions, id)
	}
	d.mu.Unlock()
	return d.cli.Close()
}
