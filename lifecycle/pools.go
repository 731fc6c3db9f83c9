package lifecycle

// Warm pools. A pool keeps a number of idle sandboxes created, started and
// with their agent running, all made from one spec. A create that names the
// pool (extensions.poolRef), or asks for exactly the container the pool
// makes, takes one of them, and the pool refills in the background.
//
// An idle member is a container labelled with its pool and the revision of
// the spec it was made from, and it has no record: Get, List, the reaper and
// the proxy do not see it. Claiming it writes its record (metadata and expiry
// from the request), which makes it an ordinary sandbox that no longer counts
// against the pool. After a restart Reconcile hands each record-less member
// to its pool, which adopts it if the pool still exists with the same
// revision and removes it otherwise.
//
// A pool may carry a networkPolicy (a sandboxd extension: upstream's pools
// have none). Its members are made as a policed create is: their egress
// helper runs and holds the policy before they count as ready, so a
// sandbox taken from the pool is policed from its first instruction.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/egress"
)

const (
	// maxPoolSize bounds a pool's buffer, against typos that would start
	// thousands of containers.
	maxPoolSize = 1024
	// poolFillParallel is how many members one pool creates at once.
	poolFillParallel = 2
	// poolCheckInterval is how often a pool checks that its idle members
	// still run.
	poolCheckInterval = 10 * time.Second
	// poolRetryMax caps the back-off after failed fills (image missing,
	// engine down).
	poolRetryMax = time.Minute
	// metaPools is the store key of the pools created through the API.
	metaPools = "pools"
)

// poolName is upstream's pool name pattern (a Kubernetes resource name).
var poolName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// PoolSpec is what a pool's sandboxes are made from.
type PoolSpec struct {
	Image string `json:"image"`
	// Entrypoint defaults to ["tail", "-f", "/dev/null"].
	Entrypoint     []string          `json:"entrypoint,omitempty"`
	ResourceLimits map[string]string `json:"resourceLimits,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	// NetworkPolicy is a create request's networkPolicy for every member;
	// nil: none (then [egress] default_policy applies, as to any create).
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
}

// PoolUpdate is a change of a pool: its capacity, and, if SetPolicy, its
// networkPolicy (nil: none).
type PoolUpdate struct {
	Capacity      PoolCapacity
	SetPolicy     bool
	NetworkPolicy *NetworkPolicy
}

// PoolCapacity is upstream's capacitySpec. sandboxd keeps
// min(BufferMax, PoolMax) idle sandboxes; BufferMin and PoolMin are
// checked and reported but change nothing, since a claimed sandbox leaves
// the pool.
type PoolCapacity struct {
	BufferMax int `json:"bufferMax"`
	BufferMin int `json:"bufferMin"`
	PoolMax   int `json:"poolMax"`
	PoolMin   int `json:"poolMin"`
}

// PoolStatus is a pool's observed state.
type PoolStatus struct {
	// Total is Allocated + Available + the members being created.
	Total int `json:"total"`
	// Allocated counts the live sandboxes that were claimed from the pool.
	Allocated int `json:"allocated"`
	// Available counts the idle members ready to be claimed.
	Available int    `json:"available"`
	Revision  string `json:"revision"`
}

// Pool is the API's view of a pool (upstream's PoolResponse).
type Pool struct {
	Name         string       `json:"name"`
	CapacitySpec PoolCapacity `json:"capacitySpec"`
	// NetworkPolicy is the policy its sandboxes get: the pool's own, else
	// [egress] default_policy; absent: none.
	NetworkPolicy *egress.Policy `json:"networkPolicy,omitempty"`
	Status        *PoolStatus    `json:"status,omitempty"`
	CreatedAt     time.Time      `json:"createdAt"`
}

// pool is one pool's definition and state. Fields from def on are guarded
// by Pools.mu.
type pool struct {
	name       string
	createdAt  time.Time
	configured bool // from the config file, so not persisted

	def      *poolDef // replaced whole when the policy changes
	capacity PoolCapacity
	idle     []poolMember // oldest first
	creating int
	removed  bool
	wake     chan struct{}
	stop     context.CancelFunc // nil until its filler runs
	done     chan struct{}
}

// poolDef is what a pool's members are made from, at one revision.
type poolDef struct {
	spec     PoolSpec
	tmpl     runtime.Spec // a member's container without name and labels
	key      string       // memberKey(tmpl, enforced)
	revision string
	policy   *egress.Policy // the members' policy, own or default (nil: none)
	enforced *egress.Policy // what their egress helpers enforce (nil: no helper)
}

type poolMember struct {
	id, cid string
	// policy is what the member's egress helper enforces (nil: it has
	// none); helper and upstreams go to its record when claimed.
	policy    *egress.Policy
	helper    string
	upstreams []string
}

// poolEgress is how pool members are policed (egress.go, egress_pool.go):
// made as a policed create is, and their daemons checked while idle.
type poolEgress interface {
	egressPlanner
	egressUp(id string) bool
	memberEgress(ctx context.Context, rec *Record, spec runtime.Spec) error
	reapplyPolicy(ctx context.Context, id string) (bool, error)
}

// target is how many idle members the pool keeps.
func (p *pool) target() int { return min(p.capacity.BufferMax, p.capacity.PoolMax) }

// kick wakes the pool's filler.
func (p *pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Pools is the service of warm pools: their definitions, idle members and
// fillers.
type Pools struct {
	*deps
	// plan validates a create request (a pool's spec is checked as one);
	// view is the API object of a claimed sandbox (Sandboxes).
	plan   func(ctx context.Context, req CreateRequest) (*createPlan, error)
	view   func(rec *Record, c *runtime.Container) *Sandbox
	egress poolEgress

	mu     sync.Mutex
	byName map[string]*pool
	ctx    context.Context // RunPools' context; nil until it runs
	wg     sync.WaitGroup
	saveMu sync.Mutex // orders writes of the persisted pools
}

type storedPool struct {
	Name      string       `json:"name"`
	Spec      PoolSpec     `json:"spec"`
	Capacity  PoolCapacity `json:"capacity"`
	CreatedAt time.Time    `json:"createdAt"`
}

// initPools defines the pools of the config file, then those created
// through the API before a restart. A bad config pool is an error; a stored
// pool that no longer validates is dropped with a log line.
func (ps *Pools) initPools() error {
	now := wireTime(ps.now())
	for i, c := range ps.cfg.Pools {
		spec := PoolSpec{Image: c.Image, Entrypoint: c.Entrypoint, ResourceLimits: c.ResourceLimits, Env: c.Env, NetworkPolicy: configPolicy(c.NetworkPolicy)}
		capacity := PoolCapacity{BufferMax: c.Size, BufferMin: c.Size, PoolMax: c.Size, PoolMin: c.Size}
		p, err := ps.newPool(c.Name, spec, capacity, now)
		if err != nil {
			return fmt.Errorf("config pool[%d] %q: %w", i, c.Name, err)
		}
		p.configured = true
		ps.byName[p.name] = p
	}
	raw, err := ps.store.MetaString(metaPools)
	if err != nil || raw == "" {
		return err
	}
	var stored []storedPool
	if err := json.Unmarshal([]byte(raw), &stored); err != nil {
		return fmt.Errorf("read stored pools: %w", err)
	}
	for _, s := range stored {
		if ps.byName[s.Name] != nil {
			ps.log.Warn("pool created through the API is now defined in the config file; the config wins", "pool", s.Name)
			continue
		}
		p, err := ps.newPool(s.Name, s.Spec, s.Capacity, s.CreatedAt)
		if err != nil {
			ps.log.Error("dropping stored pool that no longer validates", "pool", s.Name, "err", err)
			continue
		}
		ps.byName[p.name] = p
	}
	return nil
}

// newPool validates a pool.
func (ps *Pools) newPool(name string, spec PoolSpec, capacity PoolCapacity, created time.Time) (*pool, error) {
	if err := capacity.validate(); err != nil {
		return nil, err
	}
	def, err := ps.newDef(name, spec)
	if err != nil {
		return nil, err
	}
	return &pool{name: name, def: def, capacity: capacity, createdAt: created, wake: make(chan struct{}, 1)}, nil
}

// newDef validates a pool's spec. Its members are what a create request
// with the pool's image, entrypoint, resources, env and policy plans, so
// that such a request matches the pool exactly. The policy is checked as a
// create's, with its codes.
func (ps *Pools) newDef(name string, spec PoolSpec) (*poolDef, error) {
	spec.Image = strings.TrimSpace(spec.Image)
	if spec.Image == "" {
		return nil, errf(KindInvalid, CodePoolInvalid, "pool %s: an image is required", name)
	}
	if len(spec.Entrypoint) == 0 {
		spec.Entrypoint = []string{"tail", "-f", "/dev/null"}
	}
	policy, err := ps.egress.requestPolicy(spec.NetworkPolicy)
	if err != nil {
		return nil, err
	}
	plan, err := ps.plan(context.Background(), spec.request())
	if err != nil {
		e, ok := AsError(err)
		if !ok {
			return nil, err
		}
		return nil, errf(KindInvalid, CodePoolInvalid, "pool %s: %s", name, e.Message)
	}
	tmpl := plan.spec
	tmpl.Name, tmpl.Labels = "", nil
	key := memberKey(tmpl, plan.rec.NetworkPolicy)
	sum := sha256.Sum256([]byte(key))
	return &poolDef{
		spec: spec, tmpl: tmpl, key: key, revision: hex.EncodeToString(sum[:])[:12],
		policy: policy, enforced: plan.rec.NetworkPolicy,
	}, nil
}

// configPolicy is a [[pool]] network_policy as a create request's (unset:
// nil, as for [egress] default_policy).
func configPolicy(c config.EgressPolicy) *NetworkPolicy {
	if c.DefaultAction == "" && len(c.Egress) == 0 {
		return nil
	}
	np := &NetworkPolicy{DefaultAction: c.DefaultAction}
	for _, r := range c.Egress {
		raw, _ := json.Marshal(egress.Rule{Action: r.Action, Target: r.Target})
		np.Egress = append(np.Egress, raw)
	}
	return np
}

// request is the create request a pool's members answer.
func (s PoolSpec) request() CreateRequest {
	env := make(map[string]*string, len(s.Env))
	for k, v := range s.Env {
		env[k] = &v
	}
	return CreateRequest{
		Image: &ImageSpec{URI: s.Image}, Entrypoint: slices.Clone(s.Entrypoint),
		ResourceLimits: maps.Clone(s.ResourceLimits), Env: env, NetworkPolicy: s.NetworkPolicy,
	}
}

func (c PoolCapacity) validate() error {
	invalid := func(format string, args ...any) error { return errf(KindInvalid, CodePoolInvalid, format, args...) }
	switch {
	case c.BufferMax < 0 || c.BufferMin < 0 || c.PoolMax < 0 || c.PoolMin < 0:
		return invalid("capacitySpec values must not be negative")
	case c.BufferMin > c.BufferMax:
		return invalid("capacitySpec.bufferMin (%d) exceeds bufferMax (%d)", c.BufferMin, c.BufferMax)
	case c.PoolMin > c.PoolMax:
		return invalid("capacitySpec.poolMin (%d) exceeds poolMax (%d)", c.PoolMin, c.PoolMax)
	case c.BufferMax > maxPoolSize || c.PoolMax > maxPoolSize:
		return invalid("capacitySpec.bufferMax and poolMax are at most %d", maxPoolSize)
	}
	return nil
}

// memberKey identifies what a plan makes apart from names and labels: its
// container and the policy its egress helper enforces (nil: no helper).
// Two plans with the same key make interchangeable sandboxes.
func memberKey(s runtime.Spec, enforced *egress.Policy) string {
	s.Name, s.Labels = "", nil
	buf, _ := json.Marshal(struct { // structs of strings, numbers, slices and maps
		Spec   runtime.Spec
		Policy *egress.Policy `json:",omitempty"`
	}{s, enforced})
	return string(buf)
}

// applyPoolRef turns a create naming a pool into a request for the pool's
// spec. As in upstream's pool mode, image, entrypoint, resourceLimits and env
// come from the pool (the request's are ignored: SDKs always send defaults),
// and what a container made in advance cannot honour is refused. It returns
// the pool's name, or "" without a poolRef.
func (ps *Pools) applyPoolRef(req *CreateRequest) (string, error) {
	ref, ok := req.Extensions[ExtPoolRef]
	if !ok {
		return "", nil
	}
	ref = strings.TrimSpace(ref)
	ps.mu.Lock()
	var def *poolDef
	if p := ps.byName[ref]; p != nil {
		def = p.def
	}
	ps.mu.Unlock()
	if def == nil {
		return "", errf(KindInvalid, CodeUnsupportedPoolRef, "extensions.poolRef %q: no such pool", ref)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"snapshotId", strings.TrimSpace(req.SnapshotID) != ""}, {"networkPolicy", req.NetworkPolicy != nil},
		{"platform", req.Platform != nil}, {"volumes", len(req.Volumes) > 0},
	} {
		if f.set {
			return "", errf(KindInvalid, CodeInvalidParameter, "%s cannot be combined with extensions.poolRef: the pool's sandboxes are made in advance", f.name)
		}
	}
	pr := def.spec.request()
	req.Image, req.Entrypoint, req.ResourceLimits, req.Env, req.NetworkPolicy = pr.Image, pr.Entrypoint, pr.ResourceLimits, pr.Env, pr.NetworkPolicy
	return ref, nil
}

// assignPool sets the pool a plan is served from: the one it named, else
// the first (by name) whose members are exactly the container it plans.
func (ps *Pools) assignPool(ref string, p *createPlan) {
	if ref == "" {
		key := memberKey(p.spec, p.rec.NetworkPolicy)
		ps.mu.Lock()
		for _, name := range slices.Sorted(maps.Keys(ps.byName)) {
			if ps.byName[name].def.key == key {
				ref = name
				break
			}
		}
		ps.mu.Unlock()
	}
	p.fromPool = ref
	p.rec.Pool = ref
}

// claim serves a plan from its pool. It returns nil (and the caller creates
// the sandbox cold) when the plan names no pool, its pool has no idle
// member, or the plan asks for another container than the pool makes.
func (ps *Pools) claim(ctx context.Context, p *createPlan) (*Sandbox, error) {
	if p.fromPool == "" {
		return nil, nil
	}
	key := memberKey(p.spec, p.rec.NetworkPolicy)
	for {
		mem, ok := ps.take(p.fromPool, key)
		if !ok {
			return nil, nil
		}
		start := ps.now()
		rec := p.rec
		rec.ID, rec.ContainerID, rec.State = mem.id, mem.cid, recordReady
		rec.EgressHelper, rec.EgressUpstreams = mem.helper, mem.upstreams
		// A cached session answers without a Docker call; a member that
		// died since the last check fails here and is replaced, as one
		// whose egress daemon cannot be brought back.
		_, err := ps.rt.Agent(ctx, mem.cid)
		if err == nil {
			err = ps.egress.memberEgress(ctx, &rec, p.spec)
		}
		if err != nil {
			ps.log.WarnContext(ctx, "pool member unusable; trying the next", "pool", p.fromPool, "sandbox_id", mem.id, "err", err)
			ps.removeMember(ctx, mem)
			continue
		}
		if err := ps.store.PutSandbox(&rec); err != nil {
			ps.removeMember(ctx, mem)
			return nil, &Error{Kind: KindInternal, Code: CodeStartFailed, Message: "record sandbox", Err: err}
		}
		if rec.NetworkPolicy != nil && !ps.egress.egressUp(rec.ID) {
			// Its daemon died before the record was there for its watcher
			// to restore it from: the firewall held meanwhile.
			if _, err := ps.egress.reapplyPolicy(ctx, rec.ID); err != nil {
				ps.log.WarnContext(ctx, "re-apply egress policy", "sandbox_id", rec.ID, "err", err)
			}
		}
		ps.metrics.Creates.Add(1)
		ps.metrics.CreateSeconds.Observe(ps.now().Sub(start))
		ps.log.InfoContext(ctx, "sandbox created from pool", "sandbox_id", rec.ID, "pool", p.fromPool, "container", runtime.ShortID(mem.cid))
		sb := ps.view(&rec, nil)
		sb.Status = Status{State: "Running", Reason: "CONTAINER_RUNNING", Message: "Sandbox container started successfully.", LastTransitionAt: rec.CreatedAt}
		return sb, nil
	}
}

// take hands out the oldest idle member of pool name if its members match
// key, and wakes the pool's filler.
func (ps *Pools) take(name, key string) (poolMember, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.byName[name]
	if p == nil || p.def.key != key || len(p.idle) == 0 {
		return poolMember{}, false
	}
	mem := p.idle[0]
	p.idle = p.idle[1:]
	p.kick()
	return mem, true
}

// removeMember removes a member's container (by id, or found by its
// labels when its creation failed before an id was known) and its egress
// helper.
func (ps *Pools) removeMember(ctx context.Context, mem poolMember) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var err error
	if mem.cid == "" {
		err = ps.removeLabelled(ctx, map[string]string{LabelID: mem.id, LabelInstance: ps.instance})
	} else if err = ps.rt.Remove(ctx, mem.cid); errors.Is(err, runtime.ErrNotFound) {
		err = nil
	}
	if err != nil {
		ps.log.Error("remove pool member", "sandbox_id", mem.id, "container", mem.cid, "err", err)
	}
	if err := ps.egress.removeEgress(ctx, &Record{ID: mem.id, NetworkPolicy: mem.policy}); err != nil {
		ps.log.Error("remove pool member's egress helper", "sandbox_id", mem.id, "err", err)
	}
}

// Adopt handles a container found at start without a record. It
// reports false if the container is no pool member; a member whose pool is
// gone, changed or full is removed.
func (ps *Pools) Adopt(ctx context.Context, c runtime.Container) bool {
	name := c.Labels[LabelPool]
	if name == "" {
		return false
	}
	ps.mu.Lock()
	p := ps.byName[name]
	keep := p != nil && c.State == runtime.StateRunning && c.Labels[LabelPoolRevision] == p.def.revision &&
		len(p.idle)+p.creating < p.target()
	if keep && !slices.ContainsFunc(p.idle, func(mem poolMember) bool { return mem.cid == c.ID }) {
		// Its egress daemon ended with the previous process: the next
		// check or claim starts it again (memberEgress).
		p.idle = append(p.idle, poolMember{id: c.Labels[LabelID], cid: c.ID, policy: p.def.enforced})
	}
	ps.mu.Unlock()
	if keep {
		ps.log.Info("adopted pool member", "pool", name, "sandbox_id", c.Labels[LabelID])
		return true
	}
	// Its egress helper, if any, goes with the helpers of gone sandboxes
	// (restoreEgress).
	ps.log.Info("removing stale pool member", "pool", name, "sandbox_id", c.Labels[LabelID], "container", runtime.ShortID(c.ID))
	ps.removeMember(ctx, poolMember{id: c.Labels[LabelID], cid: c.ID})
	return true
}

// RunPools fills the pools and keeps them filled until ctx ends. Run it
// after Reconcile, which adopts the members left by an earlier run.
func (ps *Pools) RunPools(ctx context.Context) {
	ps.mu.Lock()
	ps.ctx = ctx
	for _, p := range ps.byName {
		ps.startFiller(p)
	}
	ps.mu.Unlock()
	<-ctx.Done()
	ps.wg.Wait()
}

// startFiller starts p's filler if RunPools runs; the caller holds Pools.mu.
func (ps *Pools) startFiller(p *pool) {
	if ps.ctx == nil || ps.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(ps.ctx)
	p.stop, p.done = cancel, make(chan struct{})
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		defer close(p.done)
		ps.fill(ctx, p)
	}()
}

// fill keeps p at its target until ctx ends: it creates the missing members
// a few at a time, backs off after failures, and checks the idle ones.
func (ps *Pools) fill(ctx context.Context, p *pool) {
	ps.checkPool(ctx, p)
	check := time.NewTicker(poolCheckInterval)
	defer check.Stop()
	var retry time.Duration
	for {
		if n := ps.reserve(p); n > 0 {
			errs := make(chan error, n)
			for range n {
				go func() { errs <- ps.addMember(ctx, p) }()
			}
			var failed error
			for range n {
				if err := <-errs; err != nil {
					failed = err
				}
			}
			if failed == nil {
				retry = 0
				continue
			}
			retry = min(max(2*retry, time.Second), poolRetryMax)
			if ctx.Err() == nil {
				ps.log.Warn("pool fill failed; retrying", "pool", p.name, "in", retry, "err", failed)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-check.C:
			ps.checkPool(ctx, p)
		}
	}
}

// reserve counts up to poolFillParallel members of p as being created and
// returns how many.
func (ps *Pools) reserve(p *pool) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p.removed {
		return 0
	}
	n := min(p.target()-len(p.idle)-p.creating, poolFillParallel)
	if n < 0 {
		return 0
	}
	p.creating += n
	return n
}

// addMember makes one member of p: create, start, start the agent and wait
// for its answer. A member no longer wanted when it is ready (the pool was
// deleted or shrunk meanwhile) is removed.
func (ps *Pools) addMember(ctx context.Context, p *pool) error {
	ps.mu.Lock()
	def := p.def
	ps.mu.Unlock()
	mem, err := ps.makeMember(ctx, p.name, def)
	ps.mu.Lock()
	p.creating--
	wanted := err == nil && !p.removed && p.def.revision == def.revision && len(p.idle)+p.creating < p.target()
	if wanted {
		p.idle = append(p.idle, mem)
	}
	ps.mu.Unlock()
	if err == nil && !wanted {
		ps.removeMember(ctx, mem)
	}
	return err
}

// makeMember makes a member of pool name from def. A policed member is
// made as a policed create is: it gets its network only once its helper
// holds the firewall, and it is ready only once the policy is in force.
func (ps *Pools) makeMember(ctx context.Context, name string, def *poolDef) (mem poolMember, err error) {
	mem.id, mem.policy = newID(), def.enforced
	spec := def.tmpl
	spec.Name = containerName(mem.id)
	spec.Labels = map[string]string{LabelID: mem.id, LabelInstance: ps.instance, LabelPool: name, LabelPoolRevision: def.revision}
	defer func() {
		if err != nil {
			ps.removeMember(ctx, mem)
		}
	}()
	if err := ps.ensureImage(ctx, spec.Image, nil, "", nil); err != nil {
		return mem, fmt.Errorf("image %s: %w", spec.Image, err)
	}
	plan := &createPlan{rec: Record{ID: mem.id, NetworkPolicy: def.enforced}, spec: spec}
	detach := ps.egress.prepareEgress(ctx, plan)
	if mem.cid, err = ps.rt.Create(ctx, spec); err != nil {
		_ = detach("") // its helper must exist before the failure removes it
		return mem, err
	}
	plan.rec.ContainerID = mem.cid
	if err := detach(mem.cid); err != nil {
		return mem, err
	}
	if err := ps.rt.Start(ctx, mem.cid); err != nil {
		return mem, err
	}
	waitEgress := ps.egress.startEgress(ctx, plan)
	if err := errors.Join(ps.pingAgent(ctx, mem.cid), waitEgress()); err != nil {
		return mem, err
	}
	mem.helper, mem.upstreams = plan.rec.EgressHelper, plan.rec.EgressUpstreams
	return mem, nil
}

// checkPool drops the idle members whose container stopped or vanished,
// and makes sure the others' agents and egress daemons run (members
// adopted after a restart have none yet).
func (ps *Pools) checkPool(ctx context.Context, p *pool) {
	ps.mu.Lock()
	idle, spec := slices.Clone(p.idle), p.def.tmpl
	ps.mu.Unlock()
	if len(idle) == 0 {
		return
	}
	conts, err := ps.rt.List(ctx, map[string]string{LabelInstance: ps.instance, LabelPool: p.name})
	if err != nil {
		return // the next check retries
	}
	running := map[string]bool{}
	for _, c := range conts {
		running[c.ID] = c.State == runtime.StateRunning
	}
	var dead []poolMember
	for _, mem := range idle {
		rec := Record{ID: mem.id, ContainerID: mem.cid, NetworkPolicy: mem.policy, EgressUpstreams: mem.upstreams}
		if !running[mem.cid] || ps.pingAgent(ctx, mem.cid) != nil || ps.egress.memberEgress(ctx, &rec, spec) != nil {
			dead = append(dead, mem)
		}
	}
	if len(dead) == 0 || ctx.Err() != nil {
		return
	}
	// Only those still idle: one claimed meanwhile is the claim's to check.
	var gone []poolMember
	ps.mu.Lock()
	p.idle = slices.DeleteFunc(p.idle, func(mem poolMember) bool {
		if slices.ContainsFunc(dead, func(d poolMember) bool { return d.cid == mem.cid }) {
			gone = append(gone, mem)
			return true
		}
		return false
	})
	ps.mu.Unlock()
	for _, mem := range gone {
		ps.log.Warn("pool member stopped; replacing it", "pool", p.name, "container", runtime.ShortID(mem.cid))
		ps.removeMember(ctx, mem)
	}
	p.kick()
}

// CreatePool defines a pool through the API; it fills in the background.
func (ps *Pools) CreatePool(ctx context.Context, name string, spec PoolSpec, capacity PoolCapacity) (*Pool, error) {
	if !poolName.MatchString(name) || len(name) > 253 {
		return nil, errf(KindInvalid, CodePoolInvalid, "pool name %q must be lowercase alphanumerics and '-' (a Kubernetes resource name)", name)
	}
	p, err := ps.newPool(name, spec, capacity, wireTime(ps.now()))
	if err != nil {
		return nil, err
	}
	// What the log says is read before p is shared: an update may
	// replace it under Pools.mu as soon as p is in byName.
	image, size, policed := p.def.spec.Image, p.target(), p.def.policy != nil
	ps.mu.Lock()
	if ps.byName[name] != nil {
		ps.mu.Unlock()
		return nil, errf(KindConflict, CodePoolExists, "pool %s already exists", name)
	}
	ps.byName[name] = p
	ps.startFiller(p)
	ps.mu.Unlock()
	if err := ps.savePools(); err != nil {
		return nil, err
	}
	ps.log.Info("pool created", "pool", name, "image", image, "size", size, "policed", policed)
	return ps.GetPool(ctx, name)
}

// ListPools returns every pool, by name.
func (ps *Pools) ListPools(ctx context.Context) ([]*Pool, error) {
	allocated, err := ps.allocated()
	if err != nil {
		return nil, err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]*Pool, 0, len(ps.byName))
	for _, name := range slices.Sorted(maps.Keys(ps.byName)) {
		out = append(out, ps.byName[name].view(allocated[name]))
	}
	return out, nil
}

// GetPool returns one pool.
func (ps *Pools) GetPool(ctx context.Context, name string) (*Pool, error) {
	allocated, err := ps.allocated()
	if err != nil {
		return nil, err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.byName[name]
	if p == nil {
		return nil, poolNotFound(name)
	}
	return p.view(allocated[name]), nil
}

// UpdatePool changes a pool's capacity, and its policy if u says so: idle
// members beyond the new target, or made with the old policy, are removed
// before it returns, and the pool refills. A pool of the config file
// changes until the next restart.
func (ps *Pools) UpdatePool(ctx context.Context, name string, u PoolUpdate) (*Pool, error) {
	if err := u.Capacity.validate(); err != nil {
		return nil, err
	}
	ps.mu.Lock()
	p := ps.byName[name]
	var spec PoolSpec
	if p != nil {
		spec = p.def.spec
	}
	ps.mu.Unlock()
	if p == nil {
		return nil, poolNotFound(name)
	}
	var def *poolDef
	if u.SetPolicy {
		spec.NetworkPolicy = u.NetworkPolicy
		var err error
		if def, err = ps.newDef(name, spec); err != nil {
			return nil, err
		}
	}
	ps.mu.Lock()
	if ps.byName[name] != p {
		ps.mu.Unlock()
		return nil, poolNotFound(name) // deleted meanwhile
	}
	p.capacity = u.Capacity
	var stale []poolMember
	if def != nil && def.revision != p.def.revision {
		// Members in creation see the new def and remove themselves.
		stale, p.idle = p.idle, nil
	}
	if def != nil {
		p.def = def
	}
	if n := len(p.idle) - p.target(); n > 0 {
		stale = append(stale, p.idle[len(p.idle)-n:]...)
		p.idle = slices.Clone(p.idle[:len(p.idle)-n])
	}
	p.kick()
	size := p.target()
	ps.mu.Unlock()
	ps.removeMembers(ctx, stale)
	if err := ps.savePools(); err != nil {
		return nil, err
	}
	ps.log.Info("pool updated", "pool", name, "size", size, "removed", len(stale), "policy_set", u.SetPolicy)
	return ps.GetPool(ctx, name)
}

// DeletePool removes a pool and its idle members; sandboxes already claimed
// from it live on.
func (ps *Pools) DeletePool(ctx context.Context, name string) error {
	ps.mu.Lock()
	p := ps.byName[name]
	if p == nil {
		ps.mu.Unlock()
		return poolNotFound(name)
	}
	delete(ps.byName, name)
	p.removed = true
	idle := p.idle
	p.idle = nil
	stop, done := p.stop, p.done
	ps.mu.Unlock()
	if stop != nil {
		// Members in creation see the pool removed and remove themselves.
		stop()
		<-done
	}
	ps.removeMembers(ctx, idle)
	if err := ps.savePools(); err != nil {
		return err
	}
	ps.log.Info("pool deleted", "pool", name, "removed", len(idle))
	return nil
}

func (ps *Pools) removeMembers(ctx context.Context, members []poolMember) {
	var wg sync.WaitGroup
	for _, mem := range members {
		wg.Go(func() { ps.removeMember(ctx, mem) })
	}
	wg.Wait()
}

func poolNotFound(name string) error {
	return errf(KindNotFound, CodePoolNotFound, "pool %s not found", name)
}

// view is the API object of p; the caller holds Pools.mu.
func (p *pool) view(allocated int) *Pool {
	return &Pool{
		Name: p.name, CapacitySpec: p.capacity, CreatedAt: p.createdAt, NetworkPolicy: p.def.policy,
		Status: &PoolStatus{
			Total: allocated + len(p.idle) + p.creating, Allocated: allocated,
			Available: len(p.idle), Revision: p.def.revision,
		},
	}
}

// allocated counts the live sandboxes claimed from each pool.
func (ps *Pools) allocated() (map[string]int, error) {
	recs, err := ps.store.Sandboxes()
	if err != nil {
		return nil, &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "read sandbox records", Err: err}
	}
	n := map[string]int{}
	for _, r := range recs {
		if r.Pool != "" {
			n[r.Pool]++
		}
	}
	return n, nil
}

// savePools persists the pools created through the API.
func (ps *Pools) savePools() error {
	ps.saveMu.Lock()
	defer ps.saveMu.Unlock()
	ps.mu.Lock()
	var stored []storedPool
	for _, p := range ps.byName {
		if !p.configured {
			stored = append(stored, storedPool{Name: p.name, Spec: p.def.spec, Capacity: p.capacity, CreatedAt: p.createdAt})
		}
	}
	ps.mu.Unlock()
	sort.Slice(stored, func(i, j int) bool { return stored[i].Name < stored[j].Name })
	buf, err := json.Marshal(stored)
	if err == nil {
		err = ps.store.SetMetaString(metaPools, string(buf))
	}
	if err != nil {
		return &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "persist pools", Err: err}
	}
	return nil
}

// IdleIDs returns the sandbox ids of every idle member.
func (ps *Pools) IdleIDs() map[string]bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ids := map[string]bool{}
	for _, p := range ps.byName {
		for _, mem := range p.idle {
			ids[mem.id] = true
		}
	}
	return ids
}
