package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

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
	rt    *runtimetest.Runtime
	store *BoltStore
	clock *fakeClock
	cfg   config.Config
}

// testConfig is the default config with a store in a temp dir.
func testConfig(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.Store.Dir = t.TempDir()
	return cfg
}

// newEnv builds a testEnv whose Manager serves (it has reconciled); edit
// adjusts the config first.
func newEnv(t *testing.T, edit func(*config.Config)) *testEnv {
	t.Helper()
	e := newStartingEnv(t, edit)
	if err := e.m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

// newStartingEnv is newEnv before the first reconcile.
// viaAgent sends a request through the agent transport of sandbox id and
// returns the answer's body.
func viaAgent(t *testing.T, m *Manager, id, method, path, body string) string {
	t.Helper()
	tr, err := m.Sandboxes.Transport(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, "http://agent"+path, strings.NewReader(body))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return string(out)
}

// openTestStore opens the store in dir, closed when the test ends (if it
// was not already).
func openTestStore(t testing.TB, dir string) *BoltStore {
	t.Helper()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStartingEnv(t *testing.T, edit func(*config.Config)) *testEnv {
	t.Helper()
	cfg := testConfig(t)
	if edit != nil {
		edit(&cfg)
	}
	store := openTestStore(t, cfg.Store.Dir)
	clock := &fakeClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	rt := runtimetest.New(clock.Now)
	if err := rt.AllowHostPaths(cfg.Storage.AllowedHostPaths...); err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, rt, store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.d.now = clock.Now
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
	sb, err := e.m.Sandboxes.Create(context.Background(), req)
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
