package lifecycle

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// Snapshot states.
const (
	snapshotCreating = "Creating"
	snapshotReady    = "Ready"
	snapshotFailed   = "Failed"
)

// Snapshots is the service of snapshots: their records and the commits
// that make them.
type Snapshots struct {
	*deps
	sandboxes *Sandboxes // the sandboxes snapshotted
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
func (m *Snapshots) CreateSnapshot(ctx context.Context, sandboxID, name string) (*Snapshot, error) {
	images, ok := m.rt.(runtime.Images)
	if !ok {
		return nil, errf(KindNotImplemented, CodeSnapshotNotImpl, "snapshots are not supported when runtime.type='%s'", m.rt.Name())
	}
	done, err := m.life.begin()
	if err != nil {
		return nil, err
	}
	snap, cid, err := m.recordSnapshot(ctx, sandboxID, name)
	if err != nil {
		done()
		return nil, err
	}
	go func() {
		defer done() // Shutdown waits for the commit
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		err := images.Commit(cctx, cid, snap.Image)
		m.settleSnapshot(snap.ID, err, "snapshot_runtime")
	}()
	m.log.InfoContext(ctx, "snapshot started", "sandbox_id", sandboxID, "snapshot_id", snap.ID)
	return snapshotView(snap), nil
}

// recordSnapshot records a snapshot of a running sandbox as being created;
// it returns the record and the sandbox's container.
func (m *Snapshots) recordSnapshot(ctx context.Context, sandboxID, name string) (*SnapshotRecord, string, error) {
	rec, c, err := m.sandboxes.ready(ctx, sandboxID)
	if err != nil {
		return nil, "", err
	}
	if c.State != runtime.StateRunning {
		return nil, "", errf(KindConflict, CodeSnapshotSourceState, "sandbox %s must be Running to snapshot (it is %s)", sandboxID, status(&c).State)
	}
	now := wireTime(m.now())
	snap := &SnapshotRecord{
		ID: newID(), SandboxID: sandboxID, Name: name, State: snapshotCreating,
		Reason: "snapshot_accepted", Message: "Snapshot is being created.",
		CreatedAt: now, UpdatedAt: now,
	}
	snap.Image = snapshotImage(snap.ID)
	if err := m.store.PutSnapshot(snap); err != nil {
		return nil, "", &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "record snapshot", Err: err}
	}
	return snap, rec.ContainerID, nil
}

// settleSnapshot records the outcome of a commit.
func (m *Snapshots) settleSnapshot(id string, err error, reasonPrefix string) {
	_, uerr := m.store.UpdateSnapshot(id, func(r *SnapshotRecord) error {
		r.UpdatedAt = wireTime(m.now())
		if err != nil {
			r.State, r.Reason, r.Message = snapshotFailed, reasonPrefix+"_failed", err.Error()
		} else {
			r.State, r.Reason, r.Message = snapshotReady, reasonPrefix+"_ready", "Snapshot is ready."
		}
		return nil
	})
	if uerr != nil {
		m.log.Error("record snapshot outcome", "snapshot_id", id, "err", uerr)
		return
	}
	m.log.Info("snapshot settled", "snapshot_id", id, "ok", err == nil, "err", err)
}

// reconcileSnapshots settles snapshots interrupted by a restart.
func (m *Snapshots) reconcileSnapshots(ctx context.Context) {
	images, ok := m.rt.(runtime.Images)
	if !ok {
		return // no snapshot can have been started
	}
	snaps, err := m.store.Snapshots()
	if err != nil {
		m.log.Error("read snapshots", "err", err)
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
			m.settleSnapshot(s.ID, nil, "snapshot_recovery")
		} else {
			m.settleSnapshot(s.ID, errors.New("sandboxd restarted before the snapshot image was written"), "snapshot_recovery")
		}
	}
}

// GetSnapshot returns one snapshot.
func (m *Snapshots) GetSnapshot(id string) (*Snapshot, error) {
	s, err := m.store.Snapshot(id)
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
func (m *Snapshots) ListSnapshots(f SnapshotFilter) ([]*Snapshot, Page, error) {
	snaps, err := m.store.Snapshots()
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

// paginate cuts one page out of items (pages start at 1).
func paginate[T any](items []T, page, size int) ([]T, Page, error) {
	p := Page{Page: page, PageSize: size, TotalItems: len(items)}
	p.TotalPages = (len(items) + size - 1) / size
	p.HasNextPage = page < p.TotalPages
	lo := min((page-1)*size, len(items))
	hi := min(lo+size, len(items))
	return items[lo:hi], p, nil
}

// DeleteSnapshot removes a snapshot and its image.
func (m *Snapshots) DeleteSnapshot(ctx context.Context, id string) error {
	s, err := m.store.Snapshot(id)
	if errors.Is(err, errNoRecord) {
		return errf(KindNotFound, CodeSnapshotNotFound, "snapshot %s not found", id)
	}
	if err != nil {
		return &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "read snapshot", Err: err}
	}
	if s.State == snapshotCreating {
		return errf(KindConflict, CodeSnapshotState, "snapshot %s is still being created", id)
	}
	images, _ := m.rt.(runtime.Images) // a snapshot exists: the runtime has images
	if err := images.RemoveImage(ctx, s.Image); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		if errors.Is(err, runtime.ErrConflict) {
			return errf(KindConflict, CodeSnapshotConflict, "snapshot %s is in use by a sandbox", id)
		}
		return m.engineError(err, "remove snapshot image")
	}
	if err := m.store.DeleteSnapshot(id); err != nil {
		return &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "delete snapshot record", Err: err}
	}
	return nil
}

// Logs returns the sandbox container's output.
func (m *Sandboxes) Logs(ctx context.Context, id string, tail int, since time.Time) (io.ReadCloser, error) {
	rec, _, err := m.ready(ctx, id)
	if err != nil {
		return nil, err
	}
	rc, err := m.rt.Logs(ctx, rec.ContainerID, tail, since)
	if err != nil {
		return nil, m.engineError(err, "read logs")
	}
	return rc, nil
}
