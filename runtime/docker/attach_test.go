package docker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// TestWedgedAttach: an engine whose exec attach never answers (a hung
// runc exec) fails the agent's start at its deadline, and holds nothing up
// past it: the next start of the same sandbox and its removal go ahead.
func TestWedgedAttach(t *testing.T) {
	t.Parallel() // waits out its API timeouts
	attached := make(chan struct{}, 4)
	release := make(chan struct{})
	d := fakeEngine(t, 200*time.Millisecond, false, map[string]http.HandlerFunc{
		"POST /containers/c1/exec": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]string{"Id": "e1"})
		},
		"POST /exec/e1/start": func(w http.ResponseWriter, r *http.Request) {
			attached <- struct{}{}
			select { // never answers, until the test ends
			case <-r.Context().Done():
			case <-release:
			}
		},
		"GET /containers/c1/json": func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"message":"no such container"}`, http.StatusNotFound)
		},
		"DELETE /containers/c1": func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) },
	})
	t.Cleanup(func() { close(release) })
	d.opts.AgentTransport = TransportExec

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for i := range 2 { // the second start is not stuck behind the first
		done := make(chan error, 1)
		go func() { _, err := d.Agent(ctx, "c1"); done <- err }()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			t.Fatalf("start %d: Agent hangs with the attach", i+1)
		}
		if !errors.Is(err, runtime.ErrContainerTimeout) {
			t.Fatalf("start %d: Agent = %v, want ErrContainerTimeout", i+1, err)
		}
		<-attached
	}
	if err := d.Remove(ctx, "c1"); err != nil || ctx.Err() != nil {
		t.Fatalf("Remove while an attach hangs: %v (guard %v)", err, ctx.Err())
	}
}
