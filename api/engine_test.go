package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// TestEngineScopedCodes: the engine-scoped error codes carry the runtime's
// name, so a Kubernetes-shaped runtime answers KUBERNETES::, not DOCKER::.
func TestEngineScopedCodes(t *testing.T) {
	cfg := config.Default()
	cfg.Store.Dir = t.TempDir()
	cfg.Server.APIKey = testKey
	rt := runtimetest.NewCluster(time.Now)
	log := slog.New(slog.DiscardHandler)
	mgr := newManager(t, cfg, rt, log)
	if err := mgr.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(cfg, backendsOf(mgr), rt, log))
	t.Cleanup(srv.Close)
	e := &env{srv: srv, mgr: mgr, rt: rt.Fake()}
	wantError(t, e.do(t, http.MethodGet, "/v1/sandboxes/nope", "", nil), http.StatusNotFound, "KUBERNETES::SANDBOX_NOT_FOUND")
	wantError(t, e.do(t, http.MethodGet, "/sandboxes/nope/proxy/0/x", "", nil), http.StatusBadRequest, "KUBERNETES::INVALID_PORT")
}
