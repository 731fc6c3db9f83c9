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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/agent"
	"github.com/sandboxd/sandboxd/runtime/hostpath"
)

// Options configure the Docker runtime.
type Options struct {
	Host       string        // Docker endpoint; "" = discovered (see discoverEndpoint)
	APITimeout time.Duration // bound on each non-streaming Engine API call
	// AgentBinaries are static Linux agent binaries by sandbox platform
	// ("linux/arm64"), EmbeddedAgents those built into a release binary,
	// and LocalAgent the file of this machine's own platform (Linux only:
	// sandboxd-agent beside sandboxd, or sandboxd itself); see agentbin.go.
	AgentBinaries  map[string]string
	EmbeddedAgents map[string][]byte
	LocalAgent     string
	Logger         *slog.Logger
	// MountDir is a directory only sandboxd can reach (under its state
	// dir) where host mounts are pinned while their container exists;
	// "" never pins (see mounts.go).
	MountDir string
	// AllowedHostPaths are the prefixes host paths may lie below; they are
	// opened once, here (see package hostpath).
	AllowedHostPaths []string
	// LogMaxSize and LogMaxFiles rotate container logs where the daemon's
	// log driver is json-file or local; "" leaves the driver's default.
	LogMaxSize  string
	LogMaxFiles int
	// DiskLimit sizes each container's writable layer (storage-opt size);
	// "" = unlimited.
	DiskLimit string
	// AgentTransport is TransportAuto (the default, "") or TransportExec
	// (see direct.go).
	AgentTransport string
}

// Docker drives sandboxes through the Docker Engine API.
type Docker struct {
	cli     *client.Client
	timeout time.Duration
	log     *slog.Logger
	agents  *agentSet
	opts    Options

	logMu     ctxLock
	logDriver string // the daemon's log driver, once known

	sessions *agent.Sessions // by container id

	engineMu         sync.Mutex
	enginePathsKnown []string // the engine's own host paths, once known

	mountDir    string
	prefixes    *hostpath.Prefixes
	hostMu      ctxLock
	hostDecided bool
	hostErr     error // why sandboxd is not root on the engine's host; nil if it is

	gates   gates // orders calls into a container with its pause
	freezer *freezer

	exitMu sync.Mutex
	exited map[string]runtime.Container // last inspect of exited containers, for summary

	removeRetryDelay time.Duration // tests shorten it
	pauseRetryDelay  time.Duration // tests shorten it
	pauseSettle      time.Duration // tests shorten it
}

var _ runtime.Runtime = (*Docker)(nil)

// Features implements runtime.Runtime.
func (d *Docker) Features() runtime.Features {
	return runtime.Features{
		Archive: d, BulkFiles: d, Images: d, Volumes: d, Pauser: d, Stopper: d, HostPaths: d,
		Repairer: d, IsolatedNetworks: d, Egress: d,
	}
}

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
	switch opts.AgentTransport {
	case "":
		opts.AgentTransport = TransportAuto
	case TransportAuto, TransportExec:
	default:
		return nil, fmt.Errorf("agent transport %q: want %q or %q", opts.AgentTransport, TransportAuto, TransportExec)
	}
	if opts.APITimeout <= 0 {
		opts.APITimeout = 180 * time.Second
	}
	d := &Docker{
		cli:      cli,
		timeout:  opts.APITimeout,
		log:      opts.Logger,
		opts:     opts,
		sessions: agent.NewSessions(),
		mountDir: opts.MountDir,
		freezer:  newFreezer(),
		gates:    gates{grace: transferGrace},
		exited:   map[string]runtime.Container{},

		removeRetryDelay: removeRetryDelay,
		pauseRetryDelay:  pauseRetryDelay,
		pauseSettle:      pauseSettle,
		logMu:            newCtxLock(),
		hostMu:           newCtxLock(),
	}
	if d.agents, err = newAgentSet(opts.AgentBinaries, opts.EmbeddedAgents, opts.LocalAgent, opts.Logger); err != nil {
		return nil, err
	}
	if d.prefixes, err = hostpath.Open(opts.AllowedHostPaths); err != nil {
		return nil, err
	}
	d.sweepPins(ctx)
	return d, nil
}

// call bounds a non-streaming Engine API call by the configured timeout.
func (d *Docker) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

// containerTimeout bounds each call about one container that can hang on
// that container alone (inspect, pause, unpause, exec set-up, stat), well
// below [docker] api_timeout, so that one stuck container is reported as
// such quickly and holds nothing up meanwhile.
const containerTimeout = 30 * time.Second

// short bounds a call about one container by containerTimeout (or the API
// timeout if that is shorter).
func (d *Docker) short(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(d.timeout, containerTimeout))
}

// wrapContainer is wrap for a call about container id bounded by short: if
// the call ran out of time while the engine still answers pings, the engine
// is stuck on this container (runtime.ErrContainerTimeout), not down.
func (d *Docker) wrapContainer(ctx context.Context, err error, id, format string, args ...any) error {
	if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return wrap(err, format, args...)
	}
	pctx, cancel := d.short(ctx)
	defer cancel()
	if d.Ping(pctx) != nil {
		return wrap(err, format, args...)
	}
	return fmt.Errorf("%s: %w: the engine answers pings but not about container %s within %s", fmt.Sprintf(format, args...), runtime.ErrContainerTimeout, id, min(d.timeout, containerTimeout))
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

// Name implements runtime.Runtime.
func (d *Docker) Name() string { return "docker" }

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
	nested, err := checkUserNamespaces(spec)
	if err != nil {
		return "", err
	}
	mounts, pinDir, err := d.planMounts(ctx, spec.Name, spec.Mounts)
	if err != nil {
		return "", err
	}
	cfg, host, plat := translate(spec, engineSetup{agentVolume: volName, mounts: mounts, logOpts: d.logRotation(ctx), diskLimit: d.opts.DiskLimit, seccomp: nested})
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

// logRotation returns the log options that rotate a container's log, for
// the drivers that take them (json-file, local); other drivers (journald,
// syslog, remote ones) keep their own retention and get none. The
// daemon's driver is asked once.
func (d *Docker) logRotation(ctx context.Context) map[string]string {
	if d.opts.LogMaxSize == "" {
		return nil
	}
	if d.logMu.lock(ctx) != nil {
		return nil // the create fails on ctx too
	}
	defer d.logMu.unlock()
	if d.logDriver == "" {
		cctx, cancel := d.call(ctx)
		defer cancel()
		info, err := d.cli.Info(cctx)
		if err != nil {
			return nil // the create fails too; the next one asks again
		}
		d.logDriver = info.LoggingDriver
		if d.logDriver != "json-file" && d.logDriver != "local" {
			d.log.Warn("container logs are not rotated by sandboxd: the daemon's log driver takes no max-size", "driver", d.logDriver)
		}
	}
	if d.logDriver != "json-file" && d.logDriver != "local" {
		return nil
	}
	return map[string]string{"max-size": d.opts.LogMaxSize, "max-file": strconv.Itoa(max(d.opts.LogMaxFiles, 1))}
}

// CheckDiskLimit reports whether the engine's storage driver can size a
// container's root filesystem, when [docker] disk_limit asks for it.
// overlay2 can only on xfs mounted with pquota, which docker info does
// not show: on xfs it is left to the first create to fail.
func (d *Docker) CheckDiskLimit(ctx context.Context) error {
	if d.opts.DiskLimit == "" {
		return nil
	}
	ctx, cancel := d.call(ctx)
	defer cancel()
	info, err := d.cli.Info(ctx)
	if err != nil {
		return wrap(err, "docker info")
	}
	backing := ""
	for _, kv := range info.DriverStatus {
		if kv[0] == "Backing Filesystem" {
			backing = kv[1]
		}
	}
	switch {
	case info.Driver == "btrfs", info.Driver == "zfs", info.Driver == "devicemapper", info.Driver == "windowsfilter":
		return nil
	case (info.Driver == "overlay2" || info.Driver == "overlay") && backing == "xfs":
		return nil
	}
	return fmt.Errorf("[docker] disk_limit = %q: the engine's storage driver %s (on %s) cannot limit a container's disk; "+
		"unset disk_limit, or run Docker on overlay2 over xfs mounted with pquota, btrfs or zfs", d.opts.DiskLimit, info.Driver, backing)
}

// Start implements runtime.Runtime.
func (d *Docker) Start(ctx context.Context, id string) error {
	ctx, cancel := d.call(ctx)
	defer cancel()
	return wrap(d.cli.ContainerStart(ctx, id, container.StartOptions{}), "start container %s", id)
}

// Inspect implements runtime.Runtime.
func (d *Docker) Inspect(ctx context.Context, id string) (runtime.Container, error) {
	if d.gates.busy(id) {
		if c, ok, err := d.summary(ctx, id); ok || err != nil {
			return c, err
		}
	}
	cctx, cancel := d.short(ctx)
	defer cancel()
	info, err := d.cli.ContainerInspect(cctx, id)
	if err != nil {
		return runtime.Container{}, d.wrapContainer(ctx, err, id, "inspect container %s", id)
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
	if hc := info.HostConfig; hc != nil {
		c.Limits = runtime.Resources{NanoCPUs: hc.NanoCPUs, MemoryBytes: hc.Memory}
	}
	for _, m := range info.Mounts {
		if m.Destination != AgentDir {
			c.Mounts = append(c.Mounts, m.Destination)
		}
	}
	c.Created, _ = time.Parse(time.RFC3339Nano, info.Created)
	if st := info.State; st != nil {
		c.State = state(st.Status)
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
	d.exitMu.Lock()
	if c.State.Stopped() {
		d.exited[id] = c
	} else {
		delete(d.exited, id)
	}
	d.exitMu.Unlock()
	return c, nil
}

// summary answers Inspect from the engine's list, which dockerd serves
// without the container's lock, while a transfer holds that lock. The list
// lacks how an exited container ended: that comes from its last inspect.
// ok is false if the list has no container of that exact id.
func (d *Docker) summary(ctx context.Context, id string) (runtime.Container, bool, error) {
	cctx, cancel := d.short(ctx)
	defer cancel()
	list, err := d.cli.ContainerList(cctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("id", id))})
	if err != nil {
		return runtime.Container{}, false, d.wrapContainer(ctx, err, id, "inspect container %s", id)
	}
	for _, c := range summaries(list) {
		if c.ID != id {
			continue
		}
		d.exitMu.Lock()
		last, known := d.exited[id]
		d.exitMu.Unlock()
		if known && c.State == last.State {
			return last, true, nil
		}
		return c, true, nil
	}
	return runtime.Container{}, false, nil
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
	return summaries(list), nil
}

// summaries converts the engine's list entries.
func summaries(list []container.Summary) []runtime.Container {
	out := make([]runtime.Container, 0, len(list))
	for _, s := range list {
		c := runtime.Container{
			ID:      s.ID,
			Image:   s.Image,
			Labels:  s.Labels,
			Created: time.Unix(s.Created, 0).UTC(),
			State:   state(s.State),
		}
		if len(s.Names) > 0 {
			c.Name = strings.TrimPrefix(s.Names[0], "/")
		}
		out = append(out, c)
	}
	return out
}

// state is the neutral name of a Docker container state.
func state(s container.ContainerState) runtime.State {
	switch s {
	case container.StateCreated:
		return runtime.StateCreated
	case container.StateRunning:
		return runtime.StateRunning
	case container.StatePaused:
		return runtime.StatePaused
	case container.StateRestarting:
		return runtime.StateRestarting
	case container.StateRemoving:
		return runtime.StateRemoving
	case container.StateExited:
		return runtime.StateExited
	case container.StateDead:
		return runtime.StateDead
	}
	return runtime.StateUnknown
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
	d.sessions.Drop(id)
	end, err := d.gates.acquire(ctx, id)
	if err != nil {
		return wrap(err, "remove container %s", id)
	}
	defer func() {
		end()
		d.gates.forget(id)
		d.exitMu.Lock()
		delete(d.exited, id)
		d.exitMu.Unlock()
	}()
	// dockerd cannot even kill a container stuck in a process start.
	if _, err := d.freezer.thaw(id); err != nil && !errors.Is(err, errNotStuck) {
		d.log.Warn("thaw stuck container before removal", "container", id, "err", err)
	}
	// Transfers hold the container's lock: abort them at once. A process
	// start still going after containerTimeout is killed with the rest.
	dctx, cancel := d.short(ctx)
	if err := d.gates.drain(dctx, id, 0); err != nil {
		d.log.Warn("removing container with a process start under way", "container", id, "err", err)
	}
	cancel()
	release := d.releasePins(ctx, id)
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
		case <-time.After(d.removeRetryDelay):
		}
	}
}

// Pause implements runtime.Runtime. It is ordered with the calls that
// reach into the container (see gates).
func (d *Docker) Pause(ctx context.Context, id string) error {
	cctx, cancel := d.short(ctx)
	defer cancel()
	end, err := d.gates.exclusive(cctx, id, d.gates.grace)
	if err != nil {
		return d.wrapContainer(ctx, err, id, "pause container %s", id)
	}
	defer end()
	for attempt := 1; ; attempt++ {
		err = d.cli.ContainerPause(cctx, id)
		// runc gives up, and thaws the container again, when a process
		// does not freeze in time (one in uninterruptible I/O on a loaded
		// host); a later try usually succeeds.
		if err == nil || attempt == pauseAttempts || !strings.Contains(err.Error(), "unable to freeze") {
			break
		}
		d.log.Warn("container did not freeze; retrying", "container", id, "err", err)
		select {
		case <-cctx.Done():
		case <-time.After(d.pauseRetryDelay):
		}
	}
	if err != nil {
		return d.wrapContainer(ctx, err, id, "pause container %s", id)
	}
	d.gates.setPaused(id, true)
	d.settlePause(cctx, id, true)
	return nil
}

// Stop implements runtime.Stopper. It is ordered like Pause, and drops
// the agent's session, whose process it ends.
func (d *Docker) Stop(ctx context.Context, id string, grace time.Duration) error {
	d.sessions.Drop(id)
	cctx, cancel := d.call(ctx)
	defer cancel()
	end, err := d.gates.exclusive(cctx, id, d.gates.grace)
	if err != nil {
		return d.wrapContainer(ctx, err, id, "stop container %s", id)
	}
	defer end()
	secs := int(grace.Seconds())
	return wrap(d.cli.ContainerStop(cctx, id, container.StopOptions{Timeout: &secs}), "stop container %s", id)
}

// pauseAttempts and pauseRetryDelay shape Pause's retries.
const (
	pauseAttempts   = 3
	pauseRetryDelay = 200 * time.Millisecond
)

// Unpause implements runtime.Runtime. It is ordered like Pause: dockerd
// would wait for a transfer in flight.
func (d *Docker) Unpause(ctx context.Context, id string) error {
	cctx, cancel := d.short(ctx)
	defer cancel()
	end, err := d.gates.exclusive(cctx, id, d.gates.grace)
	if err != nil {
		return d.wrapContainer(ctx, err, id, "unpause container %s", id)
	}
	defer end()
	if err := d.cli.ContainerUnpause(cctx, id); err != nil {
		// The task runs and dockerd's flag lags (see settlePause): the
		// container is unpaused once the flag catches up.
		if !strings.Contains(err.Error(), "cannot resume a running process") || !d.settlePause(cctx, id, false) {
			return d.wrapContainer(ctx, err, id, "unpause container %s", id)
		}
	}
	d.gates.setPaused(id, false)
	d.settlePause(cctx, id, false)
	return nil
}

// dockerd sets a container's paused flag twice: when its pause or unpause
// call returns, and again when containerd's event for the change arrives.
// On a loaded host the event of a pause can arrive after the unpause that
// followed it, so for a moment dockerd reports a running container as
// paused (and refuses exec in it, and answers a second unpause with
// "cannot resume a running process"), until the unpause's own event
// arrives. Seen here about once in 300 quick pause and unpause pairs.
// settlePause waits, up to pauseSettle, until dockerd reports what the
// call did, so that the caller's next inspect agrees with it; it reports
// whether it did.
func (d *Docker) settlePause(ctx context.Context, id string, paused bool) bool {
	deadline := time.Now().Add(d.pauseSettle)
	for {
		info, err := d.cli.ContainerInspect(ctx, id)
		switch {
		case err != nil:
			return false
		case info.State != nil && info.State.Paused == paused:
			return true
		case time.Now().After(deadline):
			d.log.Warn("the engine still reports the container's former pause state", "container", id, "paused", !paused)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pauseSettlePoll):
		}
	}
}

// pauseSettle bounds settlePause; the lag seen is about 10 ms.
const (
	pauseSettle     = 2 * time.Second
	pauseSettlePoll = 10 * time.Millisecond
)

// Repair implements runtime.Repairer: a container frozen while runc was
// starting a process in it (paused by another client, or by a sandboxd
// before this one) is thawed so that the start finishes, then frozen again
// if the engine still records it as paused.
func (d *Docker) Repair(ctx context.Context, id string) (bool, error) {
	if _, stuck := d.freezer.stuck(id); !stuck {
		return false, nil
	}
	// Ordered with this process's own pause and resume, so that the
	// container is not frozen again after a resume.
	end, err := d.gates.acquire(ctx, id)
	if err != nil {
		return false, err
	}
	defer end()
	c, err := d.freezer.thaw(id)
	if errors.Is(err, errNotStuck) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	info, err := d.Inspect(ctx, id)
	if err != nil {
		return true, err
	}
	if info.State == runtime.StatePaused {
		return true, d.freezer.refreeze(c)
	}
	return true, nil
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

// PutArchive implements runtime.Runtime. A pause lets it finish within
// transferGrace, then aborts it (errAborted).
func (d *Docker) PutArchive(ctx context.Context, id, dir string, tar io.Reader) error {
	tctx, release, err := d.gates.transfer(ctx, id)
	if err != nil {
		return wrap(err, "copy into container %s:%s", id, dir)
	}
	defer release()
	// CopyUIDGID: files belong to the container's user, as if it wrote them.
	err = d.cli.CopyToContainer(tctx, id, dir, tar, container.CopyToContainerOptions{CopyUIDGID: true})
	return wrap(aborted(tctx, err), "copy into container %s:%s", id, dir)
}

// GetArchive implements runtime.Runtime. The transfer lasts until the
// stream is closed; a pause lets it finish within transferGrace, then
// aborts it, and reading it fails with errAborted.
func (d *Docker) GetArchive(ctx context.Context, id, path string) (io.ReadCloser, runtime.PathStat, error) {
	tctx, release, err := d.gates.transfer(ctx, id)
	if err != nil {
		return nil, runtime.PathStat{}, wrap(err, "copy from container %s:%s", id, path)
	}
	// The deadline covers the answer only: the context also carries the
	// stream.
	sctx, stop := context.WithCancelCause(tctx)
	timer := time.AfterFunc(min(d.timeout, containerTimeout), func() { stop(context.DeadlineExceeded) })
	rc, st, err := d.cli.CopyFromContainer(sctx, id, path)
	if !timer.Stop() { // the answer came too late
		if err == nil {
			rc.Close()
		}
		err = context.DeadlineExceeded
	}
	end := func() {
		stop(nil)
		release()
	}
	if err != nil {
		end()
		return nil, runtime.PathStat{}, d.wrapContainer(ctx, aborted(tctx, err), id, "copy from container %s:%s", id, path)
	}
	return &transferStream{rc: rc, tctx: tctx, end: end}, pathStat(st), nil
}

// transferStream is an archive stream that ends its transfer when closed.
type transferStream struct {
	rc   io.ReadCloser
	tctx context.Context
	end  func()
}

func (s *transferStream) Read(p []byte) (int, error) {
	n, err := s.rc.Read(p)
	if err != nil && err != io.EOF {
		err = aborted(s.tctx, err)
	}
	return n, err
}

func (s *transferStream) Close() error {
	err := s.rc.Close()
	s.end()
	return err
}

// StatPath implements runtime.Runtime.
func (d *Docker) StatPath(ctx context.Context, id, path string) (runtime.PathStat, error) {
	tctx, release, err := d.gates.transfer(ctx, id)
	if err != nil {
		return runtime.PathStat{}, wrap(err, "stat %s in container %s", path, id)
	}
	defer release()
	cctx, cancel := d.short(tctx)
	defer cancel()
	st, err := d.cli.ContainerStatPath(cctx, id, path)
	if err != nil {
		return runtime.PathStat{}, d.wrapContainer(ctx, aborted(tctx, err), id, "stat %s in container %s", path, id)
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
	d.sessions.Close()
	d.prefixes.Close()
	return d.cli.Close()
}

// ctxLock is a mutex whose waiters give up when their context ends. It
// guards what is learnt once from the engine, across the call that asks:
// that call may take the whole API timeout, and a request waiting behind
// it must still end with its own context.
type ctxLock chan struct{}

func newCtxLock() ctxLock { return make(ctxLock, 1) }

func (l ctxLock) lock(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l ctxLock) unlock() { <-l }
