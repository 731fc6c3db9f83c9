package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// poolEnv is a testEnv with the given config pools and an agent that
// answers /ping.
func poolEnv(t *testing.T, pools ...config.Pool) *testEnv {
	t.Helper()
	e := newEnv(t, func(c *config.Config) { c.Pools = pools })
	e.rt.SetAgent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	return e
}

func busyboxPool(name string, size int) config.Pool {
	return config.Pool{Name: name, Image: "busybox:latest", Size: size, Entrypoint: []string{"sleep", "infinity"},
		ResourceLimits: map[string]string{"cpu": "1", "memory": "512Mi"}, Env: map[string]string{"A": "1"}}
}

// fillPool creates the missing members of a pool synchronously, as its
// filler would.
func (e *testEnv) fillPool(t *testing.T, name string) {
	t.Helper()
	e.m.Pools.mu.Lock()
	p := e.m.Pools.byName[name]
	e.m.Pools.mu.Unlock()
	if p == nil {
		t.Fatalf("no pool %s", name)
	}
	for n := e.m.Pools.reserve(p); n > 0; n = e.m.Pools.reserve(p) {
		for range n {
			if err := e.m.Pools.addMember(context.Background(), p); err != nil {
				t.Fatalf("add member to pool %s: %v", name, err)
			}
		}
	}
}

// members returns the ids of the containers labelled as members of pool.
func (e *testEnv) members(t *testing.T, pool string) []string {
	t.Helper()
	list, err := e.rt.List(context.Background(), map[string]string{LabelPool: pool})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

func (e *testEnv) poolStatus(t *testing.T, name string) PoolStatus {
	t.Helper()
	p, err := e.m.Pools.GetPool(context.Background(), name)
	if err != nil {
		t.Fatalf("GetPool %s: %v", name, err)
	}
	return *p.Status
}

func TestPoolClaimByRef(t *testing.T) {
	e := poolEnv(t, busyboxPool("warm", 2))
	e.fillPool(t, "warm")
	before := e.members(t, "warm")
	if len(before) != 2 {
		t.Fatalf("pool filled with %d members, want 2", len(before))
	}
	if st := e.poolStatus(t, "warm"); st.Available != 2 || st.Allocated != 0 || st.Total != 2 {
		t.Errorf("status after fill = %+v", st)
	}

	// The SDKs send their own image, entrypoint and resources: the pool's win.
	req := validRequest()
	req.Extensions = map[string]string{ExtPoolRef: "warm"}
	req.Metadata = map[string]string{"team": "a"}
	sb, cid := e.create(t, req)
	if !slices.Contains(before, cid) {
		t.Fatalf("claimed container %s is not one of the pool's %v", cid, before)
	}
	if got := e.members(t, "warm"); !slices.Equal(got, before) {
		t.Errorf("a claim created or removed containers: %v, want %v", got, before)
	}
	rec, err := e.store.Sandbox(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantExp := e.clock.Now().Add(600 * time.Second)
	if rec.Pool != "warm" || rec.State != recordReady || rec.ExpiresAt == nil || !rec.ExpiresAt.Equal(wantExp) {
		t.Errorf("record = pool %q state %q expires %v, want warm ready %v", rec.Pool, rec.State, rec.ExpiresAt, wantExp)
	}
	got, err := e.m.Sandboxes.Get(context.Background(), sb.ID)
	if err != nil {
		t.Fatalf("Get claimed sandbox: %v", err)
	}
	if got.Metadata["team"] != "a" || got.Image.URI != "busybox:latest" || !slices.Equal(got.Entrypoint, []string{"sleep", "infinity"}) {
		t.Errorf("claimed sandbox = metadata %v image %v entrypoint %v", got.Metadata, got.Image, got.Entrypoint)
	}
	if st := e.poolStatus(t, "warm"); st.Available != 1 || st.Allocated != 1 || st.Total != 2 {
		t.Errorf("status after claim = %+v, want 1 available, 1 allocated", st)
	}
	list, _, err := e.m.Sandboxes.List(context.Background(), ListFilter{Page: 1, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("List shows %d sandboxes, want only the claimed one", len(list))
	}
}

func TestPoolMembersHidden(t *testing.T) {
	e := poolEnv(t, busyboxPool("warm", 2))
	e.fillPool(t, "warm")
	ctx := context.Background()
	list, _, err := e.m.Sandboxes.List(ctx, ListFilter{Page: 1, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("List shows %d idle pool members", len(list))
	}
	e.m.Pools.mu.Lock()
	idle := slices.Clone(e.m.Pools.byName["warm"].idle)
	e.m.Pools.mu.Unlock()
	for _, mem := range idle {
		_, err := e.m.Sandboxes.Get(ctx, mem.id)
		wantCode(t, err, KindNotFound, CodeSandboxNotFound)
		_, err = e.m.Sandboxes.Transport(ctx, mem.id)
		wantCode(t, err, KindNotFound, CodeSandboxNotFound)
	}
	e.clock.Advance(1000 * time.Hour)
	e.m.Expiry.Sweep(ctx)
	if got := e.members(t, "warm"); len(got) != 2 {
		t.Errorf("the reaper removed idle members: %d left", len(got))
	}
}

func TestPoolRefErrors(t *testing.T) {
	e := poolEnv(t, busyboxPool("warm", 1))
	ref := func(edit func(*CreateRequest)) CreateRequest {
		r := validRequest()
		r.Extensions = map[string]string{ExtPoolRef: "warm"}
		edit(&r)
		return r
	}
	tests := []struct {
		name string
		req  CreateRequest
		code string
		msg  string
	}{
		{"unknown pool", ref(func(r *CreateRequest) { r.Extensions[ExtPoolRef] = "cold" }), CodeUnsupportedPoolRef, `"cold"`},
		{"snapshot", ref(func(r *CreateRequest) { r.Image, r.SnapshotID = nil, "s1" }), CodeInvalidParameter, "snapshotId"},
		{"volumes", ref(func(r *CreateRequest) {
			r.Volumes = []Volume{{Name: "v", MountPath: "/data", PVC: &PVC{ClaimName: "v"}}}
		}), CodeInvalidParameter, "volumes"},
		{"platform", ref(func(r *CreateRequest) { r.Platform = &Platform{OS: "linux", Arch: "amd64"} }), CodeInvalidParameter, "platform"},
		{"network policy", ref(func(r *CreateRequest) { r.NetworkPolicy = &NetworkPolicy{DefaultAction: "deny"} }), CodeInvalidParameter, "networkPolicy"},
		{"short timeout still checked", ref(func(r *CreateRequest) { r.Timeout = ptr(10) }), CodeInvalidParameter, "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.m.Sandboxes.Create(context.Background(), tt.req)
			e, ok := AsError(err)
			if !ok || e.Code != tt.code || !strings.Contains(e.Message, tt.msg) {
				t.Fatalf("Create = %v, want %s naming %s", err, tt.code, tt.msg)
			}
		})
	}
	if n := len(e.members(t, "")); n != 0 {
		t.Errorf("refused creates left %d containers", n)
	}
}

func TestPoolEmptyFallsBackToColdCreate(t *testing.T) {
	e := poolEnv(t, busyboxPool("warm", 1)) // never filled: no RunPools
	req := CreateRequest{Image: &ImageSpec{URI: "ignored:latest"}, Extensions: map[string]string{ExtPoolRef: "warm"}}
	sb, cid := e.create(t, req)
	spec := e.rt.Spec(t, cid)
	if spec.Image != "busybox:latest" || !slices.Equal(spec.Cmd, []string{"sleep", "infinity"}) || spec.Resources.MemoryBytes != 512<<20 || !slices.Equal(spec.Env, []string{"A=1"}) {
		t.Errorf("cold create from pool spec = image %s cmd %v memory %d env %v", spec.Image, spec.Cmd, spec.Resources.MemoryBytes, spec.Env)
	}
	if spec.Labels[LabelPool] != "" {
		t.Errorf("a cold-created sandbox is labelled as an idle member")
	}
	if st := e.poolStatus(t, "warm"); st.Allocated != 1 {
		t.Errorf("cold create from pool %s: allocated = %d, want 1", sb.ID, st.Allocated)
	}
}

func TestPoolMatchWithoutRef(t *testing.T) {
	matching := func(edit func(*CreateRequest)) CreateRequest {
		r := CreateRequest{
			Image: &ImageSpec{URI: "busybox:latest"}, Entrypoint: []string{"sleep", "infinity"},
			ResourceLimits: map[string]string{"cpu": "1", "memory": "512Mi"}, Env: map[string]*string{"A": ptr("1")},
			Timeout: ptr(600),
		}
		edit(&r)
		return r
	}
	tests := []struct {
		name   string
		req    CreateRequest
		pooled bool
	}{
		{"same spec", matching(func(*CreateRequest) {}), true},
		{"same spec with metadata", matching(func(r *CreateRequest) { r.Metadata = map[string]string{"k": "v"} }), true},
		{"same quantities written differently", matching(func(r *CreateRequest) { r.ResourceLimits = map[string]string{"cpu": "1000m", "memory": "536870912"} }), true},
		{"other image", matching(func(r *CreateRequest) { r.Image.URI = "busybox:other" }), false},
		{"other entrypoint", matching(func(r *CreateRequest) { r.Entrypoint = []string{"tail", "-f", "/dev/null"} }), false},
		{"other memory", matching(func(r *CreateRequest) { r.ResourceLimits["memory"] = "1Gi" }), false},
		{"extra env", matching(func(r *CreateRequest) { r.Env["B"] = ptr("2") }), false},
		{"no env", matching(func(r *CreateRequest) { r.Env = nil }), false},
		{"no network", matching(func(r *CreateRequest) { r.NetworkPolicy = &NetworkPolicy{DefaultAction: "deny"} }), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := poolEnv(t, busyboxPool("warm", 1))
			e.fillPool(t, "warm")
			members := e.members(t, "warm")
			sb, cid := e.create(t, tt.req)
			if got := slices.Contains(members, cid); got != tt.pooled {
				t.Errorf("served from pool = %v, want %v", got, tt.pooled)
			}
			rec, err := e.store.Sandbox(sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.Pool == "warm"; got != tt.pooled {
				t.Errorf("record pool = %q, want from pool %v", rec.Pool, tt.pooled)
			}
		})
	}
}

func TestPoolClaimSkipsDeadMember(t *testing.T) {
	e := poolEnv(t, busyboxPool("warm", 2))
	e.fillPool(t, "warm")
	e.m.Pools.mu.Lock()
	first := e.m.Pools.byName["warm"].idle[0]
	e.m.Pools.mu.Unlock()
	e.rt.Set(t, first.cid, func(c *runtime.Container) { c.State = runtime.StateExited })
	req := validRequest()
	req.Extensions = map[string]string{ExtPoolRef: "warm"}
	_, cid := e.create(t, req)
	if cid == first.cid {
		t.Fatal("claimed a member whose container exited")
	}
	if e.rt.Exists(first.cid) {
		t.Error("the dead member was not removed")
	}
}

func TestPoolCheckReplacesDeadMembers(t *testing.T) {
	e := poolEnv(t, busyboxPool("warm", 2))
	e.fillPool(t, "warm")
	e.m.Pools.mu.Lock()
	p := e.m.Pools.byName["warm"]
	dead := p.idle[1]
	e.m.Pools.mu.Unlock()
	e.rt.Set(t, dead.cid, func(c *runtime.Container) { c.State = runtime.StateExited })
	e.m.Pools.checkPool(context.Background(), p)
	if st := e.poolStatus(t, "warm"); st.Available != 1 {
		t.Errorf("after check: %d available, want 1", st.Available)
	}
	e.fillPool(t, "warm")
	got := e.members(t, "warm")
	if len(got) != 2 || slices.Contains(got, dead.cid) {
		t.Errorf("after refill: members %v, want 2 without %s", got, dead.cid)
	}
}

func TestPoolAdoptAfterRestart(t *testing.T) {
	e := poolEnv(t, busyboxPool("warm", 2), busyboxPool("gone", 1))
	e.fillPool(t, "warm")
	e.fillPool(t, "gone")
	ctx := context.Background()
	kept := e.members(t, "warm")
	stale := e.rt.Add(runtime.Container{State: runtime.StateRunning, Labels: map[string]string{
		LabelID: "stale", LabelInstance: e.m.Instance(), LabelPool: "warm", LabelPoolRevision: "old",
	}})
	gone := e.members(t, "gone")

	// Restart with "gone" removed from the config.
	e.cfg.Pools = []config.Pool{busyboxPool("warm", 2)}
	m, err := New(e.cfg, e.rt, e.store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.d.now = e.clock.Now
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.members(t, "warm"); !slices.Equal(got, kept) {
		t.Errorf("members after restart = %v, want the adopted %v", got, kept)
	}
	for _, id := range append(gone, stale) {
		if e.rt.Exists(id) {
			t.Errorf("stale member %s survived the restart", id)
		}
	}
	p, err := m.Pools.GetPool(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Available != 2 {
		t.Errorf("adopted pool has %d available, want 2", p.Status.Available)
	}
}

func TestPoolResizeAndDelete(t *testing.T) {
	e := poolEnv(t, busyboxPool("warm", 3))
	e.fillPool(t, "warm")
	ctx := context.Background()
	req := validRequest()
	req.Extensions = map[string]string{ExtPoolRef: "warm"}
	claimed, claimedCID := e.create(t, req)

	p, err := e.m.Pools.UpdatePool(ctx, "warm", PoolUpdate{Capacity: PoolCapacity{BufferMax: 1, BufferMin: 0, PoolMax: 5, PoolMin: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Available != 1 || len(e.members(t, "warm")) != 2 { // one idle and the claimed one
		t.Errorf("after shrinking to 1: %+v, %d containers", p.Status, len(e.members(t, "warm")))
	}
	if err := e.m.Pools.DeletePool(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	if got := e.members(t, "warm"); !slices.Equal(got, []string{claimedCID}) {
		t.Errorf("after delete: containers %v, want only the claimed %s", got, claimedCID)
	}
	_, err = e.m.Pools.GetPool(ctx, "warm")
	wantCode(t, err, KindNotFound, CodePoolNotFound)
	if _, err := e.m.Sandboxes.Get(ctx, claimed.ID); err != nil {
		t.Errorf("claimed sandbox after pool delete: %v", err)
	}
	_, err = e.m.Sandboxes.Create(ctx, req)
	wantCode(t, err, KindInvalid, CodeUnsupportedPoolRef)
}

func TestCreatePoolAPI(t *testing.T) {
	e := poolEnv(t, busyboxPool("conf", 1))
	ctx := context.Background()
	spec := PoolSpec{Image: "busybox:latest"}
	capacity := PoolCapacity{BufferMax: 2, BufferMin: 1, PoolMax: 4, PoolMin: 0}
	tests := []struct {
		name     string
		pool     string
		spec     PoolSpec
		capacity PoolCapacity
		kind     Kind
		code     string
	}{
		{"bad name", "Not_A_Name", spec, capacity, KindInvalid, CodePoolInvalid},
		{"no image", "p", PoolSpec{}, capacity, KindInvalid, CodePoolInvalid},
		{"bad memory", "p", PoolSpec{Image: "busybox", ResourceLimits: map[string]string{"memory": "lots"}}, capacity, KindInvalid, CodePoolInvalid},
		{"bufferMin above bufferMax", "p", spec, PoolCapacity{BufferMax: 1, BufferMin: 2, PoolMax: 4}, KindInvalid, CodePoolInvalid},
		{"poolMin above poolMax", "p", spec, PoolCapacity{PoolMax: 1, PoolMin: 2}, KindInvalid, CodePoolInvalid},
		{"too big", "p", spec, PoolCapacity{BufferMax: maxPoolSize + 1, PoolMax: maxPoolSize + 1}, KindInvalid, CodePoolInvalid},
		{"name of a config pool", "conf", spec, capacity, KindConflict, CodePoolExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.m.Pools.CreatePool(ctx, tt.pool, tt.spec, tt.capacity)
			wantCode(t, err, tt.kind, tt.code)
		})
	}

	p, err := e.m.Pools.CreatePool(ctx, "api", spec, capacity)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "api" || p.CapacitySpec != capacity || p.Status == nil || p.Status.Revision == "" {
		t.Errorf("CreatePool = %+v", p)
	}
	// A create naming the new pool is served from it once it is filled.
	e.fillPool(t, "api")
	if st := e.poolStatus(t, "api"); st.Available != 2 {
		t.Errorf("api pool filled to %d, want min(bufferMax, poolMax) = 2", st.Available)
	}
	list, err := e.m.Pools.ListPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"api", "conf"}) {
		t.Errorf("ListPools = %v", names)
	}

	// API pools survive a restart; config pools come from the config.
	if _, err := e.m.Pools.UpdatePool(ctx, "api", PoolUpdate{Capacity: PoolCapacity{BufferMax: 3, PoolMax: 3}}); err != nil {
		t.Fatal(err)
	}
	m, err := New(e.cfg, e.rt, e.store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Pools.GetPool(ctx, "api")
	if err != nil {
		t.Fatalf("API pool after restart: %v", err)
	}
	if got.CapacitySpec.BufferMax != 3 || got.Status.Revision != p.Status.Revision {
		t.Errorf("API pool after restart = %+v, want bufferMax 3 and revision %s", got, p.Status.Revision)
	}
	raw, err := e.store.MetaString(metaPools)
	if err != nil {
		t.Fatal(err)
	}
	var stored []storedPool
	if err := json.Unmarshal([]byte(raw), &stored); err != nil || len(stored) != 1 || stored[0].Name != "api" {
		t.Errorf("stored pools = %s (%v), want only api", raw, err)
	}
}

func TestConfigPoolErrors(t *testing.T) {
	tests := []struct {
		name string
		pool config.Pool
	}{
		{"bad cpu", config.Pool{Name: "p", Image: "busybox", Size: 1, ResourceLimits: map[string]string{"cpu": "fast"}}},
		{"too big", config.Pool{Name: "p", Image: "busybox", Size: maxPoolSize + 1}},
		{"env key with =", config.Pool{Name: "p", Image: "busybox", Size: 1, Env: map[string]string{"A=B": "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Pools = []config.Pool{tt.pool}
			store := openTestStore(t, cfg.Store.Dir)
			if _, err := New(cfg, runtimetest.New(time.Now), store, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), `pool[0] "p"`) {
				t.Errorf("New = %v, want an error naming pool[0]", err)
			}
		})
	}
}

// TestRunPools drives the real filler: it fills, refills after a claim, and
// stops with its context. It waits for the filler without timing it.
func TestRunPools(t *testing.T) {
	e := poolEnv(t, busyboxPool("warm", 2))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		e.m.Pools.RunPools(ctx)
		close(stopped)
	}()
	waitAvailable := func(want int) {
		t.Helper()
		for e.poolStatus(t, "warm").Available != want {
			select {
			case <-stopped:
				t.Fatal("RunPools returned early")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	waitAvailable(2)
	req := validRequest()
	req.Extensions = map[string]string{ExtPoolRef: "warm"}
	e.create(t, req)
	waitAvailable(2)
	if n := len(e.members(t, "warm")); n != 3 {
		t.Errorf("after claim and refill: %d containers, want 3", n)
	}
	cancel()
	<-stopped
}

// A pool created while another request changes it: CreatePool reads what
// it logs before the pool is shared, so the race detector (go test -race,
// a CI stage) finds no read of the pool outside Pools.mu.
func TestCreatePoolWhileUpdated(t *testing.T) {
	e := poolEnv(t)
	ctx := context.Background()
	for i := range 20 {
		name := fmt.Sprintf("p%d", i)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				_, err := e.m.Pools.UpdatePool(ctx, name, PoolUpdate{Capacity: PoolCapacity{BufferMax: 0, PoolMax: 1}, SetPolicy: true})
				if err == nil {
					return
				}
				wantCode(t, err, KindNotFound, CodePoolNotFound)
			}
		}()
		if _, err := e.m.Pools.CreatePool(ctx, name, PoolSpec{Image: "busybox:latest"}, PoolCapacity{BufferMax: 1, PoolMax: 1}); err != nil {
			t.Fatal(err)
		}
		<-done
	}
}
