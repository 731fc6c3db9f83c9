package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// hangGuard only stops a test that would otherwise hang.
const hangGuard = 30 * time.Second

// A sandbox the engine is stuck on (paused while runc started a process in
// it) answers a specific 503 naming it, is repaired by the reaper, and can
// then be resumed and deleted.
func TestStuckSandboxIsRepaired(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, cid := e.create(t, validRequest())
	other, _ := e.create(t, validRequest())
	if err := e.m.Sandboxes.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.rt.Stick(t, cid)

	_, err := e.m.Sandboxes.Get(ctx, sb.ID)
	wantCode(t, err, KindUnavailable, CodeEngineTimeout)
	if !strings.Contains(err.Error(), sb.ID) {
		t.Errorf("error %q does not name the sandbox", err)
	}
	wantCode(t, e.m.Sandboxes.Resume(ctx, sb.ID), KindUnavailable, CodeEngineTimeout)
	if _, err := e.m.Sandboxes.Get(ctx, other.ID); err != nil {
		t.Errorf("another sandbox while one is stuck: %v", err)
	}

	e.m.Expiry.Sweep(ctx)
	if e.rt.Repairs() != 1 {
		t.Fatalf("the reaper repaired %d containers, want 1", e.rt.Repairs())
	}
	if err := e.m.Sandboxes.Resume(ctx, sb.ID); err != nil {
		t.Fatalf("Resume after repair: %v", err)
	}
	e.m.Expiry.Sweep(ctx)
	if e.rt.Repairs() != 1 {
		t.Errorf("a healthy sandbox was repaired again")
	}
}

// Delete removes a stuck sandbox without waiting for a repair.
func TestDeleteStuckSandbox(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, cid := e.create(t, validRequest())
	if err := e.m.Sandboxes.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.rt.Stick(t, cid)
	if err := e.m.Sandboxes.Delete(ctx, sb.ID); err != nil {
		t.Fatalf("Delete of a stuck sandbox: %v", err)
	}
	if e.rt.Exists(cid) {
		t.Error("the stuck container is still there")
	}
	_, err := e.m.Sandboxes.Get(ctx, sb.ID)
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)
}

// A call that hangs on one sandbox holds no lock that calls about another
// sandbox need.
func TestSlowSandboxHoldsUpNoOther(t *testing.T) {
	e := newEnv(t, nil)
	slow, slowCID := e.create(t, validRequest())
	fast, fastCID := e.create(t, validRequest())
	entered, unblock := make(chan struct{}), make(chan struct{})
	hook := func(ctx context.Context, id string) error {
		if id == slowCID {
			close(entered)
			select {
			case <-unblock:
			case <-ctx.Done():
			}
		}
		return nil
	}
	e.rt.Hook("Inspect", hook)
	done := make(chan error, 1)
	go func() { done <- e.m.Sandboxes.Pause(context.Background(), slow.ID) }()
	<-entered

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"pause", func() error { return e.m.Sandboxes.Pause(ctx, fast.ID) }},
		{"resume", func() error { return e.m.Sandboxes.Resume(ctx, fast.ID) }},
		{"get", func() error { _, err := e.m.Sandboxes.Get(ctx, fast.ID); return err }},
		{"list", func() error { _, _, err := e.m.Sandboxes.List(ctx, ListFilter{Page: 1, PageSize: 20}); return err }},
		{"upload", func() error {
			// Through the archive API, the engine path a hang could block.
			e.rt.Set(t, fastCID, func(c *runtime.Container) { c.State = runtime.StateExited })
			return e.m.Files.PutFile(ctx, fast.ID, FileMeta{Path: "/tmp/x"}, strings.NewReader("x"))
		}},
		{"delete", func() error { return e.m.Sandboxes.Delete(ctx, fast.ID) }},
	} {
		if err := c.call(); err != nil {
			t.Errorf("%s of another sandbox while one hangs: %v", c.name, err)
		}
	}
	close(unblock)
	if err := <-done; err != nil {
		t.Errorf("the slow pause: %v", err)
	}
}

// A transfer that a pause cuts short fails with a clear 409.
func TestTransferCutShortByPause(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, cid := e.create(t, validRequest())
	// Stopped: only then do files go through the archive API, which
	// dockerd holds the container for.
	e.rt.Set(t, cid, func(c *runtime.Container) { c.State = runtime.StateExited })
	if err := e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/tmp/a.txt"}, strings.NewReader("a")); err != nil {
		t.Fatal(err)
	}
	cut := func(context.Context, string) error {
		return fmt.Errorf("transfer cut short: %w", runtime.ErrConflict)
	}
	e.rt.Hook("PutArchive", cut)
	e.rt.Hook("GetArchive", cut)
	err := e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/tmp/b.txt"}, strings.NewReader("b"))
	wantCode(t, err, KindConflict, CodeNotRunning)
	_, err = e.m.Files.OpenFile(ctx, sb.ID, "/tmp/a.txt")
	wantCode(t, err, KindConflict, CodeNotRunning)
	if e, _ := AsError(err); !strings.Contains(e.Message, "paused") {
		t.Errorf("message %q does not say why", e.Message)
	}
}

// The reaper removes expired sandboxes side by side: one whose removal
// hangs holds up none of the others.
func TestReaperIsNotHeldUpByOneSandbox(t *testing.T) {
	e := newEnv(t, nil)
	_, a := e.create(t, validRequest())
	_, b := e.create(t, validRequest())
	var calls atomic.Int32
	second := make(chan struct{})
	var once sync.Once
	e.rt.Hook("Remove", func(context.Context, string) error {
		if calls.Add(1) > 1 {
			once.Do(func() { close(second) })
			return nil
		}
		select {
		case <-second:
		case <-time.After(hangGuard):
			t.Error("the reaper waited for one removal before starting the next")
		}
		return nil
	})
	e.clock.Advance(601 * time.Second)
	e.m.Expiry.Sweep(context.Background())
	if e.rt.Exists(a) || e.rt.Exists(b) {
		t.Errorf("after the sweep: %s exists %v, %s exists %v; want both reaped", a, e.rt.Exists(a), b, e.rt.Exists(b))
	}
}
