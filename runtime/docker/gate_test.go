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

// waitFor polls the gate of id until cond holds.
func waitFor(t *testing.T, gs *gates, id string, cond func(*gate) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := gs.wait(ctx, id, cond); err != nil {
		t.Fatalf("gate of %s never reached the expected state: %v", id, err)
	}
	gs.mu.Unlock()
}

func TestGatePauseWaitsForSetUp(t *testing.T) {
	var gs gates
	release, err := gs.enter(context.Background(), ctrA)
	if err != nil {
		t.Fatal(err)
	}
	// A pause that gives up while the set-up runs must not have paused.
	ctx, cancel := context.WithCancel(context.Background())
	failed := make(chan error, 1)
	go func() {
		_, err := gs.freeze(ctx, ctrA)
		failed <- err
	}()
	waitFor(t, &gs, ctrA, func(g *gate) bool { return g.freezers == 1 })
	cancel()
	if err := <-failed; !errors.Is(err, context.Canceled) {
		t.Fatalf("freeze during a set-up = %v, want it to wait until cancelled", err)
	}

	// A pause that waits goes ahead once the set-up ends.
	frozen := make(chan func(bool), 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		done, err := gs.freeze(ctx, ctrA)
		if err != nil {
			t.Errorf("freeze after the set-up: %v", err)
		}
		frozen <- done
	}()
	waitFor(t, &gs, ctrA, func(g *gate) bool { return g.freezers == 1 })
	select {
	case <-frozen:
		t.Fatal("freeze returned while a set-up was in flight")
	default:
	}
	release()
	release() // twice is harmless
	if done := <-frozen; done != nil {
		done(true)
	}
	if _, err := gs.enter(context.Background(), ctrA); !errors.Is(err, runtime.ErrConflict) {
		t.Fatalf("enter while paused = %v, want ErrConflict", err)
	}
	gs.thawed(ctrA)
	release, err = gs.enter(context.Background(), ctrA)
	if err != nil {
		t.Fatalf("enter after thawed: %v", err)
	}
	release()
}

func TestGateSetUpWaitsForPause(t *testing.T) {
	for _, paused := range []bool{true, false} {
		var gs gates
		done, err := gs.freeze(context.Background(), ctrA)
		if err != nil {
			t.Fatal(err)
		}
		// Another container is not held up.
		rb, err := gs.enter(context.Background(), ctrB)
		if err != nil {
			t.Fatalf("enter %s while %s is being paused: %v", ctrB, ctrA, err)
		}
		rb()
		entered := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			release, err := gs.enter(ctx, ctrA)
			if err == nil {
				release()
			}
			entered <- err
		}()
		select {
		case err := <-entered:
			t.Fatalf("enter during a pause returned %v before the pause ended", err)
		default:
		}
		done(paused)
		err = <-entered
		if paused && !errors.Is(err, runtime.ErrConflict) || !paused && err != nil {
			t.Errorf("pause ended with paused=%v: enter = %v", paused, err)
		}
		// Nothing is left held: a new pause goes ahead at once.
		waitFor(t, &gs, ctrA, func(g *gate) bool { return g.users == 0 && g.freezers == 0 })
	}
}

func TestGateEnterGivesUp(t *testing.T) {
	var gs gates
	done, err := gs.freeze(context.Background(), ctrA)
	if err != nil {
		t.Fatal(err)
	}
	defer done(false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := gs.enter(ctx, ctrA); !errors.Is(err, context.Canceled) {
		t.Fatalf("enter with a cancelled context during a pause = %v", err)
	}
	waitFor(t, &gs, ctrA, func(g *gate) bool { return g.users == 0 })
}

func TestGateForget(t *testing.T) {
	var gs gates
	done, _ := gs.freeze(context.Background(), ctrA)
	done(true)
	gs.forget(ctrA)
	release, err := gs.enter(context.Background(), ctrA)
	if err != nil {
		t.Fatalf("enter a forgotten (new) container: %v", err)
	}
	release()
}
