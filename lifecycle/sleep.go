package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// Error codes of calls to a sleeping sandbox (reference
// fork-and-persistence §3.4).
const (
	CodeSandboxPaused   = "SANDBOX::PAUSED"
	CodeSandboxResuming = "SANDBOX::RESUMING"
)

// Status reasons of a sleeping sandbox: why it sleeps, and how deep.
const (
	reasonIdlePaused     = "IDLE_PAUSED"
	reasonIdleStopped    = "IDLE_STOPPED"
	reasonExpiredPaused  = "EXPIRED_PAUSED"
	reasonExpiredStopped = "EXPIRED_STOPPED"
	reasonResuming       = "RESUMING"
)

// stopGrace is how long a sandbox put to sleep by stop has to end its
// processes before they are killed; they are discarded either way.
const stopGrace = 2 * time.Second

// wakeTimeout bounds a wake: an unpause, or a start and its agent's
// first answer.
const wakeTimeout = 2 * time.Minute

// defaultSleepRetention is how long a sandbox asleep at its expiry is
// kept before it is deleted, unless [lifecycle] sleep_retention says.
const defaultSleepRetention = 7 * 24 * time.Hour

// Sleep is the service of sleeping sandboxes: it puts idle or expired
// sandboxes to sleep as their policy says, and wakes them, once, for the
// calls that need them. The record says whether a sandbox sleeps (so a
// restart keeps it asleep); memory says it on the proxy's path.
type Sleep struct {
	*deps
	sandboxes sleepSandboxes
	expiry    sleepDeadlines

	sleepers sync.Map // sandbox id → *sleeper, for sandboxes with a policy
}

// A sleeper's states.
const (
	awake int32 = iota
	fallingAsleep
	asleep
	waking
)

// sleeper is one sandbox's sleep state. A call that needs the sandbox
// records activity, then reads state; falling asleep publishes the
// state, then reads activity: so either the sleep sees the call's
// activity and is called off, or the call sees the sleep and waits to
// wake the sandbox. No request is sent into a frozen container.
type sleeper struct {
	state atomic.Int32
	mu    sync.Mutex // held through a transition: falling asleep or waking

	fmu    sync.Mutex
	flight *wakeFlight // the wake under way, which concurrent calls join
}

type wakeFlight struct {
	done chan struct{}
	err  error
}

// join returns the wake under way, starting one with run if none is.
func (sl *sleeper) join(run func() error) *wakeFlight {
	sl.fmu.Lock()
	defer sl.fmu.Unlock()
	if sl.flight != nil {
		return sl.flight
	}
	f := &wakeFlight{done: make(chan struct{})}
	sl.flight = f
	go func() {
		f.err = run()
		sl.fmu.Lock()
		sl.flight = nil
		sl.fmu.Unlock()
		close(f.done)
	}()
	return f
}

// wakeCause is what a wake is for; the policy's resume-on says which wake.
type wakeCause int

const (
	wakeByAccess wakeCause = iota // a request through the proxy route
	wakeByAPI                     // a lifecycle call that needs the sandbox (endpoints, renew)
	wakeByResume                  // POST /resume
)

// sleepSandboxes is what Sleep needs of the sandboxes service.
type sleepSandboxes interface {
	inspect(ctx context.Context, rec *Record) (runtime.Container, error)
	forgetRoute(id string)
}

// sleepDeadlines is what Sleep needs of the expiry service.
type sleepDeadlines interface {
	Touch(id string)
	expiry(rec *Record) (expiry, bool)
	lastActivity(rec *Record) time.Time
	busy(ctx context.Context, rec *Record) bool
}

// waker is what Sandboxes asks of the sleep service.
type waker interface {
	wake(ctx context.Context, id string, cause wakeCause) error
	sleepStatus(rec *Record) (Status, bool)
	forget(id string)
}

// sleeper returns a sandbox's sleeper, made from its record if new.
func (s *Sleep) sleeper(rec *Record) *sleeper {
	if v, ok := s.sleepers.Load(rec.ID); ok {
		return v.(*sleeper)
	}
	sl := &sleeper{}
	if rec.Asleep != "" {
		sl.state.Store(asleep)
	}
	v, _ := s.sleepers.LoadOrStore(rec.ID, sl)
	return v.(*sleeper)
}

// forget drops a removed sandbox's sleeper.
func (s *Sleep) forget(id string) { s.sleepers.Delete(id) }

// wake makes sure sandbox id is awake before a call that needs it is
// served, as its policy allows: it joins or starts the one wake, and
// waits for it up to the policy's resume wait. Cheap for a sandbox awake.
func (s *Sleep) wake(ctx context.Context, id string, cause wakeCause) error {
	v, ok := s.sleepers.Load(id)
	if !ok && cause == wakeByResume {
		// An explicit resume may come before any sweep of this process
		// learnt of the sleep from the record.
		if rec, err := s.record(id); err == nil && rec.Sleep != nil {
			v, ok = s.sleeper(rec), true
		}
	}
	if !ok {
		return nil
	}
	sl := v.(*sleeper)
	st := sl.state.Load()
	if st == awake {
		return nil
	}
	if st == fallingAsleep {
		// It may be called off by this call's activity: wait and see.
		sl.mu.Lock()
		st = sl.state.Load()
		sl.mu.Unlock()
		if st == awake {
			return nil
		}
	}
	rec, err := s.record(id)
	if err != nil {
		return err
	}
	p := rec.Sleep
	on := resumeOnAccess
	if p != nil {
		on = p.ResumeOn
	}
	switch {
	case cause == wakeByAccess && on == resumeOnAPI:
		return &Error{Kind: KindUnavailable, Code: CodeSandboxPaused, RetryAfter: time.Second,
			Message: fmt.Sprintf("sandbox %s is asleep (%s) and wakes on API calls only (%s=api): POST /resume, or GET its endpoints", id, rec.Asleep, ExtResumeOn)}
	case cause == wakeByAccess && on == resumeOnOff:
		return errf(KindConflict, CodeNotRunning, "sandbox %s is asleep (%s) and wakes on POST /resume only (%s=off)", id, rec.Asleep, ExtResumeOn)
	case cause == wakeByAPI && on == resumeOnOff:
		return nil
	}
	f := sl.join(func() error { return s.wakeNow(id, sl) })
	t := time.NewTimer(p.resumeWait())
	defer t.Stop()
	select {
	case <-f.done:
		return f.err
	case <-t.C:
	case <-ctx.Done():
	}
	return &Error{Kind: KindUnavailable, Code: CodeSandboxResuming, RetryAfter: time.Second,
		Message: fmt.Sprintf("sandbox %s is still waking up; retry", id)}
}

// wakeNow wakes a sandbox: it unpauses or starts it (and waits for its
// agent), then marks it awake. It runs on its own, so that a caller who
// gives up does not cut it short for the others.
func (s *Sleep) wakeNow(id string, sl *sleeper) error {
	done, err := s.life.begin()
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.state.Load() == awake {
		return nil
	}
	rec, err := s.record(id)
	if err != nil {
		return err
	}
	start := s.now()
	prev := sl.state.Swap(waking)
	if err := s.rouse(ctx, rec); err != nil {
		sl.state.Store(prev)
		s.log.Error("wake sandbox", "sandbox_id", id, "asleep", rec.Asleep, "err", err)
		if _, ok := AsError(err); ok {
			return err
		}
		return s.opError(err, CodeResumeFailed, "wake sandbox "+id)
	}
	now := s.now()
	if _, err := s.store.UpdateSandbox(id, func(r *Record) error {
		// A renewal made while it slept may have granted more already.
		if at := wireTime(now.Add(s.regrant(r.Sleep))); strings.HasPrefix(r.Asleep, "EXPIRED_") && r.ExpiresAt != nil && at.After(*r.ExpiresAt) {
			r.ExpiresAt = &at
		}
		r.Asleep, r.AsleepAt = "", time.Time{}
		return nil
	}); err != nil {
		s.log.Warn("record a sandbox awake", "sandbox_id", id, "err", err)
	}
	s.expiry.Touch(id)
	sl.state.Store(awake)
	s.metrics.Wakes.Add(1)
	s.metrics.WakeSeconds.Observe(now.Sub(start))
	s.log.Info("sandbox woke", "sandbox_id", id, "was", rec.Asleep, "duration_ms", now.Sub(start).Milliseconds())
	return nil
}

// rouse brings a sleeping sandbox's container back to running.
func (s *Sleep) rouse(ctx context.Context, rec *Record) error {
	c, err := s.sandboxes.inspect(ctx, rec)
	if err != nil {
		return err
	}
	switch {
	case c.State == runtime.StatePaused:
		p := s.rt.Features().Pauser
		if p == nil {
			return s.unsupported("pause and resume are")
		}
		return p.Unpause(ctx, rec.ContainerID)
	case c.State == runtime.StateCreated || c.State.Stopped():
		if err := s.rt.Start(ctx, rec.ContainerID); err != nil {
			return err
		}
		return s.awaitAgent(ctx, rec)
	}
	return nil
}

// regrant is the time a wake from an expired sleep gives the sandbox:
// its create timeout again, at least 5 minutes (as E2B's auto-resume),
// within max_sandbox_timeout_seconds.
func (s *Sleep) regrant(p *SleepPolicy) time.Duration {
	d := 300 * time.Second
	if p != nil && time.Duration(p.Timeout)*time.Second > d {
		d = time.Duration(p.Timeout) * time.Second
	}
	if max := time.Duration(s.cfg.Server.MaxSandboxTimeoutSeconds) * time.Second; max > 0 && d > max {
		d = max
	}
	return d
}

// sleepStatus is the status of a sandbox asleep or waking; false if it is
// neither.
func (s *Sleep) sleepStatus(rec *Record) (Status, bool) {
	var st int32
	if v, ok := s.sleepers.Load(rec.ID); ok {
		st = v.(*sleeper).state.Load()
	}
	switch {
	case st == waking:
		return Status{"Resuming", reasonResuming, "Sandbox is waking up; calls to it wait for it.", wireTime(rec.AsleepAt)}, true
	case rec.Asleep == "" || st == fallingAsleep:
		// Recorded asleep before it is frozen or stopped: until then it
		// is what its container says.
		return Status{}, false
	}
	return Status{"Paused", rec.Asleep, sleepMessage(rec), wireTime(rec.AsleepAt)}, true
}

// sleepMessage says why and how a sandbox sleeps, and what wakes it.
func sleepMessage(rec *Record) string {
	var why string
	switch rec.Asleep {
	case reasonIdlePaused, reasonIdleStopped:
		why = "after " + (time.Duration(rec.Sleep.IdleSeconds) * time.Second).String() + " idle"
	default:
		why = "at its expiry"
	}
	how := "Paused " + why + " (processes frozen, memory kept)"
	if levelOf(rec.Asleep) == actionStop {
		how = "Stopped " + why + " (files kept, processes ended, memory released)"
	}
	switch rec.Sleep.ResumeOn {
	case resumeOnAPI:
		return how + "; resumes on an API call (resume, endpoints, renew)."
	case resumeOnOff:
		return how + "; resume it with POST /resume."
	}
	return how + "; resumes on the next call."
}

// levelOf is how deep a sleep reason sleeps: pause, stop, or "" awake.
func levelOf(reason string) string {
	switch reason {
	case reasonIdlePaused, reasonExpiredPaused:
		return actionPause
	case reasonIdleStopped, reasonExpiredStopped:
		return actionStop
	}
	return ""
}

// sleepReason names a sleep: why ("IDLE_" or "EXPIRED_") and how deep.
func sleepReason(why, level string) string {
	if level == actionStop {
		return why + "STOPPED"
	}
	return why + "PAUSED"
}

// fallAsleep puts a sandbox to sleep at level, for why, if due still
// holds once the sleep is published (see sleeper). A sandbox asleep
// already goes deeper if level asks, and takes the new reason.
func (s *Sleep) fallAsleep(ctx context.Context, id, why, level string, due func(*Record) bool) {
	v, ok := s.sleepers.Load(id)
	if !ok {
		return
	}
	sl := v.(*sleeper)
	if !sl.mu.TryLock() {
		return // a wake is under way; the next sweep looks again
	}
	defer sl.mu.Unlock()
	rec, err := s.record(id)
	if err != nil || rec.State != recordReady {
		return
	}
	cur := levelOf(rec.Asleep)
	if cur == "" {
		// A sandbox paused by hand, or stopped by something else, is left.
		if c, err := s.rt.Inspect(ctx, rec.ContainerID); err != nil || c.State != runtime.StateRunning {
			return
		}
	}
	target := level
	if cur == actionStop {
		target = actionStop
	}
	reason := sleepReason(why, target)
	prev := sl.state.Load()
	sl.state.Store(fallingAsleep)
	if !due(rec) {
		sl.state.Store(prev)
		return
	}
	now := wireTime(s.now())
	// Recorded first: a restart in between finds it asleep, and its wake
	// finds it running.
	if _, err := s.store.UpdateSandbox(id, func(r *Record) error {
		r.Asleep, r.AsleepAt = reason, now
		return nil
	}); err != nil {
		sl.state.Store(prev)
		s.log.Error("record a sandbox asleep", "sandbox_id", id, "err", err)
		return
	}
	if target != cur {
		if err := s.lull(ctx, rec, target); err != nil {
			s.log.Error("put sandbox to sleep", "sandbox_id", id, "level", target, "err", err)
			if _, err := s.store.UpdateSandbox(id, func(r *Record) error {
				r.Asleep, r.AsleepAt = rec.Asleep, rec.AsleepAt
				return nil
			}); err != nil {
				s.log.Error("record a sandbox awake", "sandbox_id", id, "err", err)
			}
			sl.state.Store(prev)
			return
		}
	}
	s.sandboxes.forgetRoute(id)
	sl.state.Store(asleep)
	s.metrics.Sleeps.Add(1)
	s.log.Info("sandbox asleep", "sandbox_id", id, "reason", reason)
}

// lull pauses or stops a sandbox's container.
func (s *Sleep) lull(ctx context.Context, rec *Record, level string) error {
	c, err := s.rt.Inspect(ctx, rec.ContainerID)
	if err != nil {
		return err
	}
	pauser := s.rt.Features().Pauser
	switch level {
	case actionPause:
		if pauser == nil {
			return errors.New("the runtime cannot pause")
		}
		return pauser.Pause(ctx, rec.ContainerID)
	case actionStop:
		stopper := s.rt.Features().Stopper
		if stopper == nil {
			return errors.New("the runtime cannot stop")
		}
		if c.State == runtime.StatePaused && pauser != nil {
			if err := pauser.Unpause(ctx, rec.ContainerID); err != nil {
				return err
			}
		}
		return stopper.Stop(ctx, rec.ContainerID, stopGrace)
	}
	return fmt.Errorf("unknown sleep level %q", level)
}

// sweep is the reaper's idle pass: it knows every sandbox with a policy
// (after a restart, the asleep ones from their records), and puts to
// sleep those idle past their threshold with no work running. Expiry
// is the reaper's own.
func (s *Sleep) sweep(ctx context.Context, recs []*Record) {
	now := s.now()
	live := map[string]bool{}
	var wg sync.WaitGroup
	slots := make(chan struct{}, reapParallel)
	for _, rec := range recs {
		if rec.State != recordReady || rec.Sleep == nil {
			continue
		}
		live[rec.ID] = true
		s.sleeper(rec)
		if rec.Asleep != "" || !rec.Sleep.sleepsOnIdle() {
			continue
		}
		idle := time.Duration(rec.Sleep.IdleSeconds) * time.Second
		if e, ok := s.expiry.expiry(rec); ok && !now.Before(e.at) || now.Before(s.expiry.lastActivity(rec).Add(idle)) {
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if s.expiry.busy(ctx, rec) {
				s.expiry.Touch(rec.ID)
				return
			}
			s.fallAsleep(ctx, rec.ID, "IDLE_", rec.Sleep.IdleAction, func(r *Record) bool {
				return !s.now().Before(s.expiry.lastActivity(r).Add(idle))
			})
		}()
	}
	wg.Wait()
	// Sleepers of sandboxes gone by another way than destroy (a record
	// read before its removal made one again) go too.
	s.sleepers.Range(func(k, v any) bool {
		if !live[k.(string)] && v.(*sleeper).state.Load() == awake {
			s.sleepers.Delete(k)
		}
		return true
	})
}

// atExpiry puts a sandbox whose expiry passed to sleep instead of
// deleting it, as its policy's expire action says; it reports whether it
// took the sandbox (false: delete it). A sandbox asleep at its expiry
// longer than [lifecycle] sleep_retention is deleted.
func (s *Sleep) atExpiry(ctx context.Context, rec *Record, e expiry) bool {
	p := rec.Sleep
	if !p.sleepsOnExpiry() || e.idle && rec.RenewOnAccess == 0 {
		return false // none, or the server's idle timeout, which deletes
	}
	s.sleeper(rec)
	if strings.HasPrefix(rec.Asleep, "EXPIRED_") && (levelOf(rec.Asleep) == actionStop || p.ExpireAction == actionPause) {
		keep := s.cfg.Lifecycle.SleepRetention.Duration
		if keep <= 0 {
			keep = defaultSleepRetention
		}
		return s.now().Before(rec.AsleepAt.Add(keep))
	}
	s.fallAsleep(ctx, rec.ID, "EXPIRED_", p.ExpireAction, func(r *Record) bool {
		e, ok := s.expiry.expiry(r)
		return ok && !s.now().Before(e.at)
	})
	return true
}
