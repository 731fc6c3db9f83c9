package lifecycle

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// Snapshots is the service of snapshots: their records and the commits
// that make them.
type Snapshots struct {
	*deps
	// ready returns a sandbox whose container exists (Sandboxes).
	ready func(ctx context.Context, id string) (*Record, runtime.Container, error)
}

// snapshotImage is the image a snapshot is committed to (upstream's name).
func snapshotImage(id string) string { return "opensandbox-snapshots:" + id }

func snapshotView(r *SnapshotRecord) *Snapshot {
	return &Snapshot{
		ID: r.ID, SandboxID: r.SandboxID, Name: r.Name, CreatedAt: r.CreatedAt,
		Status: Status{State: r.State, Reason: r.Reason, Message: r.Message, LastTransitionAt: r.UpdatedAt},
	}
}

// CreateSnapshot commits a running sandbox's filesystem in the background.
func (sn *Snapshots) CreateSnapshot(ctx context.Context, sandboxID, name string) (*Snapshot, error) {
	images := sn.rt.Features().Images
	if images == nil {
		return nil, errf(KindNotImplemented, CodeSnapshotNotImpl, "snapshots are not supported when runtime.type='%s'", sn.rt.Name())
	}
	done, err := sn.life.begin()
	if err != nil {
		return nil, err
	}
	snap, cid, err := sn.recordSnapshot(ctx, sandboxID, newID(), name)
	if err != nil {
		done()
		return nil, err
	}
	go func() {
		defer done() // Shutdown waits for the commit
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		sn.commit(cctx, images, snap, cid)
	}()
	sn.log.InfoContext(ctx, "snapshot started", "sandbox_id", sandboxID, "snapshot_id", snap.ID)
	return snapshotView(snap), nil
}

// take snapshots a running sandbox as snapshot id and returns once the
// snapshot is Ready, or with why it is not (a fork's first step).
func (sn *Snapshots) take(ctx context.Context, sandboxID, id string) error {
	images := sn.rt.Features().Images
	if images == nil {
		return errf(KindNotImplemented, CodeSnapshotNotImpl, "snapshots are not supported when runtime.type='%s'", sn.rt.Name())
	}
	snap, cid, err := sn.recordSnapshot(ctx, sandboxID, id, "")
	if err != nil {
		return err
	}
	return sn.commit(ctx, images, snap, cid)
}

// commit writes a recorded snapshot's image and settles its record.
func (sn *Snapshots) commit(ctx context.Context, images runtime.Images, snap *SnapshotRecord, cid string) error {
	err := images.Commit(ctx, cid, snap.Image)
	sn.settleSnapshot(snap.ID, err, "snapshot_runtime")
	return err
}

// recordSnapshot records snapshot id of a running sandbox as being
// created; it returns the record and the sandbox's container.
func (sn *Snapshots) recordSnapshot(ctx context.Context, sandboxID, id, name string) (*SnapshotRecord, string, error) {
	rec, c, err := sn.ready(ctx, sandboxID)
	if err != nil {
		return nil, "", err
	}
	if c.State != runtime.StateRunning {
		return nil, "", errf(KindConflict, CodeSnapshotSourceState, "sandbox %s must be Running to snapshot (it is %s)", sandboxID, status(&c).State)
	}
	now := wireTime(sn.now())
	snap := &SnapshotRecord{
		ID: id, SandboxID: sandboxID, Name: name, State: snapshotCreating,
		Reason: "snapshot_accepted", Message: "Snapshot is being created.",
		CreatedAt: now, UpdatedAt: now,
	}
	snap.Image = snapshotImage(snap.ID)
	if err := sn.store.PutSnapshot(snap); err != nil {
		return nil, "", &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "record snapshot", Err: err}
	}
	return snap, rec.ContainerID, nil
}

// settleSnapshot records the outcome of a commit.
func (sn *Snapshots) settleSnapshot(id string, err error, reasonPrefix string) {
	_, uerr := sn.store.UpdateSnapshot(id, func(r *SnapshotRecord) error {
		r.UpdatedAt = wireTime(sn.now())
		if err != nil {
			r.State, r.Reason, r.Message = snapshotFailed, reasonPrefix+"_failed", err.Error()
		} else {
			r.State, r.Reason, r.Message = snapshotReady, reasonPrefix+"_ready", "Snapshot is ready."
		}
		return nil
	})
	if uerr != nil {
		sn.log.Error("record snapshot outcome", "snapshot_id", id, "err", uerr)
		return
	}
	sn.log.Info("snapshot settled", "snapshot_id", id, "ok", err == nil, "err", err)
}

// Reconcile settles snapshots interrupted by a restart.
func (sn *Snapshots) Reconcile(ctx context.Context) {
	images := sn.rt.Features().Images
	if images == nil {
		return // no snapshot can have been started
	}
	snaps, err := sn.store.Snapshots()
	if err != nil {
		sn.log.Error("read snapshots", "err", err)
		return
	}
	for _, s := range snaps {
		if s.State != snapshotCreating {
			continue
		}
		ok, err := images.ImageExists(ctx, s.Image)
		if err != nil {
			continue
		}
		if ok {
			sn.settleSnapshot(s.ID, nil, "snapshot_recovery")
		} else {
			sn.settleSnapshot(s.ID, errors.New("sandboxd restarted before the snapshot image was written"), "snapshot_recovery")
		}
	}
}

// GetSnapshot returns one snapshot.
func (sn *Snapshots) GetSnapshot(id string) (*Snapshot, error) {
	s, err := sn.store.Snapshot(id)
	if errors.Is(err, errNoRecord) {
		return nil, errf(KindNotFound, CodeSnapshotNotFound, "snapshot %s not found", id)
	}
	if err != nil {
		return nil, &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "read snapshot", Err: err}
	}
	return snapshotView(s), nil
}

// SnapshotFilter selects snapshots in ListSnapshots.
type SnapshotFilter struct {
	SandboxID string
	States    []string
	Page      int
	PageSize  int
}

// ListSnapshots lists snapshots newest first.
func (sn *Snapshots) ListSnapshots(f SnapshotFilter) ([]*Snapshot, Page, error) {
	snaps, err := sn.store.Snapshots()
	if err != nil {
		return nil, Page{}, &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "read snapshots", Err: err}
	}
	var items []*Snapshot
	for _, s := range snaps {
		if f.SandboxID != "" && s.SandboxID != f.SandboxID {
			continue
		}
		if len(f.States) > 0 && !slices.ContainsFunc(f.States, func(st string) bool { return strings.EqualFold(st, s.State) }) {
			continue
		}
		items = append(items, snapshotView(s))
	}
	slices.SortFunc(items, func(a, b *Snapshot) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return paginate(items, f.Page, f.PageSize)
}

// DeleteSnapshot removes a snapshot and its image.
func (sn *Snapshots) DeleteSnapshot(ctx context.Context, id string) error {
	s, err := sn.store.Snapshot(id)
	if errors.Is(err, errNoRecord) {
		return errf(KindNotFound, CodeSnapshotNotFound, "snapshot %s not found", id)
	}
	if err != nil {
		return &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "read snapshot", Err: err}
	}
	if s.State == snapshotCreating {
		return errf(KindConflict, CodeSnapshotState, "snapshot %s is still being created", id)
	}
	images := sn.rt.Features().Images // a snapshot exists: the runtime has images
	if err := images.RemoveImage(ctx, s.Image); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		if errors.Is(err, runtime.ErrConflict) {
			return errf(KindConflict, CodeSnapshotConflict, "snapshot %s is in use by a sandbox", id)
		}
		return sn.engineError(err, "remove snapshot image")
	}
	if err := sn.store.DeleteSnapshot(id); err != nil {
		return &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "delete snapshot record", Err: err}
	}
	return nil
}
