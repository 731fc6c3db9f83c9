package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// Expiry rules (README "Expiry, idle timeout and renewal"):
//
//   - TTL: timeout at create sets expiresAt; renew-expiration moves it.
//   - Renew on access (upstream's access.renew.extend.seconds = E): each
//     activity moves the TTL deadline to max(lastActivity+E, expiresAt),
//     capped at createdAt + max_sandbox_timeout_seconds when that is set.
//   - Idle timeout ([lifecycle] idle_timeout = I): the sandbox is reaped
//     at lastActivity+I unless work is still running inside it, and never
//     later than its TTL deadline.
//
// Activity is any request through the sandbox's proxy route, a resume, or
// a renewal; sandboxd's own housekeeping never counts.

// lastActivity is the newest of the persisted and in-memory activity times.
func (m *Manager) lastActivity(rec *Record) time.Time {
	m.mu.Lock()
	t, ok := m.activity[rec.ID]
	m.mu.Unlock()
	if ok && t.After(rec.LastActivity) {
		return t
	}
	return rec.LastActivity
}

// ttlDeadline is the hard deadline, nil for manual cleanup.
func (m *Manager) ttlDeadline(rec *Record) *time.Time {
	if rec.ExpiresAt == nil {
		return nil
	}
	d := *rec.ExpiresAt
	if rec.RenewOnAccess > 0 {
		if ext := m.lastActivity(rec).Add(time.Duration(rec.RenewOnAccess) * time.Second); ext.After(d) {
			d = ext
		}
		if max := m.cfg.Server.MaxSandboxTimeoutSeconds; max > 0 {
			if limit := rec.CreatedAt.Add(time.Duration(max) * time.Second); d.After(limit) {
				d = limit
			}
		}
	}
	return &d
}

// idleDeadline is when the sandbox becomes reapable for idleness, nil if
// it has no idle timeout.
func (m *Manager) idleDeadline(rec *Record) *time.Time {
	if rec.IdleTimeout <= 0 {
		return nil
	}
	d := m.lastActivity(rec).Add(time.Duration(rec.IdleTimeout) * time.Second)
	return &d
}

// deadline is the earliest of the TTL and idle deadlines: what expiresAt
// reports.
func (m *Manager) deadline(rec *Record) *time.Time {
	ttl, idle := m.ttlDeadline(rec), m.idleDeadline(rec)
	switch {
	case ttl == nil:
		return idle
	case idle == nil || ttl.Before(*idle):
		return ttl
	}
	return idle
}

// Touch records activity on a sandbox (cheap: persisted by the reaper).
func (m *Manager) Touch(id string) {
	now := m.now()
	m.mu.Lock()
	m.activity[id] = now
	m.mu.Unlock()
}

// persistActivity writes in-memory activity times to the store, so idle
// deadlines survive a restart to within one reaper period.
func (m *Manager) persistActivity() {
	m.mu.Lock()
	pending := m.activity
	m.activity = map[string]time.Time{}
	m.mu.Unlock()
	for id, t := range pending {
		_, err := m.store.UpdateSandbox(id, func(r *Record) error {
			if t.After(r.LastActivity) {
				r.LastActivity = t
			}
			return nil
		})
		if err != nil && !errors.Is(err, errNoRecord) {
			m.log.Warn("persist activity", "sandbox_id", id, "err", err)
			m.mu.Lock()
			if cur, ok := m.activity[id]; !ok || cur.Before(t) {
				m.activity[id] = t
			}
			m.mu.Unlock()
		}
	}
}

// busy asks the sandbox's agent whether commands, sessions or terminals
// are still running. It does not count as activity.
func (m *Manager) busy(ctx context.Context, rec *Record) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rt, err := m.rt.Agent(ctx, rec.ContainerID)
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
func (m *Manager) Sweep(ctx context.Context) {
	m.metrics.ReaperRuns.Add(1)
	m.persistActivity()
	recs, err := m.store.Sandboxes()
	if err != nil {
		m.log.Error("reaper: read records", "err", err)
		return
	}
	now := m.now()
	for _, rec := range recs {
		if rec.State != recordReady {
			continue
		}
		ttl, idle := m.ttlDeadline(rec), m.idleDeadline(rec)
		reason := ""
		switch {
		case ttl != nil && !now.Before(*ttl):
			reason = "expired"
		case idle != nil && !now.Before(*idle):
			if m.busy(ctx, rec) {
				m.log.Debug("idle deadline passed but work is running; keeping", "sandbox_id", rec.ID)
				m.Touch(rec.ID)
				continue
			}
			reason = "idle"
		default:
			continue
		}
		if err := m.destroy(ctx, rec, rec.ContainerID); err != nil {
			m.log.Error("reaper: remove sandbox", "sandbox_id", rec.ID, "reason", reason, "err", err)
			continue
		}
		if reason == "idle" {
			m.metrics.ReapedIdle.Add(1)
		} else {
			m.metrics.ReapedExpired.Add(1)
		}
		m.log.Info("sandbox reaped", "sandbox_id", rec.ID, "reason", reason)
	}
}

// RunReaper sweeps every interval until ctx ends.
func (m *Manager) RunReaper(ctx context.Context) {
	interval := m.cfg.Lifecycle.ReaperInterval.Duration
	if interval <= 0 {
		interval = 5 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.persistActivity()
			return
		case <-t.C:
			m.Sweep(ctx)
		}
	}
}

// Reconcile brings the books in line with Docker after a start: it removes
// half-created sandboxes and containers of this instance that have no
// record, forgets records whose container is gone, settles interrupted
// snapshots, then reaps what expired while sandboxd was down.
func (m *Manager) Reconcile(ctx context.Context) error {
	conts, err := m.rt.List(ctx, map[string]string{LabelInstance: m.instance})
	if err != nil {
		return m.engineError(err, "list containers")
	}
	recs, err := m.store.Sandboxes()
	if err != nil {
		return err
	}
	byID := map[string]*Record{}
	for _, r := range recs {
		byID[r.ID] = r
	}
	seen := map[string]bool{}
	adopted := 0
	for _, c := range conts {
		id := c.Labels[LabelID]
		rec := byID[id]
		if rec == nil && m.adoptPoolMember(ctx, c) {
			continue
		}
		if rec == nil || rec.State != recordReady {
			m.log.Warn("removing half-created sandbox container", "sandbox_id", id, "container", c.ID[:12])
			if err := m.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				m.log.Error("remove half-created container", "container", c.ID[:12], "err", err)
			}
			continue
		}
		seen[id] = true
		adopted++
	}
	for _, r := range recs {
		if seen[r.ID] {
			continue
		}
		if r.State == recordReady {
			m.log.Warn("sandbox container gone while sandboxd was down; forgetting it", "sandbox_id", r.ID)
		}
		_ = m.destroy(ctx, r, r.ContainerID)
	}
	m.reconcileSnapshots(ctx)
	m.log.Info("reconciled with Docker", "adopted", adopted)
	m.Sweep(ctx)
	return nil
}
