package lifecycle

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// A Manager's life is ordered. Until the first reconcile has finished it
// serves nothing: reconciling removes the containers of half-made
// sandboxes, which would include those of a create in flight. Shutdown
// stops intake, waits for the work in flight, stops the background loops
// (the reaper flushes activity on its way out), and only then closes the
// store and the engine client.

// Phases of a Manager, as /health reports them.
const (
	PhaseStarting = "starting"
	PhaseServing  = "serving"
	PhaseStopping = "stopping"
)

// reconcileRetry is how long Start waits after a failed reconcile (the
// engine unreachable) before trying again.
const reconcileRetry = 5 * time.Second

// life is a Manager's phase and the work it must wait for.
type life struct {
	mu    sync.Mutex
	phase string
	work  sync.WaitGroup // creates and snapshot commits in flight
	stop  context.CancelFunc
	done  chan struct{} // closed when Start's loops have returned; nil before Start
	// retry is reconcileRetry, shorter in tests.
	retry time.Duration
}

// Phase reports where the Manager is in its life, and why it does not
// serve yet or any more ("" while serving).
func (m *Manager) Phase() (phase, reason string) {
	m.life.mu.Lock()
	defer m.life.mu.Unlock()
	return m.life.state()
}

// state is Phase; the caller holds mu.
func (l *life) state() (phase, reason string) {
	switch l.phase {
	case PhaseStarting:
		return PhaseStarting, "reconciling with the engine"
	case PhaseStopping:
		return PhaseStopping, "shutting down"
	}
	return PhaseServing, ""
}

// Ready returns nil while the Manager serves, else the 503 to answer.
func (m *Manager) Ready() error { return notReady(m.Phase()) }

// notReady is the error of a request made outside the serving phase.
func notReady(phase, reason string) error {
	switch phase {
	case PhaseStarting:
		return errf(KindUnavailable, CodeNotReady, "sandboxd is starting (%s); retry shortly", reason)
	case PhaseStopping:
		return errf(KindUnavailable, CodeNotReady, "sandboxd is %s; retry after its restart", reason)
	}
	return nil
}

// begin admits one piece of work that Shutdown waits for; call done when
// it ends. It fails unless the Manager serves.
func (l *life) begin() (done func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := notReady(l.state()); err != nil {
		return nil, err
	}
	l.work.Add(1)
	return l.work.Done, nil
}

// served marks the end of the first reconcile.
func (m *Manager) served() {
	m.life.mu.Lock()
	defer m.life.mu.Unlock()
	if m.life.phase == PhaseStarting {
		m.life.phase = PhaseServing
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
	m.life.mu.Lock()
	m.life.stop, m.life.done = stop, make(chan struct{})
	done := m.life.done
	m.life.mu.Unlock()
	leader, shared := m.rt.(runtime.Leadership)
	go func() {
		defer close(done)
		if !shared {
			m.lead(ctx)
			return
		}
		m.served()
		var flush sync.WaitGroup
		flush.Go(func() { m.runActivityFlush(ctx) })
		defer flush.Wait()
		for {
			lctx, err := leader.Lead(ctx)
			if err != nil {
				return // ctx ended
			}
			m.log.Info("leading: reconciling, reaping and filling pools")
			m.lead(lctx)
			if ctx.Err() != nil {
				return
			}
			m.log.Warn("leadership lost; waiting to lead again")
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
		m.log.Error("reconcile with the engine failed; retrying", "in", m.life.retry, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.life.retry):
		}
	}
	var pools sync.WaitGroup
	pools.Go(func() { m.RunPools(ctx) })
	m.RunReaper(ctx)
	pools.Wait()
}

// othersCreate reports whether container c, which has no ready record, may
// be another replica's create in flight: on a runtime shared by replicas,
// a sandbox's container exists before its record is written to it.
func (d *deps) othersCreate(c runtime.Container) bool {
	_, shared := d.rt.(runtime.Leadership)
	return shared && d.now().Sub(c.Created) < sharedCreateGrace
}

// sharedCreateGrace is how long a replica's create may take, image pull
// included, before a leader counts its container as left behind.
const sharedCreateGrace = 10 * time.Minute

// Shutdown stops the Manager: it refuses new work, waits for the creates
// and snapshot commits in flight, stops the pool fillers and the reaper
// (which persists activity last), then closes the store and the engine
// client. If ctx ends first it closes them anyway and returns ctx's error.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.life.mu.Lock()
	if m.life.phase == PhaseStopping {
		m.life.mu.Unlock()
		return nil
	}
	m.life.phase = PhaseStopping
	stop, done := m.life.stop, m.life.done
	m.life.mu.Unlock()

	work := make(chan struct{})
	go func() {
		m.life.work.Wait()
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
		m.log.Warn("shutdown deadline passed; closing the store and the engine client under work in flight", "err", late)
	}
	err := errors.Join(m.store.Close(), m.rt.Close())
	if late != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}

// Reconcile brings the books in line with the engine after a start: it removes
// half-created sandboxes and containers of this instance that have no
// record, forgets records whose container is gone, settles interrupted
// snapshots, then reaps what expired while sandboxd was down. It first
// creates sandboxd's network if that is the one in use. The first
// that succeeds makes the Manager serve (see life.go).
func (m *Manager) Reconcile(ctx context.Context) error {
	if err := m.ensureNetwork(ctx); err != nil {
		return err
	}
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
		if m.creating(id) {
			continue // a create in flight (a replica that leads later)
		}
		if rec == nil || rec.State != recordReady {
			if m.othersCreate(c) {
				seen[id] = true // the reaper removes it if it never gets ready
				continue
			}
			m.log.Warn("removing half-created sandbox container", "sandbox_id", id, "container", runtime.ShortID(c.ID))
			if err := m.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				m.log.Error("remove half-created container", "container", runtime.ShortID(c.ID), "err", err)
			}
			continue
		}
		seen[id] = true
		adopted++
	}
	for _, r := range recs {
		if seen[r.ID] || m.creating(r.ID) {
			continue
		}
		if r.State == recordReady {
			m.log.Warn("sandbox container gone while sandboxd was down; forgetting it", "sandbox_id", r.ID)
		}
		_ = m.destroy(ctx, r, r.ContainerID)
	}
	m.reconcileSnapshots(ctx)
	m.restoreEgress(ctx)
	m.log.Info("reconciled with the engine", "adopted", adopted)
	m.Sweep(ctx)
	m.served()
	return nil
}
