package docker

import (
	"context"
	"fmt"
	"sync"

	"github.com/sandboxd/sandboxd/runtime"
)

// A pause that lands while runc is starting a process in a container (an
// exec's `runc init`) freezes runc itself: `runc exec` never returns, and
// dockerd then hangs on every call about that container, removal included,
// until its cgroup is thawed by hand. So each container has a gate that
// orders the calls reaching into it (exec create, start and attach, archive
// and stat) with pause and commit (which pauses): a pause waits until the
// calls being set up have finished, and no such call starts while the
// container is paused or a pause is under way.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate // by container id
}

// gate is one container's state. Its fields are guarded by gates.mu.
type gate struct {
	users    int  // calls being set up
	freezers int  // pauses and commits under way
	paused   bool // paused by this process and not resumed since
	// changed is closed, and replaced, whenever the fields change.
	changed chan struct{}
}

func (g *gate) notify() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// get returns id's gate; gs.mu must be held.
func (gs *gates) get(id string) *gate {
	if gs.m == nil {
		gs.m = map[string]*gate{}
	}
	g := gs.m[id]
	if g == nil {
		g = &gate{changed: make(chan struct{})}
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

// enter admits a call that reaches into container id and returns the
// function that ends its set-up. It refuses while the container is paused
// and waits while a pause or commit is under way.
func (gs *gates) enter(ctx context.Context, id string) (release func(), err error) {
	g, err := gs.wait(ctx, id, func(g *gate) bool { return g.paused || g.freezers == 0 })
	if err != nil {
		return nil, fmt.Errorf("container %s is being paused: %w", id, err)
	}
	defer gs.mu.Unlock()
	if g.paused {
		return nil, fmt.Errorf("container %s is paused: %w", id, runtime.ErrConflict)
	}
	g.users++
	var once sync.Once
	return func() {
		once.Do(func() {
			gs.mu.Lock()
			defer gs.mu.Unlock()
			g.users--
			g.notify()
		})
	}, nil
}

// freeze starts a pause or commit of container id: it stops new calls from
// starting, then waits until the calls being set up have finished. done
// ends it; paused tells whether the container is now paused.
func (gs *gates) freeze(ctx context.Context, id string) (done func(paused bool), err error) {
	gs.mu.Lock()
	g := gs.get(id)
	g.freezers++
	g.notify()
	gs.mu.Unlock()
	end := func(paused bool) {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		g.freezers--
		g.paused = g.paused || paused
		g.notify()
	}
	if _, err := gs.wait(ctx, id, func(g *gate) bool { return g.users == 0 }); err != nil {
		end(false)
		return nil, err
	}
	gs.mu.Unlock()
	var once sync.Once
	return func(paused bool) { once.Do(func() { end(paused) }) }, nil
}

// thawed records that container id is no longer paused.
func (gs *gates) thawed(id string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g := gs.m[id]; g != nil && g.paused {
		g.paused = false
		g.notify()
	}
}

// forget drops a removed container's gate.
func (gs *gates) forget(id string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	delete(gs.m, id)
}
