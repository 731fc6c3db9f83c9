package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// clusterEnv is a Manager over runtimetest.Cluster: a runtime with the
// core only, records on the sandboxes and a lease.
type clusterEnv struct {
	m     *Manager
	rt    *runtimetest.Cluster
	local *BoltStore
	clock *fakeClock
}

func newClusterEnv(t *testing.T) *clusterEnv {
	t.Helper()
	return newClusterEnvWith(t, testConfig(t))
}

func newClusterEnvWith(t *testing.T, cfg config.Config) *clusterEnv {
	t.Helper()
	local := openTestStore(t, cfg.Store.Dir)
	clock := &fakeClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	rt := runtimetest.NewCluster(clock.Now)
	m, err := New(cfg, rt, StoreFor(rt, local), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.d.now = clock.Now
	return &clusterEnv{m: m, rt: rt, local: local, clock: clock}
}

// createSandbox reconciles and creates a running sandbox with agentEcho.
func (e *clusterEnv) createSandbox(t *testing.T) *Sandbox {
	t.Helper()
	e.rt.Fake().SetAgent(agentEcho)
	ctx := context.Background()
	if err := e.m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := e.m.Sandboxes.Create(ctx, validRequest())
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return sb
}

// agentEcho is an agent that has started and runs commands: POST /command
// answers the command it was sent.
var agentEcho = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/command" {
		body, _ := io.ReadAll(r.Body)
		io.WriteString(w, "ran "+string(body))
	}
})

// TestSecondRuntime drives lifecycle over a runtime that is not Docker's
// shape: no archive copy, no pause, no images or volumes, records on the
// sandboxes. What it lacks answers "not supported"; the rest works.
func TestSecondRuntime(t *testing.T) {
	e := newClusterEnv(t)
	ctx := context.Background()
	sb := e.createSandbox(t)
	name := containerName(sb.ID)

	// The record lives on the sandbox, not in the local file.
	if _, err := e.rt.Record(ctx, name); err != nil {
		t.Errorf("no record on the sandbox: %v", err)
	}
	if _, err := e.local.Sandbox(sb.ID); err == nil {
		t.Error("the sandbox's record is in the local store")
	}
	if got, err := e.m.Sandboxes.Get(ctx, sb.ID); err != nil || got.Status.State != "Running" {
		t.Fatalf("Get = %+v, %v", got, err)
	}

	// A command goes through the agent transport.
	if out := viaAgent(t, e.m, sb.ID, http.MethodPost, "/command", "echo hi"); out != "ran echo hi" {
		t.Errorf("command answered %q", out)
	}

	// Files go through the agent; without it (stopped) there is no other way.
	if tr, err := e.m.Files.FilesTransport(ctx, sb.ID); err != nil || tr == nil {
		t.Errorf("FilesTransport of a running sandbox = %v, %v; want the agent", tr, err)
	}

	// What the runtime lacks is not supported, in its own words.
	err := e.m.Sandboxes.Pause(ctx, sb.ID)
	wantCode(t, err, KindInvalid, CodeAPINotSupported)
	if !strings.Contains(err.Error(), "kubernetes") {
		t.Errorf("pause error %q does not name the runtime", err)
	}
	wantCode(t, e.m.Sandboxes.Resume(ctx, sb.ID), KindInvalid, CodeAPINotSupported)
	_, err = e.m.Snapshots.CreateSnapshot(ctx, sb.ID, "s")
	wantCode(t, err, KindNotImplemented, CodeSnapshotNotImpl)
	_, err = e.m.Forks.Fork(ctx, sb.ID, ForkRequest{Timeout: 600, Count: 1})
	wantCode(t, err, KindNotImplemented, CodeForkUnsupportedRuntime) // upstream's answer there
	host := validRequest()
	host.Volumes = []Volume{{Name: "h", MountPath: "/h", Host: &HostPath{Path: t.TempDir()}}}
	_, err = e.m.Sandboxes.Create(ctx, host)
	wantCode(t, err, KindInvalid, CodeVolUnsupported)
	_, err = e.m.Sandboxes.Get(ctx, "nope")
	if e, _ := AsError(err); e == nil || WireCode(e.Code, "kubernetes") != "KUBERNETES::SANDBOX_NOT_FOUND" {
		t.Errorf("unknown sandbox: %v, want KUBERNETES::SANDBOX_NOT_FOUND on the wire", err)
	}

	// Renewal and activity are written to the sandbox's record.
	at := e.clock.Now().Add(time.Hour)
	if _, err := e.m.Sandboxes.Renew(ctx, sb.ID, at); err != nil {
		t.Fatal(err)
	}
	e.m.Expiry.persistActivity()
	rec, err := StoreFor(e.rt, e.local).Sandbox(sb.ID)
	if err != nil || rec.ExpiresAt == nil || !rec.ExpiresAt.Equal(wireTime(at)) || !rec.LastActivity.Equal(wireTime(e.clock.Now())) {
		t.Fatalf("record after renew = %+v, %v", rec, err)
	}

	// A stopped sandbox's files have no way out without archive copy.
	e.rt.Fake().Set(t, rec.ContainerID, func(c *runtime.Container) { c.State = runtime.StateExited })
	_, err = e.m.Files.FilesTransport(ctx, sb.ID)
	wantCode(t, err, KindConflict, CodeNotRunning)
	e.rt.Fake().Set(t, rec.ContainerID, func(c *runtime.Container) { c.State = runtime.StateRunning })

	// Expiry reaps it, record and all.
	e.clock.Advance(2 * time.Hour)
	e.m.Expiry.Sweep(ctx)
	if e.rt.Fake().Exists(rec.ContainerID) {
		t.Error("the expired sandbox survived the sweep")
	}
	if _, err := e.m.Sandboxes.Get(ctx, sb.ID); err == nil {
		t.Error("the reaped sandbox is still listed")
	}
}

// TestFollowerServes: with a shared runtime, a replica that does not lead
// serves at once and reconciles only once it leads.
func TestFollowerServes(t *testing.T) {
	e := newClusterEnv(t)
	e.rt.Fake().SetAgent(agentEcho)
	e.rt.Revoke()
	listed := make(chan struct{}, 1)
	e.rt.Fake().Hook("List", func(context.Context, string) error {
		select {
		case listed <- struct{}{}:
		default:
		}
		return nil
	})
	e.m.Start()
	t.Cleanup(func() { e.m.Shutdown(context.Background()) })
	waitPhase(t, e.m, PhaseServing)
	if _, err := e.m.Sandboxes.Create(context.Background(), validRequest()); err != nil {
		t.Fatalf("a follower refused a create: %v", err)
	}
	select {
	case <-listed:
		t.Fatal("a follower reconciled")
	default:
	}
	e.rt.Grant()
	<-listed // the leader's reconcile lists the sandboxes
}

// TestTakeoverSparesCreatesInFlight: a replica that starts to lead while it
// serves a create reconciles around it: the create's half-made sandbox is
// not removed as one left by a crash.
func TestTakeoverSparesCreatesInFlight(t *testing.T) {
	e := newClusterEnv(t)
	e.rt.Fake().SetAgent(agentEcho)
	e.rt.Revoke()
	e.m.Start()
	t.Cleanup(func() { e.m.Shutdown(context.Background()) })
	waitPhase(t, e.m, PhaseServing)

	// The create waits in the engine for its agent, its sandbox made.
	inAgent, agentRelease := make(chan string, 8), make(chan struct{})
	e.rt.Fake().Hook("Agent", hold(inAgent, "Agent", agentRelease))
	created := make(chan createResult, 1)
	go func() {
		sb, err := e.m.Sandboxes.Create(context.Background(), validRequest())
		created <- createResult{sb, err}
	}()
	<-inAgent

	// Leading, the replica reconciles and sweeps (each lists sandboxes).
	lists := make(chan struct{}, 16)
	e.rt.Fake().Hook("List", func(context.Context, string) error {
		lists <- struct{}{}
		return nil
	})
	e.rt.Grant()
	for range 3 { // reconcile's list, its records, the sweep's records
		<-lists
	}
	e.rt.Fake().Hook("List", nil)
	e.rt.Fake().Hook("Agent", nil)
	close(agentRelease)
	res := <-created
	if res.err != nil {
		t.Fatalf("the create in flight at takeover failed: %v", res.err)
	}
	if _, err := e.m.Sandboxes.Get(context.Background(), res.sb.ID); err != nil {
		t.Fatalf("the create in flight at takeover lost its sandbox: %v", err)
	}
}

// A configured [lifecycle] instance_id is the one the cluster store lists
// sandboxes by, not the cluster's: else this instance's sandboxes would
// never be listed, adopted or reaped.
func TestClusterStoreConfiguredInstance(t *testing.T) {
	cfg := testConfig(t)
	cfg.Lifecycle.InstanceID = "node-a"
	e := newClusterEnvWith(t, cfg)
	sb := e.createSandbox(t)
	recs, err := e.m.d.store.Sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ID != sb.ID {
		t.Fatalf("store lists %d sandboxes, want %s", len(recs), sb.ID)
	}
	if id, _ := e.m.d.store.InstanceID(); id != "node-a" {
		t.Errorf("store's instance %q, want node-a", id)
	}
}

// addressCluster is a cluster runtime that enforces address rules itself
// (runtime.AddressPolicies), refusing domains as Kubernetes does.
type addressCluster struct{ *runtimetest.Cluster }

func (c addressCluster) Features() runtime.Features {
	fs := c.Cluster.Features()
	fs.AddressPolicies = c
	return fs
}

func (addressCluster) CheckAddressPolicy(pol egress.Policy) error {
	for _, r := range pol.Egress {
		if _, err := netip.ParsePrefix(r.Target); err != nil {
			return fmt.Errorf("networkPolicy target %q: domain rules need the Docker runtime's egress helper", r.Target)
		}
	}
	return nil
}

// On a runtime without egress helpers, a policy of address rules goes to
// the runtime if it enforces them (AddressPolicies), a domain rule is a 400
// in the runtime's words, and the egress API is not there.
func TestAddressPolicyOnClusterRuntime(t *testing.T) {
	cfg := testConfig(t)
	local := openTestStore(t, cfg.Store.Dir)
	rt := addressCluster{runtimetest.NewCluster(time.Now)}
	rt.Fake().SetAgent(agentEcho)
	m, err := New(cfg, rt, StoreFor(rt, local), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	rule := func(r string) *NetworkPolicy {
		return &NetworkPolicy{DefaultAction: "deny", Egress: []json.RawMessage{json.RawMessage(r)}}
	}
	req := validRequest()
	req.NetworkPolicy = rule(`{"action":"allow","target":"10.0.0.0/8"}`)
	sb, err := m.Sandboxes.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create with a CIDR rule: %v", err)
	}
	rec, err := m.d.store.Sandbox(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := rt.Fake().Spec(t, rec.ContainerID).Network
	if got.Mode == runtime.NetworkNone || got.Policy == nil || len(got.Policy.Egress) != 1 || got.Policy.Egress[0].Target != "10.0.0.0/8" {
		t.Errorf("spec network = %+v, want the policy handed to the runtime", got)
	}

	req.NetworkPolicy = rule(`{"action":"allow","target":"pypi.org"}`)
	_, err = m.Sandboxes.Create(ctx, req)
	wantCode(t, err, KindInvalid, CodeInvalidParameter)
	if err == nil || !strings.Contains(err.Error(), "Docker runtime's egress helper") {
		t.Errorf("domain rule: %v, want the runtime's refusal", err)
	}

	if _, err := m.Egress.Policy(sb.ID); !isKind(err, KindNotImplemented) {
		t.Errorf("GET /policy = %v, want 501 (KindNotImplemented)", err)
	}
}

// On a shared runtime a replica's create makes the sandbox's container
// before it writes the record to it: a leader that reconciles meanwhile
// must leave that container alone, and its reaper removes it only once it
// is clearly left behind.
func TestReconcileLeavesAnotherReplicasCreate(t *testing.T) {
	e := newClusterEnv(t)
	ctx := context.Background()
	kept := e.createSandbox(t)
	id := newID()
	cid, err := e.rt.Create(ctx, runtime.Spec{Name: containerName(id), Image: "img", Labels: map[string]string{LabelID: id, LabelInstance: e.m.d.instance}})
	if err != nil {
		t.Fatal(err)
	}
	exists := func() bool {
		_, err := e.rt.Inspect(ctx, cid)
		return err == nil
	}
	if err := e.m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	e.m.Expiry.Sweep(ctx)
	if !exists() {
		t.Fatal("a leader's reconcile removed another replica's create in flight")
	}
	if _, err := e.m.Sandboxes.Renew(ctx, kept.ID, e.clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(sharedCreateGrace + time.Second)
	e.m.Expiry.Sweep(ctx)
	if exists() {
		t.Error("the reaper kept a container that got no record for longer than a create takes")
	}
	if _, err := e.m.Sandboxes.Get(ctx, kept.ID); err != nil {
		t.Errorf("the reaper's clean-up touched a ready sandbox: %v", err)
	}
}

// TestProxyReadsARecordOncePerSandbox: the proxy's transport reads a
// sandbox's record (on Kubernetes an API call) once, not per request,
// and still answers as before once the sandbox is stopped or gone.
func TestProxyReadsARecordOncePerSandbox(t *testing.T) {
	e := newClusterEnv(t)
	ctx := context.Background()
	sb := e.createSandbox(t)
	name := containerName(sb.ID)
	var reads atomic.Int32
	e.rt.Fake().Hook("Record", func(_ context.Context, id string) error {
		if id == name {
			reads.Add(1)
		}
		return nil
	})
	for range 20 {
		if out := viaAgent(t, e.m, sb.ID, http.MethodPost, "/command", "true"); out != "ran true" {
			t.Fatalf("command answered %q", out)
		}
	}
	if n := reads.Load(); n > 1 {
		t.Errorf("20 requests read the record %d times, want at most once", n)
	}
	rec, err := StoreFor(e.rt, e.local).Sandbox(sb.ID)
	if err != nil {
		t.Fatal(err)
	}

	// Stopped behind sandboxd's back: the agent cannot run, as before.
	e.rt.Fake().Set(t, rec.ContainerID, func(c *runtime.Container) { c.State = runtime.StateExited })
	_, err = e.m.Sandboxes.Transport(ctx, sb.ID)
	wantCode(t, err, KindConflict, CodeNotRunning)
	e.rt.Fake().Set(t, rec.ContainerID, func(c *runtime.Container) { c.State = runtime.StateRunning })
	viaAgent(t, e.m, sb.ID, http.MethodPost, "/command", "true")

	// Deleted by another replica (pod and record gone): not found.
	if err := e.rt.Remove(ctx, rec.ContainerID); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Sandboxes.Transport(ctx, sb.ID)
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)

	// Deleted through this replica: not found.
	sb = e.createSandbox(t)
	viaAgent(t, e.m, sb.ID, http.MethodPost, "/command", "true")
	if err := e.m.Sandboxes.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Sandboxes.Transport(ctx, sb.ID)
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)
}
