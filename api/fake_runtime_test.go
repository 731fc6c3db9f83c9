package api

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
)

// fakeRuntime is a minimal in-memory runtime.Runtime for driving the API
// (lifecycle's fake is not importable from here).
type fakeRuntime struct {
	mu         sync.Mutex
	containers map[string]*runtime.Container
	files      map[string][]byte // "cid:path" → content
	agentReqs  []*http.Request   // requests the agent received
	pingErr    error
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{containers: map[string]*runtime.Container{}, files: map[string][]byte{}}
}

func (f *fakeRuntime) find(ref string) (*runtime.Container, error) {
	if c, ok := f.containers[ref]; ok {
		return c, nil
	}
	for _, c := range f.containers {
		if c.Name == ref {
			return c, nil
		}
	}
	return nil, fmt.Errorf("container %s: %w", ref, runtime.ErrNotFound)
}

func (f *fakeRuntime) Ping(context.Context) error { return f.pingErr }

func (f *fakeRuntime) EnsureImage(context.Context, string, *runtime.RegistryAuth, string, func(string)) error {
	return nil
}

func (f *fakeRuntime) ImageExists(context.Context, string) (bool, error) { return true, nil }

func (f *fakeRuntime) Create(_ context.Context, spec runtime.Spec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	f.containers[id] = &runtime.Container{ID: id, Name: spec.Name, Image: spec.Image, Labels: maps.Clone(spec.Labels), Cmd: spec.Cmd, Created: time.Now(), Status: "created"}
	return id, nil
}

func (f *fakeRuntime) Start(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(id)
	if err != nil {
		return err
	}
	c.Status, c.Running = "running", true
	return nil
}

func (f *fakeRuntime) Inspect(_ context.Context, id string) (runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(id)
	if err != nil {
		return runtime.Container{}, err
	}
	return *c, nil
}

func (f *fakeRuntime) List(_ context.Context, labels map[string]string) ([]runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []runtime.Container
	for _, c := range f.containers {
		ok := true
		for k, v := range labels {
			if got, has := c.Labels[k]; !has || (v != "" && got != v) {
				ok = false
			}
		}
		if ok {
			out = append(out, *c)
		}
	}
	return out, nil
}

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(id)
	if err != nil {
		return err
	}
	delete(f.containers, c.ID)
	return nil
}

func (f *fakeRuntime) Pause(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(id)
	if err != nil {
		return err
	}
	c.Paused, c.Status = true, "paused"
	return nil
}

func (f *fakeRuntime) Unpause(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(id)
	if err != nil {
		return err
	}
	c.Paused, c.Status = false, "running"
	return nil
}

func (f *fakeRuntime) Commit(context.Context, string, string) error { return nil }

func (f *fakeRuntime) RemoveImage(context.Context, string) error { return nil }

func (f *fakeRuntime) Logs(context.Context, string, int, time.Time) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("hello from the sandbox\n")), nil
}

// PutArchive stores the regular files of a tar stream; directories are
// implied, so every directory exists.
func (f *fakeRuntime) PutArchive(_ context.Context, id, dir string, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.files[id+":"+path.Join(dir, hdr.Name)] = data
		f.mu.Unlock()
	}
}

func (f *fakeRuntime) GetArchive(_ context.Context, id, p string) (io.ReadCloser, runtime.PathStat, error) {
	f.mu.Lock()
	data, ok := f.files[id+":"+p]
	f.mu.Unlock()
	if !ok {
		return nil, runtime.PathStat{}, fmt.Errorf("%s: %w", p, runtime.ErrNotFound)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path.Base(p), Mode: 0o644, Size: int64(len(data))}); err != nil {
		return nil, runtime.PathStat{}, err
	}
	_, _ = tw.Write(data)
	_ = tw.Close()
	return io.NopCloser(&buf), runtime.PathStat{Name: path.Base(p), Size: int64(len(data)), Mode: 0o644}, nil
}

func (f *fakeRuntime) StatPath(_ context.Context, id, p string) (runtime.PathStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if data, ok := f.files[id+":"+p]; ok {
		return runtime.PathStat{Name: path.Base(p), Size: int64(len(data)), Mode: 0o644}, nil
	}
	return runtime.PathStat{Name: path.Base(p), IsDir: true, Mode: 0o755}, nil
}

// Agent answers every request with a JSON echo of what it received and
// records the request.
func (f *fakeRuntime) Agent(_ context.Context, id string) (http.RoundTripper, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(id)
	if err != nil {
		return nil, err
	}
	if !c.Running || c.Paused {
		return nil, fmt.Errorf("agent: %w", runtime.ErrConflict)
	}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
		}
		f.mu.Lock()
		f.agentReqs = append(f.agentReqs, r)
		f.mu.Unlock()
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(rec, "agent %s %s %s", r.Method, r.URL.RequestURI(), body)
		return rec.Result(), nil
	}), nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// lastAgentRequest returns the newest request the agent saw.
func (f *fakeRuntime) lastAgentRequest(t *testing.T) *http.Request {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.agentReqs) == 0 {
		t.Fatal("the agent received no request")
	}
	return f.agentReqs[len(f.agentReqs)-1]
}

func (f *fakeRuntime) agentRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.agentReqs)
}

func (f *fakeRuntime) EnsureVolume(context.Context, string, bool, map[string]string) (bool, map[string]string, error) {
	return true, nil, nil
}

func (f *fakeRuntime) RemoveVolume(context.Context, string) error { return nil }

func (f *fakeRuntime) Close() error { return nil }

const testKey = "test-api-key"

// env is an API server over a Manager over the fake runtime.
type env struct {
	srv *httptest.Server
	mgr *lifecycle.Manager
	rt  *fakeRuntime
}

// newEnv starts a server; edit adjusts the config first.
func newEnv(t *testing.T, edit func(*config.Config)) *env {
	t.Helper()
	cfg := config.Default()
	cfg.Store.Dir = t.TempDir()
	cfg.Server.APIKey = testKey
	if edit != nil {
		edit(&cfg)
	}
	store, err := lifecycle.OpenStore(cfg.Store.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	rt := newFakeRuntime()
	log := slog.New(slog.DiscardHandler)
	mgr, err := lifecycle.New(cfg, rt, store, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(cfg, mgr, rt, log))
	t.Cleanup(srv.Close)
	return &env{srv: srv, mgr: mgr, rt: rt}
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body as a JSON object.
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

// do sends a request with the API key unless headers say otherwise (a
// header with an empty value is removed).
func (e *env) do(t *testing.T, method, target, body string, headers map[string]string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+target, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(headerAPIKey, testKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

const createBody = `{"image":{"uri":"busybox:latest"},"entrypoint":["tail","-f","/dev/null"],"timeout":600,"resourceLimits":{"cpu":"1","memory":"512Mi"},"metadata":{"team":"a"},"secureAccess":false}`

// create makes a sandbox through the API and returns its id.
func (e *env) create(t *testing.T) string {
	t.Helper()
	r := e.do(t, http.MethodPost, "/v1/sandboxes", createBody, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id, _ := r.json(t)["id"].(string)
	if id == "" {
		t.Fatalf("create returned no id: %s", r.body)
	}
	return id
}

// wantError checks a {code, message} envelope.
func wantError(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d (body %s)", r.status, status, r.body)
	}
	m := r.json(t)
	if m["code"] != code {
		t.Errorf("code = %v, want %s (body %s)", m["code"], code, r.body)
	}
	if msg, _ := m["message"].(string); msg == "" {
		t.Errorf("error without a message: %s", r.body)
	}
	if r.header.Get("X-Request-ID") == "" {
		t.Error("error response without X-Request-ID")
	}
	if got := r.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
}
