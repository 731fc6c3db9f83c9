package api

import (
	"context"
	"net/http"
	"testing"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// TestNotServing: until the first reconcile has finished, and once
// shutdown has begun, the API answers 503 with the error envelope and
// /health says why; /metrics still answers.
func TestNotServing(t *testing.T) {
	const create = `{"image":{"uri":"busybox"},"entrypoint":["tail","-f","/dev/null"],"timeout":600}`
	check := func(t *testing.T, e *env, status, reason string) {
		t.Helper()
		r := e.do(t, http.MethodGet, "/health", "", nil)
		if h := r.json(t); r.status != http.StatusServiceUnavailable || h["status"] != status || h["reason"] != reason {
			t.Errorf("/health = %d %v, want 503 status %q reason %q", r.status, h, status, reason)
		}
		for _, req := range [][2]string{{http.MethodPost, "/v1/sandboxes"}, {http.MethodGet, "/sandboxes"}, {http.MethodGet, "/v1/pools"}} {
			r := e.do(t, req[0], req[1], create, nil)
			if b := r.json(t); r.status != http.StatusServiceUnavailable || b["code"] != lifecycle.CodeNotReady || b["message"] == "" {
				t.Errorf("%s %s = %d %v, want 503 %s", req[0], req[1], r.status, b, lifecycle.CodeNotReady)
			}
		}
		if r := e.do(t, http.MethodGet, "/metrics", "", nil); r.status != http.StatusOK {
			t.Errorf("/metrics = %d, want 200", r.status)
		}
	}
	t.Run("starting", func(t *testing.T) {
		e := newStartingEnv(t, nil)
		check(t, e, lifecycle.PhaseStarting, "reconciling with the engine")
		if err := e.mgr.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := e.do(t, http.MethodGet, "/health", "", nil); r.status != http.StatusOK {
			t.Errorf("/health after reconcile = %d %s", r.status, r.body)
		}
		if r := e.do(t, http.MethodPost, "/v1/sandboxes", create, nil); r.status != http.StatusAccepted {
			t.Errorf("create after reconcile = %d %s", r.status, r.body)
		}
	})
	t.Run("stopping", func(t *testing.T) {
		e := newEnv(t, nil)
		if err := e.mgr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		check(t, e, lifecycle.PhaseStopping, "shutting down")
	})
}
