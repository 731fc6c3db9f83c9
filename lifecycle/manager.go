// Package lifecycle owns sandbox state: creation, expiry and reaping,
// recovery after a restart, metadata, snapshots, pools, egress policies,
// file transfers and the way into a sandbox's agent. It speaks of
// sandboxes, not containers, and drives them only through runtime.Runtime
// and the optional capabilities a runtime may have.
//
// Each concern is a service that owns its state and lock, and depends on
// the services below it one way, through narrow interfaces or function
// values handed to it by New (docs/architecture.md draws them):
//
//   - Egress: egress helpers, their daemons and policies.
//   - Expiry: deadlines, activity and the reaper.
//   - Sandboxes: create, inspect, pause, delete, tokens and the way in.
//   - Pools: warm pools and their fillers.
//   - Snapshots: snapshot records and commits.
//   - Files: which way a sandbox's files move now, and the archive path.
//   - Sleep: sandboxes asleep (paused or stopped) when idle or expired, and
//     their wakes.
//   - Forks: fork tasks, a sandbox's filesystem snapshotted and sandboxes
//     made from it.
//
// The Manager only wires them and orders their life (life.go): start-up,
// reconcile and shutdown.
package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

// Manager wires the lifecycle services over one runtime and store, and
// orders their life. The api layer is handed the services, not the
// Manager.
type Manager struct {
	Sandboxes *Sandboxes
	Expiry    *Expiry
	Pools     *Pools
	Snapshots *Snapshots
	Egress    *Egress
	Files     *Files
	Forks     *Forks

	d *deps
}

// New returns a Manager. The instance id comes from the config or is made
// once and kept in the store, so restarts adopt the same containers.
func New(cfg config.Config, rt runtime.Runtime, store Store, log *slog.Logger) (*Manager, error) {
	instance := cfg.Lifecycle.InstanceID
	if instance == "" {
		v, err := store.InstanceID()
		if err != nil {
			return nil, err
		}
		instance = v
	}
	if cs, ok := store.(*clusterStore); ok {
		cs.pin(instance) // the records are listed by this manager's id
	}
	def := defaultsFrom(cfg)
	if _, err := ParseResources(nil, def.cpu, def.memory); err != nil {
		return nil, fmt.Errorf("config [docker] default_cpu/default_memory: %w", err)
	}
	key, err := store.Secret("token-key")
	if err != nil {
		return nil, err
	}
	d := &deps{
		cfg: cfg, defaults: def, rt: rt, store: store, log: slog.New(requestIDHandler{log.Handler()}), instance: instance,
		now: time.Now, metrics: newMetrics(), life: &life{phase: PhaseStarting, retry: reconcileRetry},
	}
	eg, err := newEgress(d)
	if err != nil {
		return nil, err
	}
	ex := &Expiry{deps: d, activity: map[string]time.Time{}, afterSweep: eg.sweep}
	sb := &Sandboxes{deps: d, tokenKey: key, deadlines: ex, egress: eg}
	ex.remove, ex.creating = sb.destroy, sb.creating
	ps := &Pools{deps: d, byName: map[string]*pool{}, plan: sb.plan, view: sb.view, egress: eg}
	sb.warm = ps
	sl := &Sleep{deps: d, sandboxes: sb, expiry: ex}
	sb.sleep, ex.idleSleep, ex.sleepAtExpiry = sl, sl.sweep, sl.atExpiry
	sn := &Snapshots{deps: d, ready: sb.ready}
	m := &Manager{
		Sandboxes: sb, Expiry: ex, Pools: ps, Egress: eg, d: d, Snapshots: sn,
		Files: &Files{deps: d, sandboxes: sb},
		Forks: &Forks{
			deps: d, source: sb.ready, create: sb.Create, remove: sb.Delete,
			validate: func(ctx context.Context, req CreateRequest) error { _, err := sb.plan(ctx, req); return err },
			take:     sn.take, dropSnapshot: sn.DeleteSnapshot,
		},
	}
	if err := ps.initPools(); err != nil {
		return nil, err
	}
	return m, nil
}

// Engine is the runtime's name ("docker"), whose upper case prefixes the
// engine-scoped error codes on the wire (see WireCode).
func (m *Manager) Engine() string { return m.d.rt.Name() }

// Instance returns the instance id carried by this manager's containers.
func (m *Manager) Instance() string { return m.d.instance }

// Metrics returns the lifecycle's counters.
func (m *Manager) Metrics() *Metrics { return m.d.metrics }
