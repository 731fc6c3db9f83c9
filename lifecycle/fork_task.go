package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// errStopping ends a task's runner while sandboxd stops: the task stays
// where it is and the next start resumes it.
var errStopping = errors.New("sandboxd is stopping")

// start runs task id in the background unless this process already does.
func (f *Forks) start(id string) {
	f.runMu.Lock()
	if f.running == nil {
		f.running = map[string]bool{}
	}
	if f.running[id] {
		f.runMu.Unlock()
		return
	}
	f.running[id] = true
	f.runMu.Unlock()
	go func() {
		defer func() {
			f.runMu.Lock()
			delete(f.running, id)
			f.runMu.Unlock()
		}()
		f.run(id)
	}()
}

// Resume runs the tasks a previous sandboxd left unsettled, or whose
// clean-up is pending. Reconcile has settled their snapshots and removed
// their half-made targets by then.
func (f *Forks) Resume() {
	if f.rt.Features().Images == nil {
		return // no fork can have been started
	}
	tasks, err := f.store.Forks()
	if err != nil {
		f.log.Error("read fork tasks", "err", err)
		return
	}
	for _, t := range tasks {
		if !t.settled() || t.CleanupPending {
			f.log.Info("resuming fork", "fork_id", t.ID, "state", t.State)
			f.start(t.ID)
		}
	}
}

// run takes a task through its states, one step at a time; each step is
// work that Shutdown waits for, and none starts once sandboxd stops.
func (f *Forks) run(id string) {
	rec, err := f.store.Fork(id)
	if err != nil {
		f.log.Error("read fork task", "fork_id", id, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), rec.CreatedAt.Add(forkDeadline).Sub(f.now()))
	defer cancel()
	log := f.log.With("fork_id", id, "sandbox_id", rec.SourceID)
	for {
		rec, err = f.store.Fork(id)
		if err != nil {
			log.Error("read fork task", "err", err)
			return
		}
		if rec.settled() && !rec.CleanupPending {
			return
		}
		err := f.step(ctx, rec)
		if errors.Is(err, errStopping) {
			log.Info("fork interrupted by shutdown; the next start resumes it", "state", rec.State)
			return
		}
		if err != nil && rec.State == ForkFailed {
			log.Error("fork clean-up failed; the next start retries it", "err", err)
			return
		}
		if err != nil && f.fail(ctx, rec, err) != nil {
			return
		}
	}
}

// step moves a task one state on.
func (f *Forks) step(ctx context.Context, rec *ForkRecord) error {
	done, err := f.life.begin()
	if err != nil {
		return errStopping
	}
	defer done()
	if rec.State != ForkFailed && ctx.Err() != nil {
		return ctx.Err()
	}
	switch rec.State {
	case ForkPending:
		return f.update(rec.ID, func(r *ForkRecord) { r.State = ForkSnapshotting })
	case ForkSnapshotting:
		if err := f.snapshot(ctx, rec); err != nil {
			return err
		}
		return f.update(rec.ID, func(r *ForkRecord) { r.State = ForkProvisioning })
	case ForkProvisioning:
		if err := f.provision(ctx, rec); err != nil {
			return err
		}
		f.log.Info("fork succeeded", "fork_id", rec.ID, "sandbox_id", rec.SourceID, "targets", rec.TargetIDs, "duration_ms", f.now().Sub(rec.CreatedAt).Milliseconds())
		return f.update(rec.ID, func(r *ForkRecord) { r.State, r.Target = ForkSucceeded, nil })
	case ForkFailed:
		return f.cleanup(context.WithoutCancel(ctx), rec)
	}
	return nil
}

// snapshot makes the task's snapshot, or finds the one made before a
// restart (Reconcile has settled it); one that a restart cut short is
// taken again.
func (f *Forks) snapshot(ctx context.Context, rec *ForkRecord) error {
	s, err := f.store.Snapshot(rec.SnapshotID)
	retake := false
	switch {
	case errors.Is(err, errNoRecord):
	case err != nil:
		return err
	case s.State == snapshotReady:
		return nil
	case s.State == snapshotFailed && s.Reason == "snapshot_recovery_failed":
		if err := f.dropSnapshot(ctx, s.ID); err != nil && !isGone(err) {
			return forkStepError{CodeForkSnapshotFailed, err}
		}
		retake = true
	default:
		return forkStepError{CodeForkSnapshotFailed, errors.New("snapshot " + s.ID + " is " + s.State + ": " + s.Message)}
	}
	for tries := 1; ; tries++ {
		err := f.take(ctx, rec.SourceID, rec.SnapshotID)
		// The engine may still be finishing the commit the restart cut
		// short, the source paused meanwhile: wait for it a while.
		if e, ok := AsError(err); ok && retake && e.Code == CodeSnapshotSourceState && tries < retakeTries {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(retakeEvery):
				continue
			}
		}
		if err != nil {
			return forkStepError{CodeForkSnapshotFailed, err}
		}
		return nil
	}
}

// How long a retaken snapshot waits for its source to be Running again.
const (
	retakeEvery = 500 * time.Millisecond
	retakeTries = 240
)

// provision makes the targets not made yet, forkParallel at a time, and
// records each as it runs. A target made before a restart is kept.
func (f *Forks) provision(ctx context.Context, rec *ForkRecord) error {
	if rec.Target == nil {
		return errors.New("the task's create request is gone")
	}
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, forkParallel)
		errMu sync.Mutex
		first error
	)
	for _, id := range rec.TargetIDs {
		if slices.Contains(rec.Running, id) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			req := *rec.Target
			req.SnapshotID, req.id = rec.SnapshotID, id
			_, err := f.create(ctx, req)
			if err == nil {
				err = f.update(rec.ID, func(r *ForkRecord) {
					r.Running = append(r.Running, id)
					slices.SortFunc(r.Running, func(a, b string) int {
						return slices.Index(r.TargetIDs, a) - slices.Index(r.TargetIDs, b)
					})
				})
			}
			if err != nil {
				errMu.Lock()
				first = errors.Join(first, err)
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return forkStepError{CodeForkProvisioningFailed, first}
	}
	return nil
}

// forkStepError is a step's failure with the reason it gives the task.
type forkStepError struct {
	code string
	err  error
}

func (e forkStepError) Error() string { return e.err.Error() }
func (e forkStepError) Unwrap() error { return e.err }

// fail settles a task as Failed, its clean-up pending.
func (f *Forks) fail(ctx context.Context, rec *ForkRecord, err error) error {
	reason, msg := CodeForkInternal, forkFailedMessage
	var se forkStepError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		reason, msg = CodeForkTimeout, forkTimeoutMessage
	case errors.As(err, &se):
		reason = se.code
	}
	f.log.Error("fork failed", "fork_id", rec.ID, "sandbox_id", rec.SourceID, "state", rec.State, "reason", reason, "err", err)
	uerr := f.update(rec.ID, func(r *ForkRecord) {
		r.State, r.Reason, r.Message, r.CleanupPending, r.Target = ForkFailed, reason, msg, true, nil
	})
	if uerr != nil {
		f.log.Error("record fork failure", "fork_id", rec.ID, "err", uerr)
	}
	return uerr
}

// cleanup removes what a failed task made: its targets, then its snapshot
// (never the source).
func (f *Forks) cleanup(ctx context.Context, rec *ForkRecord) error {
	var errs []error
	for _, id := range rec.TargetIDs {
		if err := f.remove(ctx, id); err != nil && !isGone(err) {
			errs = append(errs, err)
		}
	}
	if err := f.dropSnapshot(ctx, rec.SnapshotID); err != nil && !isGone(err) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	f.log.Info("fork cleaned up", "fork_id", rec.ID)
	return f.update(rec.ID, func(r *ForkRecord) { r.CleanupPending, r.Running = false, nil })
}

// isGone reports a lifecycle 404 or the runtime's.
func isGone(err error) bool {
	if e, ok := AsError(err); ok {
		return e.Kind == KindNotFound
	}
	return errors.Is(err, runtime.ErrNotFound)
}

// update changes a task's record and its update time.
func (f *Forks) update(id string, fn func(*ForkRecord)) error {
	_, err := f.store.UpdateFork(id, func(r *ForkRecord) error {
		fn(r)
		r.UpdatedAt = wireTime(f.now())
		return nil
	})
	return err
}
