package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// echoAgent is the sandboxes' agent: it answers every request with what it
// received and records the requests.
type echoAgent struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (a *echoAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	a.mu.Lock()
	a.reqs = append(a.reqs, r)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "agent %s %s %s", r.Method, r.URL.RequestURI(), body)
}

// count returns how many requests the agent received.
func (a *echoAgent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reqs)
}

// last returns the newest request the agent received.
func (a *echoAgent) last(t *testing.T) *http.Request {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.reqs) == 0 {
		t.Fatal("the agent received no request")
	}
	return a.reqs[len(a.reqs)-1]
}

const testKey = "test-api-key"

// env is an API server over a Manager over the fake runtime.
type env struct {
	srv   *httptest.Server
	mgr   *lifecycle.Manager
	rt    *runtimetest.Runtime
	agent *echoAgent
}

// newEnv starts a server whose lifecycle serves (it has reconciled); edit
// adjusts the config first.
func newEnv(t *testing.T, edit func(*config.Config)) *env {
	t.Helper()
	e := newStartingEnv(t, edit)
	if err := e.mgr.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

// newStartingEnv is newEnv before the lifecycle's first reconcile.
// newManager is a Manager on rt, wired as sandboxd wires it, its store in
// cfg.Store.Dir (closed when the test ends).
func newManager(t testing.TB, cfg config.Config, rt runtime.Runtime, log *slog.Logger) *lifecycle.Manager {
	t.Helper()
	store, err := lifecycle.OpenStore(cfg.Store.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mgr, err := lifecycle.New(cfg, rt, lifecycle.StoreFor(rt, store), log)
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

func newStartingEnv(t *testing.T, edit func(*config.Config)) *env {
	t.Helper()
	cfg := config.Default()
	cfg.Store.Dir = t.TempDir()
	cfg.Server.APIKey = testKey
	if edit != nil {
		edit(&cfg)
	}
	rt, agent := runtimetest.New(time.Now), &echoAgent{}
	rt.SetAgent(agent)
	if err := rt.AllowHostPaths(cfg.Storage.AllowedHostPaths...); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	mgr := newManager(t, cfg, rt, log)
	srv := httptest.NewServer(New(cfg, backendsOf(mgr), rt, log))
	t.Cleanup(srv.Close)
	return &env{srv: srv, mgr: mgr, rt: rt, agent: agent}
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
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
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

// backendsOf hands the services of m to the server, as cmd/sandboxd does.
func backendsOf(m *lifecycle.Manager) Backends {
	return Backends{
		Engine: m.Engine(), Life: m, Metrics: m.Metrics(),
		Sandboxes: m.Sandboxes, Diagnostics: m.Sandboxes, Proxy: m.Sandboxes,
		Snapshots: m.Snapshots, Forks: m.Forks, Pools: m.Pools, Files: m.Files, Egress: m.Egress, Activity: m.Expiry,
	}
}
