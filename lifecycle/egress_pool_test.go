package lifecycle

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/egress"
)

// policedPoolEnv is a poolEnv over a runtime with egress helpers.
func policedPoolEnv(t *testing.T) (*testEnv, *egressFake) {
	t.Helper()
	e := poolEnv(t)
	f := &egressFake{Runtime: e.rt}
	e.m.d.rt = f
	return e, f
}

// restart makes a new Manager over e's store and rt with e.cfg, as a
// restart of sandboxd does, and reconciles it.
func (e *testEnv) restart(t *testing.T, rt runtime.Runtime) *Manager {
	t.Helper()
	m, err := New(e.cfg, rt, e.store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.d.now = e.clock.Now
	if err := m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.m = m
	return m
}

// filledPolicedPool is a policedPoolEnv with pool "pol" of 2 members
// allowing pypi.org, filled.
func filledPolicedPool(t *testing.T) (*testEnv, *egressFake) {
	t.Helper()
	e, f := policedPoolEnv(t)
	spec := PoolSpec{Image: "busybox:latest", NetworkPolicy: allowOnly("pypi.org")}
	if _, err := e.m.Pools.CreatePool(context.Background(), "pol", spec, PoolCapacity{BufferMax: 2, PoolMax: 2}); err != nil {
		t.Fatal(err)
	}
	e.fillPool(t, "pol")
	return e, f
}

func allowOnly(target string) *NetworkPolicy {
	return &NetworkPolicy{DefaultAction: "deny", Egress: []json.RawMessage{json.RawMessage(`{"action":"allow","target":"` + target + `"}`)}}
}

// helperOf returns the egress helper of sandbox id, if it has one.
func helperOf(t *testing.T, rt runtime.Runtime, id string) (runtime.Container, bool) {
	t.Helper()
	c, err := rt.Inspect(context.Background(), egressName(id))
	return c, err == nil
}

func (e *testEnv) idle(name string) []poolMember {
	e.m.Pools.mu.Lock()
	defer e.m.Pools.mu.Unlock()
	return slices.Clone(e.m.Pools.byName[name].idle)
}

func poolRefRequest(pool string) CreateRequest {
	req := validRequest()
	req.Extensions = map[string]string{ExtPoolRef: pool}
	return req
}

// TestPoolPolicyMembers: the members of a pool with a policy are policed
// before they are ready; a sandbox taken from it is policed with nothing
// left to do, and its policy is read and changed through /policy.
func TestPoolPolicyMembers(t *testing.T) {
	e, f := policedPoolEnv(t)
	ctx := context.Background()
	p, err := e.m.Pools.CreatePool(ctx, "pol", PoolSpec{Image: "busybox:latest", NetworkPolicy: allowOnly("PyPI.org")}, PoolCapacity{BufferMax: 2, PoolMax: 2})
	if err != nil {
		t.Fatal(err)
	}
	if p.NetworkPolicy == nil || p.NetworkPolicy.DefaultAction != egress.Deny || p.NetworkPolicy.Egress[0].Target != "pypi.org" {
		t.Errorf("CreatePool shows policy %+v", p.NetworkPolicy)
	}
	e.fillPool(t, "pol")
	members := e.members(t, "pol")
	starts, pushed := f.state()
	if len(members) != 2 || starts != 2 || len(pushed) != 2 || pushed[0].Egress[0].Target != "pypi.org" {
		t.Fatalf("filled pool: %d members, %d daemons, pushed %+v; want 2, 2 and the policy", len(members), starts, pushed)
	}
	for _, mem := range e.idle("pol") {
		h, ok := helperOf(t, e.rt, mem.id)
		if !ok || e.rt.Spec(t, h.ID).Network != (runtime.Network{Mode: runtime.NetworkJoin, Name: containerName(mem.id)}) {
			t.Errorf("member %s: no helper in its namespace", mem.id)
		}
		f.mu.Lock()
		attachedAt, ok := f.attached[mem.cid]
		detached := slices.Contains(f.detached, mem.cid)
		f.mu.Unlock()
		if !detached || !ok || attachedAt == 0 {
			t.Errorf("member %s: detached %v, attached after %d guards (ok %v)", mem.id, detached, attachedAt, ok)
		}
		if caps := e.rt.Spec(t, mem.cid).Capabilities; !slices.Contains(caps.Drop, "NET_RAW") {
			t.Errorf("member %s keeps NET_RAW: %+v", mem.id, caps)
		}
	}

	sb, cid := e.create(t, poolRefRequest("pol"))
	if !slices.Contains(members, cid) {
		t.Fatalf("claimed %s, not one of the members %v", cid, members)
	}
	if s, pu := f.state(); s != starts || len(pu) != len(pushed) {
		t.Errorf("the claim started %d daemons and pushed %d policies: the member was not policed in advance", s-starts, len(pu)-len(pushed))
	}
	rec, _ := e.store.Sandbox(sb.ID)
	if rec.Pool != "pol" || rec.NetworkPolicy == nil || rec.NetworkPolicy.Egress[0].Target != "pypi.org" ||
		!slices.Equal(rec.EgressUpstreams, []string{"192.0.2.53:53"}) || rec.EgressHelper == "" {
		t.Errorf("claimed record: pool %q policy %+v upstreams %v helper %q", rec.Pool, rec.NetworkPolicy, rec.EgressUpstreams, rec.EgressHelper)
	}
	if pol, err := e.m.Egress.Policy(sb.ID); err != nil || len(pol.Egress) != 1 || pol.Egress[0].Target != "pypi.org" {
		t.Errorf("GET /policy of a claimed sandbox: %+v %v", pol, err)
	}
	_, err = e.m.Egress.ChangePolicy(t.Context(), sb.ID, PolicyPatch, bodyOf(`[{"action":"allow","target":"b.com"}]`))
	if _, pu := f.state(); err != nil || len(pu) != len(pushed)+1 || len(pu[len(pu)-1].Egress) != 2 {
		t.Errorf("PATCH /policy of a claimed sandbox: %v, pushed %+v", err, pu)
	}

	// Without poolRef: the same spec with the same policy is served from
	// the pool, without it cold.
	e.fillPool(t, "pol")
	members = e.members(t, "pol")
	req := validRequest()
	req.NetworkPolicy = allowOnly("pypi.org")
	if _, cid := e.create(t, req); !slices.Contains(members, cid) {
		t.Errorf("a create with the pool's spec and policy was not served from it")
	}
	if _, cid := e.create(t, validRequest()); slices.Contains(members, cid) {
		t.Errorf("a create without the policy was served from the policed pool")
	}

	// Deleting the pool removes the idle members' helpers, not the claimed'.
	idle := e.idle("pol")
	if err := e.m.Pools.DeletePool(ctx, "pol"); err != nil {
		t.Fatal(err)
	}
	for _, mem := range idle {
		if _, ok := helperOf(t, e.rt, mem.id); ok {
			t.Errorf("idle member %s's helper survived the pool", mem.id)
		}
	}
	if _, ok := helperOf(t, e.rt, sb.ID); !ok {
		t.Errorf("the claimed sandbox lost its helper with the pool")
	}
}

// TestPoolPolicyIdleDaemon: an idle member whose daemon died gets it back
// at the next check; one whose helper is gone is replaced, helper and all.
func TestPoolPolicyIdleDaemon(t *testing.T) {
	e, f := filledPolicedPool(t)
	ctx := context.Background()
	idle := e.idle("pol")
	f.mu.Lock()
	close(f.sessions[0].done)
	close(f.sessions[1].done)
	f.mu.Unlock()
	h, err := e.rt.Inspect(ctx, egressName(idle[1].id))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Remove(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	e.m.Pools.mu.Lock()
	p := e.m.Pools.byName["pol"]
	e.m.Pools.mu.Unlock()
	e.m.Pools.checkPool(ctx, p)
	if got := e.idle("pol"); len(got) != 1 || got[0].id != idle[0].id {
		t.Fatalf("after the check: idle %v, want only %s", got, idle[0].id)
	}
	if !e.m.Egress.egressUp(idle[0].id) {
		t.Errorf("the member whose daemon died has none after the check")
	}
	if e.rt.Exists(idle[1].cid) {
		t.Errorf("the member whose helper was gone was kept")
	}
	if _, ok := helperOf(t, e.rt, idle[1].id); ok {
		t.Errorf("a helper of the removed member is left")
	}
}

// TestPoolPolicyRestart: after a restart of sandboxd idle members keep
// their helpers and firewall; their daemon is started again before one is
// handed out.
func TestPoolPolicyRestart(t *testing.T) {
	e, f := filledPolicedPool(t)
	ctx := context.Background()
	before := e.members(t, "pol")
	idle := e.idle("pol")
	m := e.restart(t, f)
	if got := e.members(t, "pol"); !slices.Equal(got, before) {
		t.Fatalf("members after restart %v, want the adopted %v", got, before)
	}
	for _, mem := range idle {
		if _, ok := helperOf(t, e.rt, mem.id); !ok {
			t.Errorf("adopted member %s lost its helper", mem.id)
		}
	}
	p, err := m.Pools.GetPool(ctx, "pol")
	if err != nil || p.NetworkPolicy == nil || p.NetworkPolicy.Egress[0].Target != "pypi.org" {
		t.Fatalf("stored pool after restart: %+v, %v", p, err)
	}
	starts, pushed := f.state()
	sb, err := m.Sandboxes.Create(ctx, poolRefRequest("pol"))
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := e.store.Sandbox(sb.ID)
	if !slices.Contains(before, rec.ContainerID) {
		t.Fatalf("claimed %s, not an adopted member", rec.ContainerID)
	}
	if s, pu := f.state(); s != starts+1 || len(pu) != len(pushed)+1 || !m.Egress.egressUp(sb.ID) {
		t.Errorf("claim of an adopted member: %d daemon starts, %d pushes; want 1 and 1", s-starts, len(pu)-len(pushed))
	}
	if !slices.Equal(rec.EgressUpstreams, []string{"192.0.2.53:53"}) {
		t.Errorf("claimed record has upstreams %v", rec.EgressUpstreams)
	}
}

// TestPoolPolicyUpdate: changing a pool's policy replaces its idle
// members, persists, and can remove the policy.
func TestPoolPolicyUpdate(t *testing.T) {
	e, f := filledPolicedPool(t)
	ctx := context.Background()
	capacity := PoolCapacity{BufferMax: 2, PoolMax: 2}
	created, err := e.m.Pools.GetPool(ctx, "pol")
	if err != nil {
		t.Fatal(err)
	}
	old := e.idle("pol")

	_, err = e.m.Pools.UpdatePool(ctx, "pol", PoolUpdate{Capacity: capacity, SetPolicy: true, NetworkPolicy: &NetworkPolicy{DefaultAction: "block"}})
	wantCode(t, err, KindInvalid, CodeInvalidParameter)
	if got := e.idle("pol"); len(got) != 2 {
		t.Errorf("a refused update removed members: %d idle", len(got))
	}

	p, err := e.m.Pools.UpdatePool(ctx, "pol", PoolUpdate{Capacity: capacity, SetPolicy: true, NetworkPolicy: allowOnly("npmjs.org")})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Revision == created.Status.Revision || p.Status.Available != 0 || p.NetworkPolicy.Egress[0].Target != "npmjs.org" {
		t.Errorf("after the change: %+v policy %+v", p.Status, p.NetworkPolicy)
	}
	for _, mem := range old {
		if e.rt.Exists(mem.cid) {
			t.Errorf("member %s with the old policy was kept", mem.id)
		}
		if _, ok := helperOf(t, e.rt, mem.id); ok {
			t.Errorf("member %s's helper was kept", mem.id)
		}
	}
	e.fillPool(t, "pol")
	if _, pushed := f.state(); len(pushed) != 4 || pushed[3].Egress[0].Target != "npmjs.org" {
		t.Errorf("new members got %+v", pushed)
	}
	sb, _ := e.create(t, poolRefRequest("pol"))
	if rec, _ := e.store.Sandbox(sb.ID); rec.NetworkPolicy.Egress[0].Target != "npmjs.org" {
		t.Errorf("a sandbox taken after the change has %+v", rec.NetworkPolicy)
	}
	// Capacity alone keeps the policy; the policy survives a restart.
	if p, err = e.m.Pools.UpdatePool(ctx, "pol", PoolUpdate{Capacity: PoolCapacity{BufferMax: 1, PoolMax: 1}}); err != nil || p.NetworkPolicy == nil {
		t.Fatalf("resize: %+v, %v", p, err)
	}
	m := e.restart(t, f)
	if p, err = m.Pools.GetPool(ctx, "pol"); err != nil || p.NetworkPolicy == nil || p.NetworkPolicy.Egress[0].Target != "npmjs.org" {
		t.Fatalf("after restart: %+v, %v", p, err)
	}

	// No policy: members without helper.
	if p, err = m.Pools.UpdatePool(ctx, "pol", PoolUpdate{Capacity: capacity, SetPolicy: true}); err != nil || p.NetworkPolicy != nil {
		t.Fatalf("removing the policy: %+v, %v", p, err)
	}
	e.fillPool(t, "pol")
	for _, mem := range e.idle("pol") {
		if _, ok := helperOf(t, e.rt, mem.id); ok || mem.policy != nil {
			t.Errorf("member %s of an unpoliced pool has a helper", mem.id)
		}
	}
}

// TestPoolPolicyConfig: a [[pool]] network_policy polices its members;
// [egress] default_policy polices those of a pool without one, as any
// sandbox created without one.
func TestPoolPolicyConfig(t *testing.T) {
	e, f := policedPoolEnv(t)
	e.cfg.Egress.DefaultPolicy = config.EgressPolicy{DefaultAction: "deny", Egress: []config.EgressRule{{Action: "allow", Target: "default.test"}}}
	own := busyboxPool("own", 1)
	own.NetworkPolicy = config.EgressPolicy{DefaultAction: "deny", Egress: []config.EgressRule{{Action: "allow", Target: "Own.test"}}}
	e.cfg.Pools = []config.Pool{own, busyboxPool("plain", 1)}
	m := e.restart(t, f)
	ctx := context.Background()
	for name, want := range map[string]string{"own": "own.test", "plain": "default.test"} {
		p, err := m.Pools.GetPool(ctx, name)
		if err != nil || p.NetworkPolicy == nil || p.NetworkPolicy.Egress[0].Target != want {
			t.Errorf("pool %s shows %+v (%v), want %s allowed", name, p, err, want)
		}
		e.fillPool(t, name)
		sb, _ := e.create(t, poolRefRequest(name))
		rec, _ := e.store.Sandbox(sb.ID)
		if rec.Pool != name || rec.NetworkPolicy == nil || rec.NetworkPolicy.Egress[0].Target != want {
			t.Errorf("sandbox from %s: pool %q policy %+v, want %s allowed", name, rec.Pool, rec.NetworkPolicy, want)
		}
	}
	// A changed default gives new revisions: members made under the old
	// one are not adopted.
	e.fillPool(t, "plain")
	idle := e.idle("plain")
	e.cfg.Egress.DefaultPolicy.Egress[0].Target = "other.test"
	e.restart(t, f)
	for _, mem := range idle {
		if e.rt.Exists(mem.cid) {
			t.Errorf("idle member %s made under the old default was adopted", mem.id)
		}
	}

	bad := busyboxPool("bad", 1)
	bad.NetworkPolicy = config.EgressPolicy{DefaultAction: "block"}
	e.cfg.Pools = []config.Pool{bad}
	if _, err := New(e.cfg, f, e.store, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), `pool[0] "bad"`) {
		t.Errorf("New with a bad pool policy = %v", err)
	}
}

// TestPoolPolicyValidation: a pool's policy is checked as a create's,
// with its codes; a member whose policy cannot be applied is not kept.
func TestPoolPolicyValidation(t *testing.T) {
	e, f := policedPoolEnv(t)
	ctx := context.Background()
	capacity := PoolCapacity{BufferMax: 1, PoolMax: 1}
	for raw, kind := range map[string]Kind{
		`{"target":"a.com"}`:                  KindUnprocessable,
		`{"action":"allow","target":""}`:      KindUnprocessable,
		`{"action":"block","target":"a.com"}`: KindInvalid,
		`{"action":"allow","target":"a b"}`:   KindInvalid,
	} {
		np := &NetworkPolicy{Egress: []json.RawMessage{json.RawMessage(raw)}}
		_, err := e.m.Pools.CreatePool(ctx, "p", PoolSpec{Image: "busybox:latest", NetworkPolicy: np}, capacity)
		wantCode(t, err, kind, CodeInvalidParameter)
	}
	// A runtime without helpers enforces deny-all only, as on create.
	e.m.d.rt = e.rt
	_, err := e.m.Pools.CreatePool(ctx, "p", PoolSpec{Image: "busybox:latest", NetworkPolicy: allowOnly("a.com")}, capacity)
	wantCode(t, err, KindInvalid, CodePoolInvalid)
	e.m.d.rt = f

	if _, err := e.m.Pools.CreatePool(ctx, "p", PoolSpec{Image: "busybox:latest", NetworkPolicy: allowOnly("a.com")}, capacity); err != nil {
		t.Fatal(err)
	}
	f.fail = true
	e.m.Pools.mu.Lock()
	p := e.m.Pools.byName["p"]
	e.m.Pools.mu.Unlock()
	if n := e.m.Pools.reserve(p); n != 1 || e.m.Pools.addMember(ctx, p) == nil {
		t.Fatal("a member whose policy failed to apply was made")
	}
	if n := len(e.members(t, "p")); n != 0 {
		t.Errorf("%d containers left by the failed member", n)
	}
	if left, _ := e.rt.List(ctx, map[string]string{LabelEgressFor: ""}); len(left) != 0 {
		t.Errorf("%d helpers left by the failed member", len(left))
	}
}
