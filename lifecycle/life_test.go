package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// okAgent answers every agent request with 200.
var okAgent = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// hold makes a runtime hook that reports each call on entered and blocks
// until release is closed.
func hold(entered chan<- string, method string, release <-chan struct{}) func(context.Context, string) error {
	return func(context.Context, string) error {
		entered <- method
		<-release
		return nil
	}
}

// waitPhase polls until the Manager is in phase (a hang guard, no timing).
func waitPhase(t *testing.T, m *Manager, phase string) {
	t.Helper()
	for {
		if p, _ := m.Phase(); p == phase {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

type createResult struct {
	sb  *Sandbox
	err error
}

// TestCreateDuringStartupReconcile: start-up reconciling removes the
// containers of half-made sandboxes. A create sent while it runs must not
// be one of them: it is refused with a 503, never removed under the caller.
func TestCreateDuringStartupReconcile(t *testing.T) {
	e := newStartingEnv(t, nil)
	e.rt.SetAgent(okAgent)
	ctx := context.Background()
	if err := e.m.Ready(); err == nil {
		t.Fatal("a Manager that has not reconciled is ready")
	}

	// Reconcile stops in its first engine call, its list of containers.
	listing, release := make(chan string, 1), make(chan struct{})
	var once sync.Once
	e.rt.Hook("List", func(ctx context.Context, id string) error {
		once.Do(func() { hold(listing, "List", release)(ctx, id) })
		return nil
	})
	reconciled := make(chan error, 1)
	go func() { reconciled <- e.m.Reconcile(ctx) }()
	<-listing

	// A create now either returns at once, or makes its container and
	// waits in the engine for its agent while reconcile goes on.
	inAgent, agentRelease := make(chan string, 8), make(chan struct{})
	e.rt.Hook("Agent", hold(inAgent, "Agent", agentRelease))
	created := make(chan createResult, 1)
	go func() {
		sb, err := e.m.Sandboxes.Create(ctx, validRequest())
		created <- createResult{sb, err}
	}()
	var res *createResult
	select {
	case r := <-created:
		res = &r
	case <-inAgent:
	}
	close(release)
	if err := <-reconciled; err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	close(agentRelease)
	if res == nil {
		r := <-created
		res = &r
	}

	if res.err != nil {
		wantCode(t, res.err, KindUnavailable, CodeNotReady)
		if recs, _ := e.store.Sandboxes(); len(recs) != 0 {
			t.Errorf("a refused create left %d records", len(recs))
		}
	} else if _, err := e.m.Sandboxes.Get(ctx, res.sb.ID); err != nil {
		t.Errorf("the create served during reconcile returned sandbox %s, which is lost: %v", res.sb.ID, err)
	}
	if err := e.m.Ready(); err != nil {
		t.Fatalf("after reconcile: %v", err)
	}
	e.create(t, validRequest())
}

// TestShutdownWaitsForWork: Shutdown refuses new work, lets a create, a
// pool fill and a snapshot commit in flight finish and the reaper persist
// activity, and only then closes the store and the engine client.
func TestShutdownWaitsForWork(t *testing.T) {
	e := newStartingEnv(t, nil)
	e.rt.SetAgent(okAgent)
	ctx := context.Background()
	e.m.Start()
	waitPhase(t, e.m, PhaseServing)
	sb, _ := e.create(t, validRequest())
	e.clock.Advance(time.Minute)
	e.m.Expiry.Touch(sb.ID)

	entered, release := make(chan string, 16), make(chan struct{})
	e.rt.Hook("Agent", hold(entered, "Agent", release))
	e.rt.Hook("Commit", hold(entered, "Commit", release))
	snap, err := e.m.Snapshots.CreateSnapshot(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	created := make(chan createResult, 1)
	go func() {
		sb, err := e.m.Sandboxes.Create(ctx, validRequest())
		created <- createResult{sb, err}
	}()
	if _, err := e.m.Pools.CreatePool(ctx, "warm", PoolSpec{Image: "busybox:latest"}, PoolCapacity{BufferMax: 1, PoolMax: 1}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 { // the commit, the create's agent and the pool member's
		got = append(got, <-entered)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"Agent", "Agent", "Commit"}) {
		t.Fatalf("in flight: %v", got)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- e.m.Shutdown(ctx) }()
	waitPhase(t, e.m, PhaseStopping)
	_, err = e.m.Sandboxes.Create(ctx, validRequest())
	wantCode(t, err, KindUnavailable, CodeNotReady)
	_, err = e.m.Snapshots.CreateSnapshot(ctx, sb.ID, "")
	wantCode(t, err, KindUnavailable, CodeNotReady)
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) with work in flight", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	res := <-created
	if res.err != nil {
		t.Fatalf("the create in flight failed: %v", res.err)
	}
	if late := e.rt.AfterClose(); len(late) > 0 {
		t.Errorf("runtime used after Close: %v", late)
	}

	// What the work wrote reached the store before it was closed.
	store := openTestStore(t, e.cfg.Store.Dir)
	if rec, err := store.Sandbox(res.sb.ID); err != nil || rec.State != recordReady {
		t.Errorf("record of the create in flight = %+v, %v; want ready", rec, err)
	}
	if s, err := store.Snapshot(snap.ID); err != nil || s.State != snapshotReady {
		t.Errorf("snapshot committed in flight = %+v, %v; want Ready", s, err)
	}
	if rec, err := store.Sandbox(sb.ID); err != nil || !rec.LastActivity.Equal(e.clock.Now()) {
		t.Errorf("activity not persisted by the reaper's last flush: %+v, %v", rec, err)
	}
}

// TestShutdownDeadline: work stuck past the deadline does not hold
// Shutdown, which says so and closes anyway.
func TestShutdownDeadline(t *testing.T) {
	e := newEnv(t, nil)
	e.rt.SetAgent(okAgent)
	ctx := context.Background()
	sb, _ := e.create(t, validRequest())
	entered, release := make(chan string, 1), make(chan struct{})
	defer close(release)
	e.rt.Hook("Commit", hold(entered, "Commit", release))
	if _, err := e.m.Snapshots.CreateSnapshot(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	<-entered
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.m.Shutdown(expired); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown past its deadline = %v, want context.Canceled", err)
	}
	if _, err := e.store.Sandboxes(); err == nil {
		t.Error("the store is still open after Shutdown")
	}
}

// TestStartRetriesReconcile: an engine unreachable at start keeps the
// Manager starting; Start retries until a reconcile succeeds.
func TestStartRetriesReconcile(t *testing.T) {
	e := newStartingEnv(t, nil)
	e.m.d.life.retry = time.Millisecond
	var calls atomic.Int32
	e.rt.Hook("List", func(context.Context, string) error {
		if calls.Add(1) <= 2 {
			return fmt.Errorf("engine down: %w", runtime.ErrUnavailable)
		}
		return nil
	})
	e.m.Start()
	waitPhase(t, e.m, PhaseServing)
	if n := calls.Load(); n < 3 {
		t.Errorf("serving after %d engine calls, want the two failed reconciles and a good one", n)
	}
	if err := e.m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
