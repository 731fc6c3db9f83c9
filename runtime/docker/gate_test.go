package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// hangGuard only stops a test that would otherwise hang.
const hangGuard = 30 * time.Second

const (
	ctrA = "a"
	ctrB = "b"
)

func guarded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// waitFor blocks until cond holds for the gate of id.
func waitFor(t *testing.T, gs *gates, id string, cond func(*gate) bool) {
	t.Helper()
	if _, err := gs.wait(guarded(t), id, cond); err != nil {
		t.Fatalf("gate of %s never reached the expected state: %v", id, err)
	}
	gs.mu.Unlock()
}

func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestGatePauseWaitsForProcessStart(t *testing.T) {
	gs := gates{grace: hangGuard}
	release, err := gs.start(context.Background(), ctrA)
	if err != nil {
		t.Fatal(err)
	}
	// A pause that gives up while the start is set up has not begun.
	ctx, cancel := context.WithCancel(context.Background())
	failed := make(chan error, 1)
	go func() {
		_, err := gs.exclusive(ctx, ctrA, 0)
		failed <- err
	}()
	waitFor(t, &gs, ctrA, func(g *gate) bool { return g.exclusive })
	cancel()
	if err := <-failed; !errors.Is(err, context.Canceled) {
		t.Fatalf("pause during a process start = %v, want it to wait until cancelled", err)
	}

	// A pause that waits goes ahead once the start is over.
	paused := make(chan func(), 1)
	go func() {
		end, err := gs.exclusive(guarded(t), ctrA, 0)
		if err != nil {
			t.Errorf("pause after the start: %v", err)
		}
		paused <- end
	}()
	waitFor(t, &gs, ctrA, func(g *gate) bool { return g.exclusive })
	release()
	release() // twice is harmless
	end := <-paused
	if end == nil {
		t.FailNow()
	}
	gs.setPaused(ctrA, true)
	end()
	if _, err := gs.start(context.Background(), ctrA); !errors.Is(err, runtime.ErrConflict) {
		t.Fatalf("process start while paused = %v, want ErrConflict", err)
	}
	gs.setPaused(ctrA, false)
	release, err = gs.start(context.Background(), ctrA)
	if err != nil {
		t.Fatalf("process start after resume: %v", err)
	}
	release()
}

func TestGateNothingStartsDuringAPause(t *testing.T) {
	gs := gates{}
	end, err := gs.exclusive(context.Background(), ctrA, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gs.start(cancelled(), ctrA); !errors.Is(err, context.Canceled) {
		t.Errorf("process start during a pause = %v, want it to wait", err)
	}
	if _, _, err := gs.transfer(cancelled(), ctrA); !errors.Is(err, context.Canceled) {
		t.Errorf("transfer during a pause = %v, want it to wait", err)
	}
	// Another container is not held up.
	rb, err := gs.start(context.Background(), ctrB)
	if err != nil {
		t.Fatalf("process start in %s while %s is being paused: %v", ctrB, ctrA, err)
	}
	rb()
	started := make(chan error, 1)
	go func() {
		release, err := gs.start(guarded(t), ctrA)
		if err == nil {
			release()
		}
		started <- err
	}()
	gs.setPaused(ctrA, true)
	end()
	if err := <-started; !errors.Is(err, runtime.ErrConflict) {
		t.Errorf("process start that waited for a pause = %v, want ErrConflict", err)
	}
	// A paused container's files can still be copied.
	_, release, err := gs.transfer(context.Background(), ctrA)
	if err != nil {
		t.Fatalf("transfer while paused: %v", err)
	}
	release()
	waitFor(t, &gs, ctrA, func(g *gate) bool { return g.starts == 0 && !g.exclusive && len(g.transfers) == 0 })
}

func TestGatePauseLetsATransferFinish(t *testing.T) {
	gs := gates{}
	tctx, release, err := gs.transfer(context.Background(), ctrA)
	if err != nil {
		t.Fatal(err)
	}
	if !gs.busy(ctrA) || gs.busy(ctrB) {
		t.Errorf("busy = %v, %v; want true for the container with a transfer only", gs.busy(ctrA), gs.busy(ctrB))
	}
	paused := make(chan error, 1)
	go func() {
		end, err := gs.exclusive(guarded(t), ctrA, hangGuard)
		if err == nil {
			end()
		}
		paused <- err
	}()
	waitFor(t, &gs, ctrA, func(g *gate) bool { return g.exclusive })
	select {
	case err := <-paused:
		t.Fatalf("pause returned (%v) while a transfer within its grace was in flight", err)
	default:
	}
	release()
	if err := <-paused; err != nil {
		t.Fatalf("pause after the transfer: %v", err)
	}
	if err := aborted(tctx, context.Canceled); errors.Is(err, errAborted) {
		t.Errorf("a transfer that finished reads as aborted")
	}
	if gs.busy(ctrA) {
		t.Error("busy after the transfer ended")
	}
}

func TestGatePauseAbortsAStalledTransfer(t *testing.T) {
	gs := gates{}
	tctx, release, err := gs.transfer(context.Background(), ctrA)
	if err != nil {
		t.Fatal(err)
	}
	// The pause does not wait for the aborted call's caller, which may be
	// blocked on its own stalled client.
	end, err := gs.exclusive(guarded(t), ctrA, 0)
	if err != nil {
		t.Fatalf("pause with a stalled transfer: %v", err)
	}
	select {
	case <-tctx.Done():
	default:
		t.Fatal("the stalled transfer was not aborted")
	}
	if gs.busy(ctrA) {
		t.Error("an aborted transfer still counts as in flight")
	}
	end()
	release()
	if err := aborted(tctx, context.Canceled); !errors.Is(err, errAborted) || !errors.Is(err, runtime.ErrConflict) {
		t.Errorf("aborted transfer's error = %v, want errAborted (a conflict)", err)
	}
	if err := aborted(tctx, nil); err != nil {
		t.Errorf("aborted(nil) = %v", err)
	}
}

func TestGateForget(t *testing.T) {
	gs := gates{}
	gs.setPaused(ctrA, true)
	gs.forget(ctrA)
	release, err := gs.start(context.Background(), ctrA)
	if err != nil {
		t.Fatalf("start in a forgotten (new) container: %v", err)
	}
	release()
}
