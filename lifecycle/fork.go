package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// Fork task states (OSEP-0024): Pending → Snapshotting → Provisioning →
// Succeeded | Failed.
const (
	ForkPending      = "Pending"
	ForkSnapshotting = "Snapshotting"
	ForkProvisioning = "Provisioning"
	ForkSucceeded    = "Succeeded"
	ForkFailed       = "Failed"
)

// Fork error codes (OSEP-0024), and sandboxd's cap on tasks.
const (
	CodeForkNotFound           = "FORK::NOT_FOUND"
	CodeForkInvalid            = "FORK::INVALID_REQUEST"
	CodeForkIdempotency        = "FORK::IDEMPOTENCY_CONFLICT"
	CodeForkSourceState        = "FORK::INVALID_SOURCE_STATE"
	CodeForkUnsupportedRuntime = "FORK::UNSUPPORTED_RUNTIME"
	CodeForkVolumes            = "FORK::VOLUMES_UNSUPPORTED"
	CodeForkTimeout            = "FORK::TIMEOUT"
	CodeForkSnapshotFailed     = "FORK::SNAPSHOT_FAILED"
	CodeForkProvisioningFailed = "FORK::PROVISIONING_FAILED"
	CodeForkInternal           = "FORK::INTERNAL_ERROR"
	CodeForkTooMany            = "FORK::TOO_MANY_TASKS"
)

// Limits on what one request may cost: a fork makes at most MaxForkCount
// sandboxes, at most MaxForkTasks tasks run at once (a further request is
// refused, not queued), each task creates at most forkParallel targets at
// a time, and gives up after forkDeadline (upstream's 30 minutes).
const (
	MaxForkCount = 10
	MaxForkTasks = 4

	forkParallel = 3
	forkDeadline = 30 * time.Minute
	// forkRetention is how long a settled task (and its idempotency key)
	// is kept after its last change; older ones are forgotten when the next
	// fork is admitted or sandboxd starts, so the store does not grow with
	// every fork ever made.
	forkRetention = 7 * 24 * time.Hour
	// MaxIdempotencyKey is the longest Idempotency-Key (upstream's).
	MaxIdempotencyKey = 256
)

// The fixed, secret-free messages of a failed task (upstream's); the
// cause is in the server's log.
const (
	forkFailedMessage  = "Fork failed during snapshot capture or target provisioning."
	forkTimeoutMessage = "Fork failed; inspect server logs for details."
)

// ForkOverrides replace, each as a whole, what a fork's targets would
// otherwise take from the source. A field left out is inherited, except
// env: a fork's env is only what its request sets (the source's
// create-time env, its secrets included, stays with the source). An empty
// metadata or resourceLimits clears the inherited one.
type ForkOverrides struct {
	Env              map[string]*string `json:"env,omitempty"`
	ResourceLimits   *map[string]string `json:"resourceLimits,omitempty"`
	ResourceRequests map[string]string  `json:"resourceRequests,omitempty"`
	NetworkPolicy    *NetworkPolicy     `json:"networkPolicy,omitempty"`
	Metadata         *map[string]string `json:"metadata,omitempty"`
	Entrypoint       []string           `json:"entrypoint,omitempty"`
}

// ForkRequest is POST /v1/sandboxes/{id}/fork (OSEP-0024's body) with
// sandboxd's count of targets and the Idempotency-Key header.
type ForkRequest struct {
	Timeout   int            `json:"timeout"`
	Overrides *ForkOverrides `json:"overrides,omitempty"`

	Count          int    `json:"-"` // targets, 1..MaxForkCount
	IdempotencyKey string `json:"-"`
}

// ForkStatus is a fork task's state.
type ForkStatus struct {
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ForkOperation is the API's view of a fork task (upstream's, plus
// sandboxd's count and sandboxIds: the targets asked for, and those
// running so far, in order).
type ForkOperation struct {
	ID              string     `json:"id"`
	SourceSandboxID string     `json:"sourceSandboxId"`
	Status          ForkStatus `json:"status"`
	SnapshotID      string     `json:"snapshotId,omitempty"`
	SandboxID       string     `json:"sandboxId,omitempty"`
	SandboxIDs      []string   `json:"sandboxIds,omitempty"`
	Count           int        `json:"count"`
	CreatedAt       time.Time  `json:"createdAt"`
	UpdatedAt       time.Time  `json:"updatedAt"`
	CleanupPending  bool       `json:"cleanupPending"`
}

func (r *ForkRecord) settled() bool { return r.State == ForkSucceeded || r.State == ForkFailed }

func forkView(r *ForkRecord) *ForkOperation {
	op := &ForkOperation{
		ID: r.ID, SourceSandboxID: r.SourceID, Count: len(r.TargetIDs),
		Status:    ForkStatus{State: r.State, Reason: r.Reason, Message: r.Message},
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, CleanupPending: r.CleanupPending,
		SandboxIDs: slices.Clone(r.Running),
	}
	if r.State != ForkPending && r.State != ForkFailed {
		op.SnapshotID = r.SnapshotID
	}
	if len(r.Running) > 0 && r.State != ForkFailed {
		op.SandboxID = r.Running[0]
	}
	if r.State == ForkFailed {
		op.SandboxIDs = nil
	}
	return op
}

// Forks is the service of fork tasks: a running sandbox's filesystem
// snapshotted (Snapshots) and sandboxes made from it (Sandboxes), while
// the source runs on. It reaches them through the function values New
// hands it.
type Forks struct {
	*deps
	// source returns a sandbox and its container (Sandboxes.ready).
	source func(ctx context.Context, id string) (*Record, runtime.Container, error)
	// validate checks a create request without making anything.
	validate func(ctx context.Context, req CreateRequest) error
	// create makes a sandbox and returns when it runs (Sandboxes.Create).
	create func(ctx context.Context, req CreateRequest) (*Sandbox, error)
	// remove deletes a sandbox (Sandboxes.Delete).
	remove func(ctx context.Context, id string) error
	// take snapshots a sandbox as the given snapshot id and returns once
	// it is Ready (Snapshots.take); dropSnapshot deletes one.
	take         func(ctx context.Context, sandboxID, snapshotID string) error
	dropSnapshot func(ctx context.Context, id string) error

	mu sync.Mutex // orders admission: idempotency and the cap

	runMu   sync.Mutex
	running map[string]bool // tasks with a runner in this process
}

// Fork admits a fork of a running sandbox and runs it in the background.
// It returns the task, which is an earlier one if the idempotency key was
// seen with the same request.
func (f *Forks) Fork(ctx context.Context, sourceID string, req ForkRequest) (*ForkOperation, error) {
	if f.rt.Features().Images == nil {
		return nil, errf(KindNotImplemented, CodeForkUnsupportedRuntime, "Snapshot capture is unavailable.")
	}
	if req.Count < 1 || req.Count > MaxForkCount {
		return nil, errf(KindInvalid, CodeForkInvalid, "count must be between 1 and %d", MaxForkCount)
	}
	if req.Timeout < 60 {
		return nil, &Error{Kind: KindUnprocessable, Code: CodeInvalidParameter, Message: "timeout must be at least 60 seconds", Field: []string{"body", "timeout"}}
	}
	digest, err := forkDigest(sourceID, req)
	if err != nil {
		return nil, err
	}
	done, err := f.life.begin()
	if err != nil {
		return nil, err
	}
	defer done()
	f.mu.Lock()
	defer f.mu.Unlock()
	tasks, err := f.tasks()
	if err != nil {
		return nil, &Error{Kind: KindInternal, Code: CodeForkInternal, Message: "read fork tasks", Err: err}
	}
	inFlight := 0
	for _, t := range tasks {
		if req.IdempotencyKey != "" && t.IdempotencyKey == req.IdempotencyKey {
			if t.Digest != digest {
				return nil, errf(KindConflict, CodeForkIdempotency, "Idempotency-Key was used for another fork request")
			}
			return forkView(t), nil
		}
		if !t.settled() {
			inFlight++
		}
	}
	if inFlight >= MaxForkTasks {
		return nil, errf(KindTooMany, CodeForkTooMany, "%d fork tasks are in progress, the most sandboxd runs at once; retry when one has settled", inFlight)
	}
	target, err := f.plan(ctx, sourceID, req)
	if err != nil {
		return nil, err
	}
	now := wireTime(f.now())
	rec := &ForkRecord{
		ID: newID(), SourceID: sourceID, State: ForkPending, SnapshotID: newID(),
		CreatedAt: now, UpdatedAt: now, IdempotencyKey: req.IdempotencyKey, Digest: digest, Target: target,
	}
	for range req.Count {
		rec.TargetIDs = append(rec.TargetIDs, newID())
	}
	if err := f.store.PutFork(rec); err != nil {
		return nil, &Error{Kind: KindInternal, Code: CodeForkInternal, Message: "record fork task", Err: err}
	}
	f.log.InfoContext(ctx, "fork accepted", "fork_id", rec.ID, "sandbox_id", sourceID, "count", req.Count)
	f.start(rec.ID)
	return forkView(rec), nil
}

// forkDigest identifies a request for its idempotency key: the source and
// the body as it was sent (fields left out stay out), and the count.
func forkDigest(sourceID string, req ForkRequest) (string, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return "", &Error{Kind: KindInternal, Code: CodeForkInternal, Message: "digest fork request", Err: err}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00", sourceID, req.Count)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// plan checks the source and returns its targets' create request: the
// request's overrides over what the source passes on (metadata, platform,
// CPU and memory limits, the egress policy in force, the create's
// extensions). The merged request must pass a create's validation.
func (f *Forks) plan(ctx context.Context, sourceID string, req ForkRequest) (*CreateRequest, error) {
	rec, c, err := f.source(ctx, sourceID)
	if e, ok := AsError(err); ok && e.Kind == KindConflict {
		return nil, errf(KindConflict, CodeForkSourceState, "sandbox %s must be Running to fork: %s", sourceID, e.Message)
	}
	if err != nil {
		return nil, err
	}
	if c.State != runtime.StateRunning {
		return nil, errf(KindConflict, CodeForkSourceState, "sandbox %s must be Running to fork (it is %s)", sourceID, status(&c).State)
	}
	if len(c.Mounts) > 0 {
		return nil, errf(KindConflict, CodeForkVolumes, "sandbox %s has volumes mounted at %v; a fork copies the root filesystem only", sourceID, c.Mounts)
	}
	o := req.Overrides
	if o == nil {
		o = &ForkOverrides{}
	}
	timeout := req.Timeout
	t := &CreateRequest{
		Timeout: &timeout, Env: o.Env, ResourceRequests: o.ResourceRequests,
		Entrypoint: o.Entrypoint, Platform: rec.Platform, Metadata: maps.Clone(rec.Metadata),
		ResourceLimits: inheritedLimits(c.Limits), NetworkPolicy: o.NetworkPolicy,
		Extensions: maps.Clone(rec.Extensions),
	}
	if o.ResourceLimits != nil {
		t.ResourceLimits = *o.ResourceLimits
	}
	if o.Metadata != nil {
		t.Metadata = *o.Metadata
	}
	if o.NetworkPolicy == nil && rec.NetworkPolicy != nil {
		buf, err := json.Marshal(rec.NetworkPolicy)
		if err == nil {
			err = json.Unmarshal(buf, &t.NetworkPolicy)
		}
		if err != nil {
			return nil, &Error{Kind: KindInternal, Code: CodeForkInternal, Message: "read the source's egress policy", Err: err}
		}
	}
	// Checked as a create from the source's image: the snapshot does not
	// exist yet.
	check := *t
	check.Image = &ImageSpec{URI: c.Image}
	if len(check.Entrypoint) == 0 {
		check.Entrypoint = slices.Clone(restoreEntrypoint)
	}
	if err := f.validate(ctx, check); err != nil {
		if e, ok := AsError(err); ok && (e.Kind == KindUnavailable || e.Kind == KindInternal) {
			return nil, err
		}
		msg := err.Error()
		if e, ok := AsError(err); ok {
			msg = e.Message
		}
		return nil, errf(KindInvalid, CodeForkInvalid, "the fork's sandbox would be refused: %s", msg)
	}
	return t, nil
}

// inheritedLimits are a source's CPU and memory limits as a create states
// them (nil where the engine reports none: the server's defaults apply).
func inheritedLimits(l runtime.Resources) map[string]string {
	out := map[string]string{}
	if l.NanoCPUs > 0 {
		out["cpu"] = strconv.FormatInt(l.NanoCPUs/1e6, 10) + "m"
	}
	if l.MemoryBytes > 0 {
		out["memory"] = strconv.FormatInt(l.MemoryBytes, 10)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// GetFork returns a fork task.
func (f *Forks) GetFork(id string) (*ForkOperation, error) {
	r, err := f.store.Fork(id)
	if errors.Is(err, errNoRecord) {
		return nil, errf(KindNotFound, CodeForkNotFound, "Fork operation not found.")
	}
	if err != nil {
		return nil, &Error{Kind: KindInternal, Code: CodeForkInternal, Message: "read fork task", Err: err}
	}
	return forkView(r), nil
}

// ForkFilter selects fork tasks in ListForks.
type ForkFilter struct {
	SandboxID string // the source or a target; "" for all
	Page      int
	PageSize  int
}

// ListForks lists fork tasks newest first.
func (f *Forks) ListForks(filter ForkFilter) ([]*ForkOperation, Page, error) {
	tasks, err := f.store.Forks()
	if err != nil {
		return nil, Page{}, &Error{Kind: KindInternal, Code: CodeForkInternal, Message: "read fork tasks", Err: err}
	}
	var out []*ForkOperation
	for _, t := range tasks {
		if id := filter.SandboxID; id == "" || t.SourceID == id || slices.Contains(t.TargetIDs, id) {
			out = append(out, forkView(t))
		}
	}
	slices.SortFunc(out, func(a, b *ForkOperation) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return paginate(out, filter.Page, filter.PageSize)
}

// tasks reads every fork task, forgetting settled ones older than
// forkRetention.
func (f *Forks) tasks() ([]*ForkRecord, error) {
	all, err := f.store.Forks()
	if err != nil {
		return nil, err
	}
	kept := all[:0]
	for _, t := range all {
		if t.settled() && !t.CleanupPending && f.now().Sub(t.UpdatedAt) > forkRetention {
			if err := f.store.DeleteFork(t.ID); err != nil {
				return nil, err
			}
			f.log.Debug("forgot a settled fork task", "fork_id", t.ID, "state", t.State)
			continue
		}
		kept = append(kept, t)
	}
	return kept, nil
}

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
	tasks, err := f.tasks()
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
