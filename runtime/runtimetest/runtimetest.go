// Package runtimetest provides an in-memory runtime.Runtime for the unit
// tests of the packages above runtime, as net/http/httptest does for HTTP
// servers: enough of Docker to drive lifecycle and api without a daemon,
// with every capability (Runtime). Cluster is a second runtime over the same
// sandboxes shaped like a Kubernetes one: the core, records and a lease.
// Only tests import it.
package runtimetest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/hostpath"
)

// File is one entry of a fake container's filesystem.
type File struct {
	Data    []byte
	Mode    os.FileMode // permission bits only
	Dir     bool
	Link    string // symlink target
	ModTime time.Time
}

// container is a container held in memory.
type container struct {
	c      runtime.Container
	spec   runtime.Spec
	files  map[string]*File // by absolute path
	record []byte           // runtime.Records, on a Cluster
}

// Runtime is an in-memory runtime.Runtime. Its containers run nothing:
// their agent is a handler the test sets, and their filesystem is a map the
// archive methods read and write as Docker's do.
type Runtime struct {
	mu          sync.Mutex
	now         func() time.Time
	containers  map[string]*container        // by id
	volumes     map[string]map[string]string // labels by name
	networks    map[string]map[string]string // labels by name
	puts        int                          // PutArchive calls
	agent       http.Handler
	createErr   error
	pingErr     error
	startExit   *int // exit code of containers whose entrypoint ends at once
	logs        string
	prefixes    *hostpath.Prefixes // AllowHostPaths
	enginePaths []string
	hooks       map[string]func(ctx context.Context, id string) error // by method
	stuck       map[string]bool                                       // by container id
	repairs     int
	closed      bool
	late        []string // methods called after Close
}

var _ runtime.Runtime = (*Runtime)(nil)

// Features implements runtime.Runtime: all Docker has but its bulk files
// and egress helpers.
func (f *Runtime) Features() runtime.Features {
	return runtime.Features{
		Archive: f, Images: f, Volumes: f, Pauser: f, Stopper: f, HostPaths: f, Repairer: f, IsolatedNetworks: f,
	}
}

// New returns an empty runtime that stamps containers' creation with now,
// so that tests on a fake clock see consistent times. Its agent answers
// 404 until SetAgent.
func New(now func() time.Time) *Runtime {
	return &Runtime{
		now:        now,
		containers: map[string]*container{},
		volumes:    map[string]map[string]string{},
		networks:   map[string]map[string]string{},
		agent:      http.NotFoundHandler(),
		hooks:      map[string]func(context.Context, string) error{},
		stuck:      map[string]bool{},
	}
}

// Hook makes every call of method ("Inspect", "List", "Pause", "Unpause",
// "Commit", "Stop", "Agent", "StatPath", "GetArchive", "PutArchive", "Remove",
// "EnsureIsolatedNetwork", whose id is the network's name)
// first run fn with the
// call's context and container. fn may block, to inject a delay, or fail
// the call. A nil fn removes the hook.
func (f *Runtime) Hook(method string, fn func(ctx context.Context, id string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fn == nil {
		delete(f.hooks, method)
	} else {
		f.hooks[method] = fn
	}
}

// Stick makes the engine stuck on a container, as Docker is on one frozen
// while runc started a process in it: its calls fail with
// runtime.ErrContainerTimeout until Repair or Remove.
func (f *Runtime) Stick(t testing.TB, id string) {
	t.Helper()
	f.mustWith(t, id, func(c *container) { f.stuck[c.c.ID] = true })
}

// Repairs is the number of containers Repair has freed.
func (f *Runtime) Repairs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.repairs
}

// Repair implements runtime.Repairer.
func (f *Runtime) Repair(_ context.Context, id string) (bool, error) {
	if err := f.use("Repair"); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stuck[id] {
		return false, nil
	}
	delete(f.stuck, id)
	f.repairs++
	return true, nil
}

// use fails a call made after Close, and records it for AfterClose.
func (f *Runtime) use(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		f.late = append(f.late, method)
		return fmt.Errorf("runtimetest: %s after Close: %w", method, runtime.ErrUnavailable)
	}
	return nil
}

// AfterClose lists the methods called after Close, which a caller that
// owns the runtime must never do.
func (f *Runtime) AfterClose() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.late...)
}

// call runs method's hook and fails a call on a stuck container.
func (f *Runtime) call(ctx context.Context, method, id string) error {
	if err := f.use(method); err != nil {
		return err
	}
	f.mu.Lock()
	hook := f.hooks[method]
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, id); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, err := f.lookup(id); err == nil && f.stuck[c.c.ID] {
		return fmt.Errorf("%s %s: %w", method, id, runtime.ErrContainerTimeout)
	}
	return nil
}

func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newContainer(c runtime.Container, spec runtime.Spec) *container {
	return &container{c: c, spec: spec, files: map[string]*File{"/": {Dir: true, Mode: 0o755}}}
}

// lookup finds a container by id or name; callers hold mu.
func (f *Runtime) lookup(ref string) (*container, error) {
	if c, ok := f.containers[ref]; ok {
		return c, nil
	}
	for _, c := range f.containers {
		if c.c.Name == ref {
			return c, nil
		}
	}
	return nil, fmt.Errorf("container %s: %w", ref, runtime.ErrNotFound)
}

// with runs fn on a container under the lock, unless there is no such
// container.
func (f *Runtime) with(ref string, fn func(*container) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(ref)
	if err != nil {
		return err
	}
	return fn(c)
}

// mustWith is with for test helpers, which fail the test on an unknown
// container.
func (f *Runtime) mustWith(t testing.TB, ref string, fn func(*container)) {
	t.Helper()
	if err := f.with(ref, func(c *container) error { fn(c); return nil }); err != nil {
		t.Fatalf("runtimetest: %v", err)
	}
}

// file returns a copy of a container's file at p.
func (f *Runtime) file(id, p string) (File, error) {
	var out File
	err := f.with(id, func(c *container) error {
		fl, ok := c.files[p]
		if !ok {
			return fmt.Errorf("%s: %w", p, runtime.ErrNotFound)
		}
		out = *fl
		return nil
	})
	return out, err
}

// Add puts a container in directly, as if made behind the caller's back,
// and returns its id (c.ID, or a new one if empty).
func (f *Runtime) Add(c runtime.Container) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.ID == "" {
		c.ID = newID()
	}
	f.containers[c.ID] = newContainer(c, runtime.Spec{})
	return c.ID
}

// Set changes a container's state, as a crash or an outside pause would.
func (f *Runtime) Set(t testing.TB, id string, change func(*runtime.Container)) {
	t.Helper()
	f.mustWith(t, id, func(c *container) { change(&c.c) })
}

// Spec returns the spec a container was created with, to check what the
// engine was asked for.
func (f *Runtime) Spec(t testing.TB, id string) runtime.Spec {
	t.Helper()
	var spec runtime.Spec
	f.mustWith(t, id, func(c *container) { spec = c.spec })
	return spec
}

// Exists reports whether a container is still there (not removed).
func (f *Runtime) Exists(id string) bool {
	return f.with(id, func(*container) error { return nil }) == nil
}

// PutFile places a file in a container directly, for what the archive API
// cannot write (symlinks) or to set up a file without going through it.
func (f *Runtime) PutFile(t testing.TB, id, p string, fl File) {
	t.Helper()
	f.mustWith(t, id, func(c *container) { c.files[p] = &fl })
}

// File returns a container's file at p, to check what was written.
func (f *Runtime) File(id, p string) (File, bool) {
	fl, err := f.file(id, p)
	return fl, err == nil
}

// Puts is the number of PutArchive calls so far, to check how many times
// an upload was written.
func (f *Runtime) Puts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts
}

// HasVolume reports whether the named volume exists, to check that it was
// created or removed.
func (f *Runtime) HasVolume(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.volumes[name]
	return ok
}

// SetAgent makes h serve the agent of every running container. The handler
// is looked up per request, so it may change while sandboxes are being
// created (their agent warm-up runs concurrently).
func (f *Runtime) SetAgent(h http.Handler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agent = h
}

// FailCreate makes Create fail with err, or succeed again if err is nil.
func (f *Runtime) FailCreate(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.createErr = err
}

// ExitOnStart makes every later Start leave its container exited with
// code, as an entrypoint that ends at once; a negative code undoes it.
func (f *Runtime) ExitOnStart(code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startExit = nil
	if code >= 0 {
		f.startExit = &code
	}
}

// FailPing makes Ping fail with err, as an engine that does not answer,
// or succeed again if err is nil.
func (f *Runtime) FailPing(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pingErr = err
}

func (f *Runtime) Ping(context.Context) error {
	if err := f.use("Ping"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pingErr
}

// SetEnginePaths sets where the engine keeps its data or socket, which
// CheckHostPath refuses as it does forbidden paths.
func (f *Runtime) SetEnginePaths(paths ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enginePaths = paths
}

// AllowHostPaths opens the prefixes CheckHostPath allows, as Docker's
// runtime does at start; none are allowed until it is called.
func (f *Runtime) AllowHostPaths(paths ...string) error {
	ps, err := hostpath.Open(paths)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.prefixes != nil {
		f.prefixes.Close()
	}
	f.prefixes = ps
	return nil
}

// CheckHostPath implements runtime.HostPaths on the test's own disk, as
// Docker's for a local engine: it fails as Ping does (an engine that does
// not answer cannot say where it keeps its data).
func (f *Runtime) CheckHostPath(_ context.Context, p string, forbidden []string) (runtime.Mount, error) {
	if err := f.use("CheckHostPath"); err != nil {
		return runtime.Mount{}, err
	}
	f.mu.Lock()
	engine, pingErr, ps := f.enginePaths, f.pingErr, f.prefixes
	f.mu.Unlock()
	if pingErr != nil {
		return runtime.Mount{}, pingErr
	}
	if ps == nil {
		ps = &hostpath.Prefixes{}
	}
	return ps.Check(p, append(slices.Clone(forbidden), engine...))
}

// Name is "docker", the engine the fake imitates: engine-scoped error
// codes read DOCKER::, as on the wire.
func (f *Runtime) Name() string { return "docker" }

// EnsureImage and ImageExists have every image.
func (f *Runtime) EnsureImage(context.Context, string, *runtime.RegistryAuth, string, func(string)) error {
	return f.use("EnsureImage")
}

func (f *Runtime) ImageExists(context.Context, string) (bool, error) {
	return true, f.use("ImageExists")
}

func (f *Runtime) Create(_ context.Context, spec runtime.Spec) (string, error) {
	if err := f.use("Create"); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createErr != nil {
		return "", f.createErr
	}
	if _, err := f.lookup(spec.Name); err == nil {
		return "", fmt.Errorf("name %s in use: %w", spec.Name, runtime.ErrConflict)
	}
	id := newID()
	f.containers[id] = newContainer(runtime.Container{
		ID: id, Name: spec.Name, Image: spec.Image, Labels: maps.Clone(spec.Labels),
		Cmd: spec.Cmd, Created: f.now(), State: runtime.StateCreated,
	}, spec)
	return id, nil
}

func (f *Runtime) Start(_ context.Context, id string) error {
	if err := f.use("Start"); err != nil {
		return err
	}
	return f.with(id, func(c *container) error {
		c.c.StartedAt = f.now()
		if f.startExit != nil {
			c.c.State, c.c.ExitCode, c.c.FinishedAt = runtime.StateExited, *f.startExit, f.now()
			return nil
		}
		c.c.State = runtime.StateRunning
		return nil
	})
}

func (f *Runtime) Inspect(ctx context.Context, id string) (runtime.Container, error) {
	var out runtime.Container
	if err := f.call(ctx, "Inspect", id); err != nil {
		return out, err
	}
	err := f.with(id, func(c *container) error {
		out = c.c
		out.Labels = maps.Clone(c.c.Labels)
		return nil
	})
	return out, err
}

// List returns summaries, which (as Docker's) lack the exit code and OOM flag.
func (f *Runtime) List(ctx context.Context, labels map[string]string) ([]runtime.Container, error) {
	if err := f.call(ctx, "List", ""); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []runtime.Container
	for _, c := range f.containers {
		match := true
		for k, v := range labels {
			got, ok := c.c.Labels[k]
			if !ok || (v != "" && got != v) {
				match = false
			}
		}
		if match {
			s := c.c
			s.Labels = maps.Clone(c.c.Labels)
			s.ExitCode, s.OOMKilled = 0, false
			out = append(out, s)
		}
	}
	return out, nil
}

// Remove, like Docker's, frees a stuck container first.
func (f *Runtime) Remove(ctx context.Context, id string) error {
	if err := f.call(ctx, "Remove", id); err != nil && !errors.Is(err, runtime.ErrContainerTimeout) {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// By id only, as the contract says (an engine may not take names).
	if _, ok := f.containers[id]; !ok {
		return fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	delete(f.containers, id)
	delete(f.stuck, id)
	return nil
}

// Pause, like Docker's, refuses a container that is not running or
// already paused.
func (f *Runtime) Pause(ctx context.Context, id string) error {
	if err := f.call(ctx, "Pause", id); err != nil {
		return err
	}
	return f.with(id, func(c *container) error {
		if c.c.State != runtime.StateRunning {
			return fmt.Errorf("pause %s: %w", id, runtime.ErrConflict)
		}
		c.c.State = runtime.StatePaused
		return nil
	})
}

// Unpause, like Docker's, refuses a container that is not paused.
func (f *Runtime) Unpause(ctx context.Context, id string) error {
	if err := f.call(ctx, "Unpause", id); err != nil {
		return err
	}
	return f.with(id, func(c *container) error {
		if c.c.State != runtime.StatePaused {
			return fmt.Errorf("unpause %s: %w", id, runtime.ErrConflict)
		}
		c.c.State = runtime.StateRunning
		return nil
	})
}

// Stop refuses a paused container (the contract has callers unpause it
// first); a stopped one stays stopped.
func (f *Runtime) Stop(ctx context.Context, id string, _ time.Duration) error {
	if err := f.call(ctx, "Stop", id); err != nil {
		return err
	}
	return f.with(id, func(c *container) error {
		if c.c.State == runtime.StatePaused {
			return fmt.Errorf("stop %s: %w", id, runtime.ErrConflict)
		}
		if c.c.State == runtime.StateRunning {
			c.c.State, c.c.ExitCode, c.c.FinishedAt = runtime.StateExited, 137, f.now()
		}
		return nil
	})
}

// Commit and RemoveImage succeed without keeping images.
func (f *Runtime) Commit(ctx context.Context, id, _ string) error { return f.call(ctx, "Commit", id) }

func (f *Runtime) RemoveImage(context.Context, string) error { return f.use("RemoveImage") }

// Logs is the same output for every container: one line unless SetLogs
// changed it, cut to its last tail lines as Docker's.
func (f *Runtime) Logs(_ context.Context, _ string, tail int, _ time.Time) (io.ReadCloser, error) {
	if err := f.use("Logs"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	out := f.logs
	f.mu.Unlock()
	if out == "" {
		out = "hello from the sandbox\n"
	}
	if lines := strings.SplitAfter(out, "\n"); tail > 0 && len(lines) > tail+1 {
		out = strings.Join(lines[len(lines)-tail-1:], "")
	}
	return io.NopCloser(strings.NewReader(out)), nil
}

// SetLogs sets the output every container's Logs returns ("" is the
// default line); lines end with "\n".
func (f *Runtime) SetLogs(out string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = out
}

// PutArchive extracts a tar stream into the container's file map, like
// Docker: the target directory must exist.
func (f *Runtime) PutArchive(ctx context.Context, id, dir string, r io.Reader) error {
	if err := f.call(ctx, "PutArchive", id); err != nil {
		return err
	}
	f.mu.Lock()
	f.puts++
	f.mu.Unlock()
	return f.with(id, func(c *container) error {
		if d, ok := c.files[dir]; !ok || !d.Dir {
			return fmt.Errorf("put archive into %s: %w", dir, runtime.ErrNotFound)
		}
		tr := tar.NewReader(r)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			p := path.Join(dir, hdr.Name)
			switch hdr.Typeflag {
			case tar.TypeDir:
				c.files[p] = &File{Dir: true, Mode: os.FileMode(hdr.Mode).Perm(), ModTime: hdr.ModTime}
			case tar.TypeReg:
				data, err := io.ReadAll(tr)
				if err != nil {
					return err
				}
				c.files[p] = &File{Data: data, Mode: os.FileMode(hdr.Mode).Perm(), ModTime: hdr.ModTime}
			}
		}
	})
}

func (f *Runtime) GetArchive(ctx context.Context, id, p string) (io.ReadCloser, runtime.PathStat, error) {
	if err := f.call(ctx, "GetArchive", id); err != nil {
		return nil, runtime.PathStat{}, err
	}
	fl, err := f.file(id, p)
	if err != nil {
		return nil, runtime.PathStat{}, err
	}
	var buf bytes.Buffer
	if err := fl.archive(&buf, path.Base(p)); err != nil {
		return nil, runtime.PathStat{}, err
	}
	return io.NopCloser(&buf), fl.stat(p), nil
}

// archive writes fl as a one-entry tar, as Docker sends a path.
func (fl *File) archive(w io.Writer, name string) error {
	tw := tar.NewWriter(w)
	hdr := &tar.Header{Name: name, Mode: int64(fl.Mode), ModTime: fl.ModTime}
	switch {
	case fl.Dir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
	case fl.Link != "":
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, fl.Link
	default:
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(fl.Data))
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeReg {
		if _, err := tw.Write(fl.Data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func (fl *File) stat(p string) runtime.PathStat {
	mode := fl.Mode
	switch {
	case fl.Dir:
		mode |= os.ModeDir
	case fl.Link != "":
		mode |= os.ModeSymlink
	}
	return runtime.PathStat{Name: path.Base(p), Size: int64(len(fl.Data)), Mode: mode, Mtime: fl.ModTime, IsDir: fl.Dir}
}

func (f *Runtime) StatPath(ctx context.Context, id, p string) (runtime.PathStat, error) {
	if err := f.call(ctx, "StatPath", id); err != nil {
		return runtime.PathStat{}, err
	}
	fl, err := f.file(id, p)
	if err != nil {
		return runtime.PathStat{}, err
	}
	return fl.stat(p), nil
}

// Agent serves requests with the handler of SetAgent, in process; only
// running containers have an agent.
func (f *Runtime) Agent(ctx context.Context, id string) (http.RoundTripper, error) {
	if err := f.call(ctx, "Agent", id); err != nil {
		return nil, err
	}
	err := f.with(id, func(c *container) error {
		if c.c.State != runtime.StateRunning {
			return fmt.Errorf("agent of %s: %w", id, runtime.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return agentTransport{f}, nil
}

// agentTransport calls the runtime's current agent handler in process.
type agentTransport struct{ f *Runtime }

func (t agentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.f.use("agent request"); err != nil {
		return nil, err
	}
	t.f.mu.Lock()
	h := t.f.agent
	t.f.mu.Unlock()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

func (f *Runtime) EnsureVolume(_ context.Context, name string, create bool, labels map[string]string) (bool, map[string]string, error) {
	if err := f.use("EnsureVolume"); err != nil {
		return false, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.volumes[name]; ok {
		return false, l, nil
	}
	if !create {
		return false, nil, fmt.Errorf("volume %s: %w", name, runtime.ErrNotFound)
	}
	f.volumes[name] = maps.Clone(labels)
	return true, labels, nil
}

func (f *Runtime) RemoveVolume(_ context.Context, name string) error {
	if err := f.use("RemoveVolume"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.volumes[name]; !ok {
		return fmt.Errorf("volume %s: %w", name, runtime.ErrNotFound)
	}
	delete(f.volumes, name)
	return nil
}

// Close makes every later call fail and be listed by AfterClose.
func (f *Runtime) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// EnsureIsolatedNetwork implements runtime.IsolatedNetworks.
func (f *Runtime) EnsureIsolatedNetwork(ctx context.Context, name string, labels map[string]string) error {
	if err := f.call(ctx, "EnsureIsolatedNetwork", name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.networks[name]; !ok {
		f.networks[name] = maps.Clone(labels)
	}
	return nil
}

// Network returns the labels of an isolated network, and whether it exists.
func (f *Runtime) Network(name string) (map[string]string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.networks[name]
	return maps.Clone(l), ok
}
