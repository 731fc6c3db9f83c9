// Package lifecycle owns sandbox state: creation, expiry and reaping,
// recovery after a restart, metadata, snapshots, pools and the way into a
// sandbox's agent, as services the Manager wires (see Manager). It speaks
// of sandboxes, not containers, and drives them only through
// runtime.Runtime and the optional capabilities a runtime may have.
package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/agent"
	"github.com/sandboxd/sandboxd/runtime/egress"
)

// Labels sandboxd puts on every sandbox container. The opensandbox.io/ ones
// are upstream's, so upstream tooling recognises the containers.
const (
	LabelID            = "opensandbox.io/id"
	LabelInstance      = "opensandbox.io/sandboxd-instance"
	LabelExpiresAt     = "opensandbox.io/expires-at"
	LabelManualCleanup = "opensandbox.io/manual-cleanup"
	LabelPlatformOS    = "opensandbox.io/platform-os"
	LabelPlatformArch  = "opensandbox.io/platform-arch"
	LabelSnapshotID    = "opensandbox.io/snapshot-id"
	LabelRenewExtend   = "opensandbox.io/access-renew-extend-seconds"
)

// Ports every SDK resolves right after create.
const (
	ExecdPort  = 44772
	EgressPort = 18080
)

// TokenHeader carries the per-sandbox access token on proxied requests; it
// is the header upstream execd uses for its access token.
const TokenHeader = "X-EXECD-ACCESS-TOKEN"

// Manager wires the lifecycle services over one runtime and store, and
// orders their life (life.go). Each service owns its state and lock:
//
//   - Sandboxes: create, inspect, pause, delete, tokens and the way in.
//   - Expiry: deadlines, activity and the reaper.
//   - Pools: warm pools and their fillers.
//   - Snapshots: snapshot records and commits.
//
// Egress policing (egress*.go) and file transfers (files.go, upload.go)
// are served by the Manager itself, on the services' methods; they are
// the places a further service plugs in. The services are embedded, so
// the api layer calls their methods on the Manager.
type Manager struct {
	*deps
	*Sandboxes
	*Expiry
	*Pools
	*Snapshots

	egress        egressLinks
	defaultPolicy *egress.Policy // [egress] default_policy
	// spooler holds uploads into a stopped sandbox; tests count its temp
	// files.
	spooler agent.Spooler
}

// deps is what every service holds: the runtime, the store, the clock,
// the logger, the operator's settings and the shared life.
type deps struct {
	cfg      config.Config
	defaults defaults
	rt       runtime.Runtime
	store    Store
	log      *slog.Logger
	instance string
	now      func() time.Time
	metrics  *Metrics
	life     *life
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
	m := &Manager{deps: d}
	m.Sandboxes = &Sandboxes{deps: d, tokenKey: key, egress: m}
	m.Expiry = &Expiry{deps: d, activity: map[string]time.Time{}, sandboxes: m.Sandboxes, afterSweep: m.sweepEgress}
	m.Pools = &Pools{deps: d, byName: map[string]*pool{}, sandboxes: m.Sandboxes, egress: m}
	m.Snapshots = &Snapshots{deps: d, sandboxes: m.Sandboxes}
	m.Sandboxes.deadlines, m.Sandboxes.warm = m.Expiry, m.Pools
	if err := m.initEgress(); err != nil {
		return nil, err
	}
	if err := m.initPools(); err != nil {
		return nil, err
	}
	return m, nil
}

// Engine is the runtime's name ("docker"), whose upper case prefixes the
// engine-scoped error codes on the wire (see WireCode).
func (m *Manager) Engine() string { return m.rt.Name() }

// Instance returns the instance id carried by this manager's containers.
func (m *Manager) Instance() string { return m.instance }

// newID returns a random UUID4 string.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func containerName(id string) string { return "sandbox-" + id }

// engineError turns a runtime failure into an API error.
func (m *deps) engineError(err error, what string) error {
	if _, ok := AsError(err); ok {
		return err
	}
	if errors.Is(err, runtime.ErrContainerTimeout) {
		// The engine answers, but is stuck on this one container:
		// other sandboxes work, so the engine is not "unreachable".
		return &Error{Kind: KindUnavailable, Code: CodeEngineTimeout, Message: "the " + m.engineTitle() + " engine did not answer in time (" + what + ") though it answers for the others; retry later", Err: err}
	}
	if errors.Is(err, runtime.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Kind: KindUnavailable, Code: CodeEngineUnavailable, Message: "the " + m.engineTitle() + " engine is unreachable (" + what + "); retry when it is back", Err: err}
	}
	return &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: what + " failed", Err: err}
}

// engineTitle is the runtime's name as a message says it ("Docker").
func (m *deps) engineTitle() string {
	n := m.rt.Name()
	if n == "" {
		return "container"
	}
	return strings.ToUpper(n[:1]) + n[1:]
}

// opError is the error of a failed engine operation: a 503 when the
// engine is unreachable, else code with the engine's reason.
func (m *deps) opError(err error, code, what string) error {
	if e, ok := AsError(m.engineError(err, what)); ok && e.Kind == KindUnavailable {
		return e
	}
	return &Error{Kind: KindInternal, Code: code, Message: fmt.Sprintf("%s: %v", what, err), Err: err}
}

func notFound(id string) error {
	return errf(KindNotFound, CodeSandboxNotFound, "sandbox %s not found", id)
}

// unsupported is the answer to a call the runtime has no capability for.
// It is upstream's SANDBOX::API_NOT_SUPPORTED, a 400 (reference §1.9).
func (m *deps) unsupported(what string) error {
	return errf(KindInvalid, CodeAPINotSupported, "%s not supported when runtime.type='%s'", what, m.rt.Name())
}

// ensureImage pulls an image where the runtime manages images; others
// fetch it on Create.
func (m *deps) ensureImage(ctx context.Context, ref string, auth *runtime.RegistryAuth, platform string, progress func(string)) error {
	if im, ok := m.rt.(runtime.Images); ok {
		return im.EnsureImage(ctx, ref, auth, platform, progress)
	}
	return nil
}
