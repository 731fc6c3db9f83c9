package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// A pause that lands while runc is starting a process in a container (an
// exec's `runc init`) freezes runc itself: `runc exec` never returns, and
// dockerd then hangs on every call about that container, removal included,
// until its cgroup is thawed by hand. And dockerd holds a container's lock
// for as long as an archive stream of it is open, so a pause, an inspect or
// a removal waits for a slow download or upload to end.
//
// So each container has a gate that orders the calls reaching into it with
// the calls that change its state (pause, unpause, commit, removal, repair:
// the exclusive ones, one at a time). An exclusive call stops new calls
// from starting, waits for process starts to finish (they cannot be cut
// short), gives transfers (archive and stat calls) transferGrace to finish
// and then aborts them.
//
// A process start is refused while the container is paused; a transfer is
// not, as dockerd copies from the host side without running anything in
// the container.
type gates struct {
	// grace is how long an exclusive call lets transfers finish.
	grace time.Duration

	mu sync.Mutex
	m  map[string]*gate // by container id
}

// transferGrace lets a transfer whose client reads or writes at any decent
// speed finish before a pause; one stalled longer is aborted.
const transferGrace = 10 * time.Second

// errAborted ends a transfer that an exclusive call cut short.
var errAborted = fmt.Errorf("transfer cut short: the container was paused, resumed or removed meanwhile: %w", runtime.ErrConflict)

// gate is one container's state. Its fields are guarded by gates.mu.
type gate struct {
	starts    int                    // process starts being set up
	transfers map[*transfer]struct{} // in flight
	exclusive bool                   // an exclusive call is under way
	paused    bool                   // paused by this process and not resumed since
	// changed is closed, and replaced, whenever the fields change.
	changed chan struct{}
}

func (g *gate) notify() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// transfer is an archive or stat call in flight.
type transfer struct{ abort context.CancelCauseFunc }

// get returns id's gate; gs.mu must be held.
func (gs *gates) get(id string) *gate {
	if gs.m == nil {
		gs.m = map[string]*gate{}
	}
	g := gs.m[id]
	if g == nil {
		g = &gate{transfers: map[*transfer]struct{}{}, changed: make(chan struct{})}
		gs.m[id] = g
	}
	return g
}

// wait blocks until cond holds for id's gate (evaluated with gs.mu held)
// or ctx ends, and returns the gate with gs.mu held on success.
func (gs *gates) wait(ctx context.Context, id string, cond func(*gate) bool) (*gate, error) {
	for {
		gs.mu.Lock()
		g := gs.get(id)
		if cond(g) {
			return g, nil
		}
		ch := g.changed
		gs.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// change runs fn on g under gs.mu and wakes the waiters.
func (gs *gates) change(g *gate, fn func()) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	fn()
	g.notify()
}

func noExclusive(g *gate) bool { return !g.exclusive }

// start admits a process start (exec create, start and attach) in
// container id and returns the function that ends its set-up. It waits
// while an exclusive call is under way and refuses a paused container.
func (gs *gates) start(ctx context.Context, id string) (release func(), err error) {
	g, err := gs.wait(ctx, id, noExclusive)
	if err != nil {
		return nil, fmt.Errorf("container %s is being paused, resumed or removed: %w", id, err)
	}
	defer gs.mu.Unlock()
	if g.paused {
		return nil, fmt.Errorf("container %s is paused: %w", id, runtime.ErrConflict)
	}
	g.starts++
	var once sync.Once
	return func() { once.Do(func() { gs.change(g, func() { g.starts-- }) }) }, nil
}

// transfer admits an archive or stat call on container id: it waits while
// an exclusive call is under way. The call must run on tctx, which an
// exclusive call cancels with errAborted; release ends the transfer.
func (gs *gates) transfer(ctx context.Context, id string) (tctx context.Context, release func(), err error) {
	g, err := gs.wait(ctx, id, noExclusive)
	if err != nil {
		return nil, nil, fmt.Errorf("container %s is being paused, resumed or removed: %w", id, err)
	}
	defer gs.mu.Unlock()
	tctx, abort := context.WithCancelCause(ctx)
	t := &transfer{abort}
	g.transfers[t] = struct{}{}
	var once sync.Once
	return tctx, func() {
		once.Do(func() {
			gs.change(g, func() { delete(g.transfers, t) })
			abort(nil)
		})
	}, nil
}

// aborted returns errAborted if the transfer on tctx was cut short, else err.
func aborted(tctx context.Context, err error) error {
	if err != nil && context.Cause(tctx) == errAborted {
		return errAborted
	}
	return err
}

// acquire starts an exclusive call (pause, unpause, commit, removal,
// repair) on container id, once no other is under way: from then on no
// process start or transfer begins. end ends it; the caller records a state
// change with setPaused before.
func (gs *gates) acquire(ctx context.Context, id string) (end func(), err error) {
	g, err := gs.wait(ctx, id, noExclusive)
	if err != nil {
		return nil, fmt.Errorf("wait for another pause, resume, commit or removal of container %s: %w", id, err)
	}
	g.exclusive = true
	g.notify()
	gs.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { gs.change(g, func() { g.exclusive = false }) }) }, nil
}

// drain, within an exclusive call, waits for the process starts in
// container id to finish (they cannot be cut short) and lets its transfers
// finish within grace before aborting them.
func (gs *gates) drain(ctx context.Context, id string, grace time.Duration) error {
	if _, err := gs.wait(ctx, id, func(g *gate) bool { return g.starts == 0 }); err != nil {
		return fmt.Errorf("wait for a process start in container %s: %w", id, err)
	}
	gs.mu.Unlock()
	idle := func(g *gate) bool { return len(g.transfers) == 0 }
	gctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	if _, err := gs.wait(gctx, id, idle); err == nil {
		gs.mu.Unlock()
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("wait for transfers of container %s: %w", id, ctx.Err())
	}
	// Aborting a call closes its connection, which makes dockerd let go
	// of the container. Its caller may take longer to notice (it can be
	// blocked writing to its own stalled client): it is not waited for.
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.get(id)
	for t := range g.transfers {
		t.abort(errAborted)
		delete(g.transfers, t)
	}
	g.notify()
	return nil
}

// exclusive is acquire and drain: a pause, unpause or commit.
func (gs *gates) exclusive(ctx context.Context, id string, grace time.Duration) (end func(), err error) {
	end, err = gs.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := gs.drain(ctx, id, grace); err != nil {
		end()
		return nil, err
	}
	return end, nil
}

// setPaused records whether container id is paused by this process.
func (gs *gates) setPaused(id string, paused bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.get(id)
	g.paused = paused
	g.notify()
}

// busy reports whether container id has transfers in flight (dockerd then
// holds its lock, and inspecting it would wait for them).
func (gs *gates) busy(id string) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[id]
	return g != nil && len(g.transfers) > 0
}

// forget drops a removed container's gate.
func (gs *gates) forget(id string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	delete(gs.m, id)
}
