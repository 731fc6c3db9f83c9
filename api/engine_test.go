package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// TestEngineScopedCodes: the engine-scoped error codes carry the runtime's
// name, so a Kubernetes-shaped runtime answers KUBERNETES::, not DOCKER::.
func TestEngineScopedCodes(t *testing.T) {
	cfg := config.Default()
	cfg.Store.Dir = t.TempDir()
	cfg.Server.APIKey = testKey
	store, err := lifecycle.OpenStore(cfg.Store.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	rt := runtimetest.NewCluster(time.Now)
	log := slog.New(slog.DiscardHandler)
	mgr, err := lifecycle.New(cfg, rt, lifecycle.StoreFor(rt, store), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(cfg, mgr, rt, log))
	t.Cleanup(srv.Close)
	e := &env{srv: srv, mgr: mgr, rt: rt.Fake()}
	wantError(t, e.do(t, http.MethodGet, "/v1/sandboxes/nope", "", nil), http.StatusNotFound, "KUBERNETES::SANDBOX_NOT_FOUND")
	wantError(t, e.do(t, http.MethodGet, "/sandboxes/nope/proxy/0/x", "", nil), http.StatusBadRequest, "KUBERNETES::INVALID_PORT")
}
