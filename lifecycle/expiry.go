package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// Expiry rules (README "Expiry, idle timeout and renewal" has the user's
// version). A sandbox has at most one deadline, reported as expiresAt.
// Let X be its expiry (createdAt+timeout, moved by renew-expiration; none
// for manual cleanup) and A its last activity (creation counts).
//
//   - With access.renew.extend.seconds = E (upstream's renew on access):
//     deadline = max(X, A+E), or A+E without X. E is the sandbox's own
//     idle timeout and replaces the server's. E is cut to
//     max_sandbox_timeout_seconds, which bounds renew-expiration from now
//     the same way.
//   - Otherwise with [lifecycle] idle_timeout = I (recorded at create):
//     deadline = min(X, A+I); X caps everything.
//   - Otherwise deadline = X, upstream's fixed TTL.
//
// Activity is a request through the sandbox's proxy route, a resume, a
// renewal, and work (commands, sessions, terminals) found running when a
// deadline that activity can move is reached. Nothing sandboxd does on its
// own counts: GET, list, endpoints, metrics, health checks, reconciling.

// Expiry is the service of deadlines: it keeps the activity not yet
// persisted, and reaps sandboxes past their deadline.
type Expiry struct {
	*deps
	// remove removes a reaped sandbox; creating reports whether a
	// sandbox is being created (Sandboxes).
	remove   func(ctx context.Context, rec *Record, cid string) error
	creating func(id string) bool
	// afterSweep runs at the end of each sweep (the egress daemons'
	// check, egress.go).
	afterSweep func(ctx context.Context)
	// idleSleep puts idle sandboxes to sleep after the reaping;
	// sleepAtExpiry may take an expired sandbox to put it to sleep
	// instead (Sleep).
	idleSleep     func(ctx context.Context, recs []*Record)
	sleepAtExpiry func(ctx context.Context, rec *Record, e expiry) bool

	mu       sync.Mutex
	activity map[string]time.Time // last activity by sandbox id, until a sweep after it is persisted
	stored   map[string]time.Time // what the last flush persisted of activity
}

// forget drops a removed sandbox's activity.
func (x *Expiry) forget(id string) {
	x.mu.Lock()
	delete(x.activity, id)
	delete(x.stored, id)
	x.mu.Unlock()
}

// expiry is a sandbox's current deadline.
type expiry struct {
	at     time.Time
	idle   bool // at is A+E or A+I rather than X
	renews bool // activity moves at, so running work postpones it
}

// expiry returns a sandbox's deadline; false if it never expires.
func (x *Expiry) expiry(rec *Record) (expiry, bool) {
	last := x.lastActivity(rec)
	switch {
	case rec.RenewOnAccess > 0:
		extend := time.Duration(rec.RenewOnAccess) * time.Second
		if max := time.Duration(x.cfg.Server.MaxSandboxTimeoutSeconds) * time.Second; max > 0 && extend > max {
			extend = max
		}
		if at := last.Add(extend); rec.ExpiresAt == nil || at.After(*rec.ExpiresAt) {
			return expiry{at: at, idle: true, renews: true}, true
		}
		return expiry{at: *rec.ExpiresAt, renews: true}, true
	case rec.IdleTimeout > 0:
		if at := last.Add(time.Duration(rec.IdleTimeout) * time.Second); rec.ExpiresAt == nil || at.Before(*rec.ExpiresAt) {
			return expiry{at: at, idle: true, renews: true}, true
		}
	case rec.ExpiresAt == nil:
		return expiry{}, false
	}
	return expiry{at: *rec.ExpiresAt}, true
}

// deadline is what expiresAt reports: nil if the sandbox never expires.
func (x *Expiry) deadline(rec *Record) *time.Time {
	e, ok := x.expiry(rec)
	if !ok {
		return nil
	}
	return &e.at
}

// lastActivity is the newest of the persisted and in-memory activity times.
func (x *Expiry) lastActivity(rec *Record) time.Time {
	x.mu.Lock()
	t, ok := x.activity[rec.ID]
	x.mu.Unlock()
	if ok && t.After(rec.LastActivity) {
		return t
	}
	return rec.LastActivity
}

// LastActivity reports when a sandbox was last used: the time its idle
// deadlines count from.
func (x *Expiry) LastActivity(id string) (time.Time, error) {
	rec, err := x.record(id)
	if err != nil {
		return time.Time{}, err
	}
	return x.lastActivity(rec), nil
}

// Touch records activity on a sandbox (cheap: persisted by the reaper).
func (x *Expiry) Touch(id string) {
	now := x.now()
	x.mu.Lock()
	x.activity[id] = now
	x.mu.Unlock()
}

// persistActivity writes in-memory activity times to the store, so
// deadlines survive a restart to within one reaper period. An entry leaves
// memory a flush after it was stored, if untouched since: a reader that
// took its record just before the store still finds the newer time here
// (lastActivity reads the record first, then memory), so expiresAt never
// moves back.
func (x *Expiry) persistActivity() {
	x.mu.Lock()
	for id, t := range x.stored {
		if x.activity[id].Equal(t) {
			delete(x.activity, id)
		}
	}
	if x.stored == nil {
		x.stored = map[string]time.Time{}
	}
	clear(x.stored)
	pending := maps.Clone(x.activity)
	x.mu.Unlock()
	for id, t := range pending {
		_, err := x.store.UpdateSandbox(id, func(r *Record) error {
			if t.After(r.LastActivity) {
				r.LastActivity = t
			}
			return nil
		})
		if err != nil && !errors.Is(err, errNoRecord) {
			x.log.Warn("persist activity", "sandbox_id", id, "err", err)
			continue // kept in memory, retried next sweep
		}
		x.mu.Lock()
		x.stored[id] = t
		x.mu.Unlock()
	}
}

// busy asks the sandbox's agent whether commands, sessions or terminals
// are still running. It does not count as activity.
func (x *Expiry) busy(ctx context.Context, rec *Record) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// A paused or stopped sandbox runs nothing; asking its agent would
	// only wait for the timeout.
	if c, err := x.rt.Inspect(ctx, rec.ContainerID); err != nil || c.State != runtime.StateRunning {
		return false
	}
	rt, err := x.rt.Agent(ctx, rec.ContainerID)
	if err != nil {
		return false
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/_sandboxd/activity", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var a struct {
		Running int `json:"running"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&a); err != nil {
		return false
	}
	return a.Running > 0
}

// Sweep reaps every sandbox past its deadline. One periodic sweep replaces
// per-sandbox timers, so no expiry can be lost.
func (x *Expiry) Sweep(ctx context.Context) {
	x.metrics.ReaperRuns.Add(1)
	x.persistActivity()
	x.repairStuck(ctx)
	recs, err := x.store.Sandboxes()
	if err != nil {
		x.log.Error("reaper: read records", "err", err)
		return
	}
	now := x.now()
	// Sandboxes are reaped side by side, so that one the engine is slow or
	// stuck on holds up none of the others.
	var wg sync.WaitGroup
	slots := make(chan struct{}, reapParallel)
	for _, rec := range recs {
		if rec.State != recordReady {
			continue
		}
		if e, ok := x.expiry(rec); !ok || now.Before(e.at) {
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			x.reap(ctx, rec)
		}()
	}
	wg.Wait()
	if x.idleSleep != nil {
		x.idleSleep(ctx, recs)
	}
	x.sweepUnfinished(ctx, recs)
	if x.afterSweep != nil {
		x.afterSweep(ctx)
	}
}

// sweepUnfinished removes, on a runtime shared by replicas, the sandbox
// containers of this instance that have had no ready record for longer
// than a create takes: one whose replica gave up or died, which Reconcile
// left since it could have been a create in flight. recs were read
// before the list, so a create that finishes meanwhile is still young.
func (x *Expiry) sweepUnfinished(ctx context.Context, recs []*Record) {
	if x.rt.Features().Leadership == nil {
		return
	}
	conts, err := x.rt.List(ctx, map[string]string{LabelInstance: x.instance})
	if err != nil {
		return // the sweep's own calls report an engine that is down
	}
	ready := map[string]bool{}
	for _, r := range recs {
		if r.State == recordReady {
			ready[r.ID] = true
		}
	}
	for _, c := range conts {
		id := c.Labels[LabelID]
		if ready[id] || c.Labels[LabelPool] != "" || x.creating(id) || x.othersCreate(c) {
			continue
		}
		x.log.Warn("reaper: removing a sandbox container whose create never finished", "sandbox_id", id, "container", runtime.ShortID(c.ID))
		if err := x.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			x.log.Error("reaper: remove unfinished sandbox container", "container", runtime.ShortID(c.ID), "err", err)
		}
	}
}

// reapParallel bounds the sandboxes one sweep reaps at once.
const reapParallel = 8

// reap removes a sandbox whose deadline has passed, unless running work
// moves a deadline that activity can move.
func (x *Expiry) reap(ctx context.Context, rec *Record) {
	e, _ := x.expiry(rec)
	if e.renews {
		if x.busy(ctx, rec) {
			x.log.Debug("deadline reached with work running; keeping", "sandbox_id", rec.ID)
			x.Touch(rec.ID)
			return
		}
		// A request may have come in while the agent answered.
		if e, _ = x.expiry(rec); x.now().Before(e.at) {
			return
		}
	}
	if x.sleepAtExpiry != nil && x.sleepAtExpiry(ctx, rec, e) {
		return
	}
	reason := "expired"
	if e.idle {
		reason = "idle"
	}
	if err := x.remove(ctx, rec, rec.ContainerID); err != nil {
		x.log.Error("reaper: remove sandbox", "sandbox_id", rec.ID, "reason", reason, "err", err)
		return
	}
	if reason == "idle" {
		x.metrics.ReapedIdle.Add(1)
	} else {
		x.metrics.ReapedExpired.Add(1)
	}
	x.log.Info("sandbox reaped", "sandbox_id", rec.ID, "reason", reason)
}

// repairStuck frees the paused sandboxes that the engine is stuck on, so
// that they can be resumed and removed again instead of leaking. Only a
// pause from elsewhere (another client, or a sandboxd before a restart) can
// leave one: this one never pauses while starting a process in a sandbox.
func (x *Expiry) repairStuck(ctx context.Context) {
	rp := x.rt.Features().Repairer
	if rp == nil {
		return
	}
	conts, err := x.rt.List(ctx, map[string]string{LabelInstance: x.instance})
	if err != nil {
		return // the sweep's own calls report an engine that is down
	}
	for _, c := range conts {
		if c.State != runtime.StatePaused {
			continue
		}
		fixed, err := rp.Repair(ctx, c.ID)
		switch {
		case err != nil:
			x.log.Error("reaper: repair paused sandbox stuck in a process start", "sandbox_id", c.Labels[LabelID], "container", c.ID, "err", err)
		case fixed:
			x.log.Warn("reaper: repaired paused sandbox stuck in a process start", "sandbox_id", c.Labels[LabelID], "container", c.ID)
		}
	}
}

// reaperInterval is [lifecycle] reaper_interval, 5 s if unset.
func (x *Expiry) reaperInterval() time.Duration {
	if d := x.cfg.Lifecycle.ReaperInterval.Duration; d > 0 {
		return d
	}
	return 5 * time.Second
}

// RunActivityFlush persists activity every reaper interval until ctx
// ends: a replica that does not lead reaps nothing but still records its
// sandboxes' use.
func (x *Expiry) RunActivityFlush(ctx context.Context) { x.periodically(ctx, x.persistActivity) }

// RunReaper sweeps every interval until ctx ends.
func (x *Expiry) RunReaper(ctx context.Context) { x.periodically(ctx, func() { x.Sweep(ctx) }) }

// periodically runs fn every reaper interval until ctx ends, then
// persists activity a last time.
func (x *Expiry) periodically(ctx context.Context, fn func()) {
	t := time.NewTicker(x.reaperInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			x.persistActivity()
			return
		case <-t.C:
			fn()
		}
	}
}
