package lifecycle

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"
)

// waitForkState polls a task until it is settled and cleaned up.
func waitForkState(t *testing.T, f *Forks, id string) *ForkOperation {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		op, err := f.GetFork(id)
		if err != nil {
			t.Fatal(err)
		}
		if (op.Status.State == ForkSucceeded || op.Status.State == ForkFailed) && !op.CleanupPending {
			return op
		}
		if time.Now().After(deadline) {
			t.Fatalf("fork %s did not settle: %+v", id, op)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForkCaps: at most MaxForkTasks tasks run at once (the next is
// refused with 429, not queued), and a task over the count cap is refused
// before anything is made; once tasks settle, forks are admitted again.
func TestForkCaps(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, _ := e.create(t, validRequest())
	release := make(chan struct{})
	e.rt.Hook("Commit", func(ctx context.Context, _ string) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	_, err := e.m.Forks.Fork(ctx, sb.ID, ForkRequest{Timeout: 600, Count: MaxForkCount + 1})
	wantCode(t, err, KindInvalid, CodeForkInvalid)
	var ids []string
	for range MaxForkTasks {
		op, err := e.m.Forks.Fork(ctx, sb.ID, ForkRequest{Timeout: 600, Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, op.ID)
	}
	_, err = e.m.Forks.Fork(ctx, sb.ID, ForkRequest{Timeout: 600, Count: 1})
	wantCode(t, err, KindTooMany, CodeForkTooMany)
	close(release)
	for _, id := range ids {
		if op := waitForkState(t, e.m.Forks, id); op.Status.State != ForkSucceeded || len(op.SandboxIDs) != 1 {
			t.Errorf("fork %s settled %+v, want Succeeded with one sandbox", id, op)
		}
	}
	if _, err := e.m.Forks.Fork(ctx, sb.ID, ForkRequest{Timeout: 600, Count: 1}); err != nil {
		t.Errorf("a fork once the others settled: %v", err)
	}
}

// TestForkIdempotency: a key gives back its task for the same request,
// and is refused for another source, body or count.
func TestForkIdempotency(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	a, _ := e.create(t, validRequest())
	b, _ := e.create(t, validRequest())
	req := ForkRequest{Timeout: 600, Count: 1, IdempotencyKey: "k"}
	first, err := e.m.Forks.Fork(ctx, a.ID, req)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.m.Forks.Fork(ctx, a.ID, req); err != nil || again.ID != first.ID {
		t.Errorf("same key and request: %+v, %v; want task %s", again, err, first.ID)
	}
	md := map[string]string{"x": "y"}
	for name, tc := range map[string]struct {
		src string
		req ForkRequest
	}{
		"other source": {b.ID, req},
		"other body":   {a.ID, ForkRequest{Timeout: 600, Count: 1, IdempotencyKey: "k", Overrides: &ForkOverrides{Metadata: &md}}},
		"other count":  {a.ID, ForkRequest{Timeout: 600, Count: 2, IdempotencyKey: "k"}},
	} {
		_, err := e.m.Forks.Fork(ctx, tc.src, tc.req)
		if e, ok := AsError(err); !ok || e.Code != CodeForkIdempotency {
			t.Errorf("%s: %v, want %s", name, err, CodeForkIdempotency)
		}
	}
	waitForkState(t, e.m.Forks, first.ID)
}

// TestForkFailureCleansUp: a target that cannot be made fails the task
// with upstream's reason and fixed message, and removes what the task made
// (its other targets and its snapshot), never the source.
func TestForkFailureCleansUp(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, _ := e.create(t, validRequest())
	// The second target's create fails.
	var mu sync.Mutex
	calls := 0
	create := e.m.Forks.create
	e.m.Forks.create = func(ctx context.Context, req CreateRequest) (*Sandbox, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 2 {
			return nil, errf(KindInternal, CodeStartFailed, "boom")
		}
		return create(ctx, req)
	}
	op, err := e.m.Forks.Fork(ctx, sb.ID, ForkRequest{Timeout: 600, Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := e.store.Fork(op.ID)
	got := waitForkState(t, e.m.Forks, op.ID)
	if got.Status.State != ForkFailed || got.Status.Reason != CodeForkProvisioningFailed || got.Status.Message != forkFailedMessage || len(got.SandboxIDs) != 0 {
		t.Errorf("failed fork %+v", got)
	}
	for _, id := range rec.TargetIDs {
		if _, err := e.m.Sandboxes.Get(ctx, id); err == nil {
			t.Errorf("target %s is left after the failure", id)
		}
	}
	if _, err := e.m.Snapshots.GetSnapshot(rec.SnapshotID); err == nil {
		t.Errorf("snapshot %s is left after the failure", rec.SnapshotID)
	}
	if _, err := e.m.Sandboxes.Get(ctx, sb.ID); err != nil {
		t.Errorf("the source is gone: %v", err)
	}
	if r, _ := e.store.Fork(op.ID); r.Target != nil {
		t.Errorf("a settled task keeps its create request (with the request's env): %+v", r.Target)
	}
}

// TestForkResume: a task that a restart left in Provisioning, one target
// made, is resumed by Resume: the made target is kept, the other made
// once, and the task succeeds.
func TestForkResume(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	src, _ := e.create(t, validRequest())
	snapID := newID()
	if err := e.m.Snapshots.take(ctx, src.ID, snapID); err != nil {
		t.Fatal(err)
	}
	timeout := 600
	target := CreateRequest{Timeout: &timeout, Metadata: map[string]string{"k": "v"}}
	made := target
	made.SnapshotID, made.id = snapID, newID()
	if _, err := e.m.Sandboxes.Create(ctx, made); err != nil {
		t.Fatal(err)
	}
	now := wireTime(e.clock.Now())
	rec := &ForkRecord{
		ID: newID(), SourceID: src.ID, State: ForkProvisioning, SnapshotID: snapID,
		TargetIDs: []string{made.id, newID()}, Running: []string{made.id},
		CreatedAt: now, UpdatedAt: now, Target: &target,
	}
	if err := e.store.PutFork(rec); err != nil {
		t.Fatal(err)
	}
	e.m.Forks.Resume()
	op := waitForkState(t, e.m.Forks, rec.ID)
	if op.Status.State != ForkSucceeded || len(op.SandboxIDs) != 2 || op.SandboxIDs[0] != made.id || op.SandboxIDs[1] != rec.TargetIDs[1] {
		t.Fatalf("resumed fork %+v, want Succeeded with %v", op, rec.TargetIDs)
	}
	for _, id := range rec.TargetIDs {
		sb, err := e.m.Sandboxes.Get(ctx, id)
		if err != nil || sb.Metadata["k"] != "v" || sb.SnapshotID != snapID {
			t.Errorf("target %s: %+v, %v", id, sb, err)
		}
	}
	if l, _, _ := e.m.Sandboxes.List(ctx, ListFilter{Page: 1, PageSize: 50}); len(l) != 3 {
		t.Errorf("%d sandboxes, want the source and two targets", len(l))
	}
}

// TestForkRetention: a settled task is forgotten (its idempotency key with
// it) once it is older than forkRetention, when the next fork is admitted;
// a younger one, and one whose clean-up is pending, are kept.
func TestForkRetention(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, _ := e.create(t, validRequest())
	req := ForkRequest{Timeout: 600, Count: 1, IdempotencyKey: "k"}
	old, err := e.m.Forks.Fork(ctx, sb.ID, req)
	if err != nil {
		t.Fatal(err)
	}
	waitForkState(t, e.m.Forks, old.ID)
	now := wireTime(e.clock.Now())
	pending := &ForkRecord{ID: newID(), SourceID: sb.ID, State: ForkFailed, CleanupPending: true, CreatedAt: now, UpdatedAt: now}
	if err := e.store.PutFork(pending); err != nil {
		t.Fatal(err)
	}
	e.m.Forks.runMu.Lock()
	e.m.Forks.running = map[string]bool{pending.ID: true} // no runner cleans it up here
	e.m.Forks.runMu.Unlock()

	e.clock.Advance(forkRetention - time.Minute)
	young, err := e.m.Forks.Fork(ctx, sb.ID, ForkRequest{Timeout: 600, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitForkState(t, e.m.Forks, young.ID)
	if _, err := e.m.Forks.GetFork(old.ID); err != nil {
		t.Fatalf("a task younger than the retention: %v", err)
	}

	e.clock.Advance(2 * time.Minute)
	again, err := e.m.Forks.Fork(ctx, sb.ID, req)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID == old.ID {
		t.Errorf("the key of a forgotten task gave back the task")
	}
	waitForkState(t, e.m.Forks, again.ID)
	_, err = e.m.Forks.GetFork(old.ID)
	wantCode(t, err, KindNotFound, CodeForkNotFound)
	if _, err := e.m.Forks.GetFork(young.ID); err != nil {
		t.Errorf("a task younger than the retention: %v", err)
	}
	if _, err := e.store.Fork(pending.ID); err != nil {
		t.Errorf("a task with its clean-up pending: %v", err)
	}
}

// TestForkKeepsExtensions: a fork's sandboxes are made with the source's
// create extensions, so a hardened source gives hardened forks.
func TestForkKeepsExtensions(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	req := validRequest()
	req.Extensions = map[string]string{ExtReadOnlyRootfs: "true", ExtRenewOnAccess: "600"}
	src, _ := e.create(t, req)
	op, err := e.m.Forks.Fork(ctx, src.ID, ForkRequest{Timeout: 600, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if op = waitForkState(t, e.m.Forks, op.ID); op.Status.State != ForkSucceeded {
		t.Fatalf("fork settled %+v", op)
	}
	rec, err := e.store.Sandbox(op.SandboxIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if !rec.ReadOnlyRootfs || rec.RenewOnAccess != 600 || !maps.Equal(rec.Extensions, req.Extensions) {
		t.Errorf("the fork's record: read-only %v, renew %d, extensions %v; want the source's %v", rec.ReadOnlyRootfs, rec.RenewOnAccess, rec.Extensions, req.Extensions)
	}
	if spec := e.rt.Spec(t, rec.ContainerID); !spec.ReadOnlyRoot {
		t.Errorf("the fork's container is not read-only: %+v", spec)
	}
}
