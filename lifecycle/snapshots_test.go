package lifecycle

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

func TestSnapshotSourceState(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, cid := e.create(t, validRequest())
	e.rt.Set(t, cid, func(c *runtime.Container) { c.State = runtime.StatePaused })
	_, err := e.m.Snapshots.CreateSnapshot(ctx, sb.ID, "n")
	wantCode(t, err, KindConflict, CodeSnapshotSourceState)
	_, err = e.m.Snapshots.CreateSnapshot(ctx, "nope", "n")
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)
}

func TestSnapshotRecords(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	t0 := e.clock.Now()
	for i, s := range []SnapshotRecord{
		{ID: "old", SandboxID: "a", State: snapshotReady, Image: "i1"},
		{ID: "mid", SandboxID: "b", State: snapshotFailed, Image: "i2"},
		{ID: "new", SandboxID: "a", State: snapshotCreating, Image: "i3"},
	} {
		s.CreatedAt = t0.Add(time.Duration(i) * time.Second)
		if err := e.store.PutSnapshot(&s); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		f    SnapshotFilter
		want []string
	}{
		{"all newest first", SnapshotFilter{Page: 1, PageSize: 20}, []string{"new", "mid", "old"}},
		{"by sandbox", SnapshotFilter{SandboxID: "a", Page: 1, PageSize: 20}, []string{"new", "old"}},
		{"by state, case-insensitive", SnapshotFilter{States: []string{"ready", "FAILED"}, Page: 1, PageSize: 20}, []string{"mid", "old"}},
		{"paged", SnapshotFilter{Page: 2, PageSize: 2}, []string{"old"}},
	}
	for _, tt := range tests {
		items, _, err := e.m.Snapshots.ListSnapshots(tt.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range items {
			got = append(got, s.ID)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: ids = %v, want %v", tt.name, got, tt.want)
		}
	}
	if s, err := e.m.Snapshots.GetSnapshot("old"); err != nil || s.SandboxID != "a" || s.Status.State != snapshotReady {
		t.Errorf("GetSnapshot = %+v, %v", s, err)
	}
	_, err := e.m.Snapshots.GetSnapshot("nope")
	wantCode(t, err, KindNotFound, CodeSnapshotNotFound)
	wantCode(t, e.m.Snapshots.DeleteSnapshot(ctx, "new"), KindConflict, CodeSnapshotState)
	wantCode(t, e.m.Snapshots.DeleteSnapshot(ctx, "nope"), KindNotFound, CodeSnapshotNotFound)
	if err := e.m.Snapshots.DeleteSnapshot(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Snapshots.GetSnapshot("old")
	wantCode(t, err, KindNotFound, CodeSnapshotNotFound)
}
