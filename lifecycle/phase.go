package lifecycle

import (
	"context"
	"sync"
	"time"
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
