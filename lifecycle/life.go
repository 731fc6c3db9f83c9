package lifecycle

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Phase reports where the Manager is in its life, and why it does not
// serve yet or any more ("" while serving).
func (m *Manager) Phase() (phase, reason string) {
	m.d.life.mu.Lock()
	defer m.d.life.mu.Unlock()
	return m.d.life.state()
}

// Ready returns nil while the Manager serves, else the 503 to answer.
func (m *Manager) Ready() error { return notReady(m.Phase()) }

// served marks the end of the first reconcile.
func (m *Manager) served() {
	m.d.life.mu.Lock()
	defer m.d.life.mu.Unlock()
	if m.d.life.phase == PhaseStarting {
		m.d.life.phase = PhaseServing
	}
}

// Start reconciles with the engine in the background (retrying while it
// is unreachable), then serves: it fills the warm pools and runs the
// reaper until Shutdown.
//
// On a runtime shared by several replicas (runtime.Leadership) a replica
// serves at once, since nothing it does at start can race its own
// creates; it reconciles, reaps and fills pools only while it leads, and
// flushes its sandboxes' activity all along (the leader's reaper reads it
// from the shared records).
func (m *Manager) Start() {
	ctx, stop := context.WithCancel(context.Background())
	m.d.life.mu.Lock()
	m.d.life.stop, m.d.life.done = stop, make(chan struct{})
	done := m.d.life.done
	m.d.life.mu.Unlock()
	leader := m.d.rt.Features().Leadership
	go func() {
		defer close(done)
		if leader == nil {
			m.lead(ctx)
			return
		}
		m.served()
		var flush sync.WaitGroup
		flush.Go(func() { m.Expiry.RunActivityFlush(ctx) })
		defer flush.Wait()
		for {
			lctx, err := leader.Lead(ctx)
			if err != nil {
				return // ctx ended
			}
			m.d.log.Info("leading: reconciling, reaping and filling pools")
			m.lead(lctx)
			if ctx.Err() != nil {
				return
			}
			m.d.log.Warn("leadership lost; waiting to lead again")
		}
	}()
}

// lead does the background work one sandboxd at a time may do, until ctx
// ends: reconcile (retrying while the engine is unreachable), then the
// pool fillers and the reaper.
func (m *Manager) lead(ctx context.Context) {
	for {
		err := m.Reconcile(ctx)
		if err == nil {
			break
		}
		m.d.log.Error("reconcile with the engine failed; retrying", "in", m.d.life.retry, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.d.life.retry):
		}
	}
	var pools sync.WaitGroup
	pools.Go(func() { m.Pools.RunPools(ctx) })
	m.Expiry.RunReaper(ctx)
	pools.Wait()
}

// Shutdown stops the Manager: it refuses new work, waits for the creates
// and snapshot commits in flight, stops the pool fillers and the reaper
// (which persists activity last), then closes the store and the engine
// client. If ctx ends first it closes them anyway and returns ctx's error.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.d.life.mu.Lock()
	if m.d.life.phase == PhaseStopping {
		m.d.life.mu.Unlock()
		return nil
	}
	m.d.life.phase = PhaseStopping
	stop, done := m.d.life.stop, m.d.life.done
	m.d.life.mu.Unlock()

	work := make(chan struct{})
	go func() {
		m.d.life.work.Wait()
		close(work)
	}()
	var late error
	select {
	case <-work:
	case <-ctx.Done():
		late = errors.New("creates or snapshot commits still running")
	}
	if stop != nil {
		stop()
		select {
		case <-done:
		case <-ctx.Done():
			late = errors.Join(late, errors.New("pool fillers or the reaper still running"))
		}
	}
	if late != nil {
		m.d.log.Warn("shutdown deadline passed; closing the store and the engine client under work in flight", "err", late)
	}
	err := errors.Join(m.d.store.Close(), m.d.rt.Close())
	if late != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}

// Reconcile brings the books in line with the engine after a start: it
// creates sandboxd's network if that is the one in use, hands the pools
// their members, removes half-created sandboxes and forgets those whose
// container is gone, settles interrupted snapshots, restores the egress
// daemons, reaps what expired while sandboxd was down, then resumes the
// fork tasks in progress. The first
// that succeeds makes the Manager serve.
func (m *Manager) Reconcile(ctx context.Context) error {
	if err := m.d.ensureNetwork(ctx); err != nil {
		return err
	}
	adopted, err := m.Sandboxes.Reconcile(ctx, m.Pools.Adopt)
	if err != nil {
		return err
	}
	m.Snapshots.Reconcile(ctx)
	m.Egress.Restore(ctx, m.Pools.IdleIDs())
	m.d.log.Info("reconciled with the engine", "adopted", adopted)
	m.Expiry.Sweep(ctx)
	m.served()
	m.Forks.Resume() // its steps need a serving Manager
	return nil
}
