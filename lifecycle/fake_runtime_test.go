package lifecycle

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

// fakeFile is one entry of a fake container's filesystem.
type fakeFile struct {
	data    []byte
	mode    os.FileMode
	dir     bool
	link    string // symlink target
	modTime time.Time
}

// fakeContainer is a container held in memory.
type fakeContainer struct {
	c     runtime.Container
	spec  runtime.Spec
	files map[string]*fakeFile // by absolute path
}

// fakeRuntime is an in-memory runtime.Runtime: enough of Docker for the
// Manager to be exercised without a daemon.
type fakeRuntime struct {
	mu         sync.Mutex
	containers map[string]*fakeContainer // by id
	volumes    map[string]map[string]string
	removed    []string // container ids passed to Remove, in order
	puts       int      // PutArchive calls
	agent      http.Handler
	createErr  error
	now        func() time.Time
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		containers: map[string]*fakeContainer{},
		volumes:    map[string]map[string]string{},
		agent:      http.NotFoundHandler(),
		now:        time.Now,
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lookup finds a container by id or name; callers hold mu.
func (f *fakeRuntime) lookup(ref string) (*fakeContainer, error) {
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

// add puts a container directly into the fake (as if made behind sandboxd's back).
func (f *fakeRuntime) add(c runtime.Container) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.ID == "" {
		c.ID = randomHex(32)
	}
	f.containers[c.ID] = &fakeContainer{c: c, files: map[string]*fakeFile{"/": {dir: true, mode: 0o755}}}
	return c.ID
}

// set changes a container's state.
func (f *fakeRuntime) set(t *testing.T, id string, fn func(*runtime.Container)) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		t.Fatalf("fake runtime: %v", err)
	}
	fn(&c.c)
}

// spec returns the spec a container was created with.
func (f *fakeRuntime) spec(t *testing.T, id string) runtime.Spec {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		t.Fatalf("fake runtime: %v", err)
	}
	return c.spec
}

func (f *fakeRuntime) exists(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.lookup(id)
	return err == nil
}

func (f *fakeRuntime) Ping(context.Context) error { return nil }

func (f *fakeRuntime) EnsureImage(context.Context, string, *runtime.RegistryAuth, string, func(string)) error {
	return nil
}

func (f *fakeRuntime) ImageExists(context.Context, string) (bool, error) { return true, nil }

func (f *fakeRuntime) Create(_ context.Context, spec runtime.Spec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createErr != nil {
		return "", f.createErr
	}
	if _, err := f.lookup(spec.Name); err == nil {
		return "", fmt.Errorf("name %s in use: %w", spec.Name, runtime.ErrConflict)
	}
	id := randomHex(32)
	f.containers[id] = &fakeContainer{
		c: runtime.Container{
			ID: id, Name: spec.Name, Image: spec.Image, Labels: maps.Clone(spec.Labels),
			Cmd: spec.Cmd, Created: f.now(), Status: "created",
		},
		spec:  spec,
		files: map[string]*fakeFile{"/": {dir: true, mode: 0o755}},
	}
	return id, nil
}

func (f *fakeRuntime) Start(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		return err
	}
	c.c.Status, c.c.Running = "running", true
	return nil
}

func (f *fakeRuntime) Inspect(_ context.Context, id string) (runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		return runtime.Container{}, err
	}
	out := c.c
	out.Labels = maps.Clone(c.c.Labels)
	return out, nil
}

// List returns summaries, which (as Docker's) lack the exit code and OOM flag.
func (f *fakeRuntime) List(_ context.Context, labels map[string]string) ([]runtime.Container, error) {
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

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		return err
	}
	delete(f.containers, c.c.ID)
	f.removed = append(f.removed, c.c.ID)
	return nil
}

func (f *fakeRuntime) Pause(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		return err
	}
	if !c.c.Running || c.c.Paused {
		return fmt.Errorf("pause %s: %w", id, runtime.ErrConflict)
	}
	c.c.Paused, c.c.Status = true, "paused"
	return nil
}

func (f *fakeRuntime) Unpause(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		return err
	}
	if !c.c.Paused {
		return fmt.Errorf("unpause %s: %w", id, runtime.ErrConflict)
	}
	c.c.Paused, c.c.Status = false, "running"
	return nil
}

func (f *fakeRuntime) Commit(context.Context, string, string) error { return nil }

func (f *fakeRuntime) RemoveImage(context.Context, string) error { return nil }

func (f *fakeRuntime) Logs(context.Context, string, int, time.Time) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("log line\n")), nil
}

// PutArchive extracts a tar stream into the container's file map, like
// Docker: the target directory must exist.
func (f *fakeRuntime) PutArchive(_ context.Context, id, dir string, r io.Reader) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts++
	c, err := f.lookup(id)
	if err != nil {
		return err
	}
	if d, ok := c.files[dir]; !ok || !d.dir {
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
			c.files[p] = &fakeFile{dir: true, mode: os.FileMode(hdr.Mode).Perm(), modTime: hdr.ModTime}
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			c.files[p] = &fakeFile{data: data, mode: os.FileMode(hdr.Mode).Perm(), modTime: hdr.ModTime}
		}
	}
}

func (f *fakeRuntime) GetArchive(_ context.Context, id, p string) (io.ReadCloser, runtime.PathStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		return nil, runtime.PathStat{}, err
	}
	fl, ok := c.files[p]
	if !ok {
		return nil, runtime.PathStat{}, fmt.Errorf("%s: %w", p, runtime.ErrNotFound)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: path.Base(p), Mode: int64(fl.mode), ModTime: fl.modTime}
	switch {
	case fl.dir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
	case fl.link != "":
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, fl.link
	default:
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(fl.data))
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, runtime.PathStat{}, err
	}
	if hdr.Typeflag == tar.TypeReg {
		if _, err := tw.Write(fl.data); err != nil {
			return nil, runtime.PathStat{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, runtime.PathStat{}, err
	}
	return io.NopCloser(&buf), fl.stat(p), nil
}

func (fl *fakeFile) stat(p string) runtime.PathStat {
	mode := fl.mode
	switch {
	case fl.dir:
		mode |= os.ModeDir
	case fl.link != "":
		mode |= os.ModeSymlink
	}
	return runtime.PathStat{Name: path.Base(p), Size: int64(len(fl.data)), Mode: mode, Mtime: fl.modTime, IsDir: fl.dir}
}

func (f *fakeRuntime) StatPath(_ context.Context, id, p string) (runtime.PathStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		return runtime.PathStat{}, err
	}
	fl, ok := c.files[p]
	if !ok {
		return runtime.PathStat{}, fmt.Errorf("%s: %w", p, runtime.ErrNotFound)
	}
	return fl.stat(p), nil
}

// putFile places a file in a container directly.
func (f *fakeRuntime) putFile(t *testing.T, id, p string, fl fakeFile) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		t.Fatalf("fake runtime: %v", err)
	}
	c.files[p] = &fl
}

// file returns a file of a container.
func (f *fakeRuntime) file(id, p string) (fakeFile, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		return fakeFile{}, false
	}
	fl, ok := c.files[p]
	if !ok {
		return fakeFile{}, false
	}
	return *fl, true
}

// Agent serves requests with f.agent, in process; only running containers
// have an agent. The handler is looked up per request, so a test may set
// f.agent after creating sandboxes (whose agent warm-up runs concurrently).
func (f *fakeRuntime) Agent(_ context.Context, id string) (http.RoundTripper, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookup(id)
	if err != nil {
		return nil, err
	}
	if !c.c.Running || c.c.Paused {
		return nil, fmt.Errorf("agent of %s: %w", id, runtime.ErrConflict)
	}
	return agentTransport{f}, nil
}

// agentTransport is a RoundTripper that calls the fake's agent handler in
// process.
type agentTransport struct{ f *fakeRuntime }

func (t agentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.f.mu.Lock()
	h := t.f.agent
	t.f.mu.Unlock()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

func (f *fakeRuntime) EnsureVolume(_ context.Context, name string, create bool, labels map[string]string) (bool, map[string]string, error) {
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

func (f *fakeRuntime) RemoveVolume(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.volumes[name]; !ok {
		return fmt.Errorf("volume %s: %w", name, runtime.ErrNotFound)
	}
	delete(f.volumes, name)
	return nil
}

func (f *fakeRuntime) Close() error { return nil }

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testEnv is a Manager over a fake runtime, a temp store and a fake clock.
type testEnv struct {
	m     *Manager
	rt    *fakeRuntime
	store *Store
	clock *fakeClock
	cfg   config.Config
}

// testConfig is the default config with a store in a temp dir.
func testConfig(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.Store.Dir = t.TempDir()
	return cfg
}

// newEnv builds a testEnv; edit adjusts the config first.
func newEnv(t *testing.T, edit func(*config.Config)) *testEnv {
	t.Helper()
	cfg := testConfig(t)
	if edit != nil {
		edit(&cfg)
	}
	store, err := OpenStore(cfg.Store.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clock := &fakeClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	rt := newFakeRuntime()
	rt.now = clock.Now
	m, err := New(cfg, rt, store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.now = clock.Now
	return &testEnv{m: m, rt: rt, store: store, clock: clock, cfg: cfg}
}

// validRequest is a create request that passes validation.
func validRequest() CreateRequest {
	timeout := 600
	return CreateRequest{
		Image:      &ImageSpec{URI: "busybox:latest"},
		Entrypoint: []string{"tail", "-f", "/dev/null"},
		Timeout:    &timeout,
	}
}

// create makes a sandbox and returns it with its container id.
func (e *testEnv) create(t *testing.T, req CreateRequest) (*Sandbox, string) {
	t.Helper()
	sb, err := e.m.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	rec, err := e.store.Sandbox(sb.ID)
	if err != nil {
		t.Fatalf("record of %s: %v", sb.ID, err)
	}
	return sb, rec.ContainerID
}

// wantCode fails unless err is a lifecycle *Error of the given kind and code.
func wantCode(t *testing.T, err error, kind Kind, code string) {
	t.Helper()
	e, ok := AsError(err)
	if !ok {
		t.Fatalf("error = %v (%T), want *Error %s", err, err, code)
	}
	if e.Kind != kind || e.Code != code {
		t.Fatalf("error = kind %d code %s (%s), want kind %d code %s", e.Kind, e.Code, e.Message, kind, code)
	}
}
