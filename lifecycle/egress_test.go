package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

func TestParsePolicy(t *testing.T) {
	rules := func(raw ...string) *NetworkPolicy {
		np := &NetworkPolicy{DefaultAction: "Deny"}
		for _, r := range raw {
			np.Egress = append(np.Egress, json.RawMessage(r))
		}
		return np
	}
	p, err := parsePolicy(rules(`{"action":"allow","target":"PyPI.org"}`, `{"action":"deny","target":"10.0.0.0/8"}`))
	if err != nil || p.DefaultAction != "deny" || len(p.Egress) != 2 || p.Egress[0].Target != "pypi.org" {
		t.Fatalf("parsePolicy = %+v, %v", p, err)
	}
	if p, err := parsePolicy(nil); p != nil || err != nil {
		t.Errorf("no policy = %+v, %v", p, err)
	}
	for raw, kind := range map[string]Kind{
		`{"target":"a.com"}`:                  KindUnprocessable,
		`{"action":"allow"}`:                  KindUnprocessable,
		`{"action":"allow","target":""}`:      KindUnprocessable,
		`"a.com"`:                             KindUnprocessable,
		`{"action":"block","target":"a.com"}`: KindInvalid,
		`{"action":"allow","target":"a b"}`:   KindInvalid,
	} {
		_, err := parsePolicy(rules(raw))
		if e, ok := AsError(err); !ok || e.Kind != kind {
			t.Errorf("rule %s: %v, want kind %v", raw, err, kind)
		}
	}
	if _, err := parsePolicy(&NetworkPolicy{DefaultAction: "block"}); err == nil {
		t.Error("defaultAction block accepted")
	}
}

func TestChangePolicy(t *testing.T) {
	cur := egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{{Action: egress.Allow, Target: "pypi.org"}}}
	// The statuses are those the api answers for each outcome.
	status := func(err error) (int, string) {
		e, ok := AsError(err)
		switch {
		case err == nil:
			return http.StatusOK, ""
		case !ok:
			return 0, err.Error()
		case e.Kind == KindInvalid:
			return http.StatusBadRequest, e.Message
		case e.Kind == KindTooLarge:
			return http.StatusRequestEntityTooLarge, e.Message
		}
		return 0, e.Message
	}
	ops := map[string]PolicyOp{http.MethodPost: PolicyReplace, http.MethodPut: PolicyReplace, http.MethodPatch: PolicyPatch, http.MethodDelete: PolicyRemove}
	for _, c := range []struct {
		method, body string
		status       int
		reason, msg  string
		rules        int
	}{
		{http.MethodPost, ``, 200, "policy reset to default deny-all", "", 0},
		{http.MethodPut, `null`, 200, "", "", 0},
		{http.MethodPost, `{"defaultAction":"allow","egress":[{"action":"deny","target":"a.com"}]}`, 200, "", "", 1},
		{http.MethodPost, `{"defaultAction":"nope"}`, 400, "", "invalid policy: ", 0},
		{http.MethodPost, `[`, 400, "", "invalid policy: ", 0},
		{http.MethodPatch, ``, 400, "", "empty body", 0},
		{http.MethodPatch, `[]`, 400, "", "invalid patch rules: empty array", 0},
		{http.MethodPatch, `[{"action":"allow","target":"b.com"}]`, 200, "", "", 2},
		{http.MethodDelete, ``, 400, "", "empty body", 0},
		{http.MethodDelete, `[]`, 400, "", "invalid delete targets: empty array", 0},
		{http.MethodDelete, `[1]`, 400, "", "invalid delete targets: ", 0},
		{http.MethodDelete, `["x.com"]`, 200, "no matching targets found", "", 1},
		{http.MethodDelete, `["PYPI.ORG"]`, 200, "", "", 0},
	} {
		ch, err := changePolicy(ops[c.method], cur, []byte(c.body))
		next, reason := ch.Policy, ch.Reason
		status, msg := status(err)
		if status != c.status || reason != c.reason || !strings.HasPrefix(msg, c.msg) || (status == 200 && len(next.Egress) != c.rules) {
			t.Errorf("%s %s = %+v %q %d %q", c.method, c.body, next, reason, status, msg)
		}
	}
	many := make([]egress.Rule, egress.MaxRules+1)
	for i := range many {
		many[i] = egress.Rule{Action: egress.Allow, Target: "a.com"}
	}
	body, _ := json.Marshal(many)
	if _, err := changePolicy(PolicyPatch, cur, body); !isKind(err, KindTooLarge) {
		t.Errorf("over the rule cap: %v, want 413 (KindTooLarge)", err)
	}
}

var _ runtime.Egress = (*egressFake)(nil)

// egressFake adds egress helpers to the fake runtime: each daemon session
// records the policies pushed to it.
type egressFake struct {
	*runtimetest.Runtime
	mu        sync.Mutex
	starts    int
	pushed    []egress.Policy
	pushHost  [][]netip.Addr // the host addresses sent with each push
	hostAddrs []netip.Addr   // what HostAddresses answers
	sessions  []*fakeSession
	fail      bool
	detached  []string
	attached  map[string]int // by container: guards in force when it got its network
	guards    int            // helpers started with their default drop in force
	noGuard   bool           // helpers' drop never comes into force
	guardArgs [][]string
	probes    int
}

// Features adds egress helpers to the fake's.
func (f *egressFake) Features() runtime.Features {
	fs := f.Runtime.Features()
	fs.Egress = f
	return fs
}

type fakeSession struct {
	h    http.Handler
	done chan struct{}
}

func (s *fakeSession) Transport() http.RoundTripper { return handlerTransport{s.h} }
func (s *fakeSession) Done() <-chan struct{}        { return s.done }
func (s *fakeSession) Close() error                 { return nil }

type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	return w.Result(), nil
}

func (f *egressFake) CreateEgressHelper(ctx context.Context, sandbox string, spec runtime.Spec, args []string) (string, error) {
	spec.Network = runtime.Network{Mode: runtime.NetworkJoin, Name: sandbox}
	f.mu.Lock()
	f.guardArgs = append(f.guardArgs, args)
	f.mu.Unlock()
	return f.Create(ctx, spec)
}

func (f *egressFake) StartEgressHelper(ctx context.Context, helper string) error {
	if err := f.Start(ctx, helper); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noGuard {
		return errors.New("helper exited before its default drop was in force")
	}
	f.guards++
	return nil
}

func (f *egressFake) DetachNetwork(_ context.Context, id string, _ runtime.Network) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detached = append(f.detached, id)
	return nil
}

func (f *egressFake) AttachNetwork(_ context.Context, id string, _ runtime.Network) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attached == nil {
		f.attached = map[string]int{}
	}
	f.attached[id] = f.guards
	return nil
}

func (f *egressFake) HostAddresses(context.Context) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hostAddrs, nil
}

func (f *egressFake) HostResolvers(context.Context, runtime.Spec) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probes++
	return []string{"192.0.2.53:53"}, nil
}

func (f *egressFake) StartEgress(_ context.Context, helper string, args []string) (runtime.Session, error) {
	if c, err := f.Inspect(context.Background(), helper); err != nil || c.State != runtime.StateRunning {
		return nil, fmt.Errorf("helper %s not running: %v", helper, err)
	}
	s := &fakeSession{done: make(chan struct{}), h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stats" {
			_ = json.NewEncoder(w).Encode(egress.Stats{DNSAllowed: 3, DNSDenied: 2, ConnDenied: 1})
			return
		}
		var p egress.Enforced
		_ = json.NewDecoder(r.Body).Decode(&p)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.fail {
			http.Error(w, "nft failed", http.StatusInternalServerError)
			return
		}
		f.pushed = append(f.pushed, p.Policy)
		f.pushHost = append(f.pushHost, p.Host)
		_, _ = w.Write([]byte(`{"upstreams":["192.0.2.53:53"]}`))
	})}
	f.mu.Lock()
	f.starts++
	f.sessions = append(f.sessions, s)
	f.mu.Unlock()
	return s, nil
}

func (f *egressFake) state() (starts int, pushed []egress.Policy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts, slices.Clone(f.pushed)
}

func TestEgressLifecycle(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.Docker.AddCapabilities = append(c.Docker.AddCapabilities, "NET_RAW", "cap_net_admin")
	})
	f := &egressFake{Runtime: e.rt}
	e.m.d.rt = f
	req := validRequest()
	req.NetworkPolicy = &NetworkPolicy{DefaultAction: "deny", Egress: []json.RawMessage{json.RawMessage(`{"action":"allow","target":"pypi.org"}`)}}
	sb, cid := e.create(t, req)
	rec, _ := e.store.Sandbox(sb.ID)
	spec := e.rt.Spec(t, cid)
	// The sandbox owns its namespace on sandboxd's network, starts without
	// it, and gets it once the policy is in force.
	joined := runtime.Network{Mode: runtime.NetworkJoin, Name: containerName(sb.ID)}
	if spec.Network != (runtime.Network{Mode: runtime.NetworkIsolated, Name: DefaultNetwork}) || rec.EgressHelper == "" || e.rt.Spec(t, rec.EgressHelper).Network != joined {
		t.Fatalf("sandbox network %+v, helper %q", spec.Network, rec.EgressHelper)
	}
	f.mu.Lock()
	detached, attachedAt := slices.Clone(f.detached), f.attached[cid]
	f.mu.Unlock()
	if !slices.Equal(detached, []string{cid}) || attachedAt != 1 {
		t.Errorf("detached %v, attached after %d guards, want %s and 1", detached, attachedAt, cid)
	}
	f.mu.Lock()
	guardArgs := slices.Clone(f.guardArgs)
	f.mu.Unlock()
	if want := []string{"--sandbox", sb.ID, "--upstream", "192.0.2.53:53"}; len(guardArgs) != 1 || !slices.Equal(guardArgs[0], want) {
		t.Errorf("guard args %q, want %q", guardArgs, want)
	}
	caps := spec.Capabilities
	if slices.Contains(caps.Add, "NET_RAW") || slices.Contains(caps.Add, "NET_ADMIN") ||
		!slices.Contains(caps.Drop, "NET_RAW") || !slices.Contains(caps.Drop, "NET_ADMIN") {
		t.Errorf("a policed sandbox keeps %v (drops %v)", caps.Add, caps.Drop)
	}
	if h := e.rt.Spec(t, rec.EgressHelper); h.Labels[LabelEgressFor] != sb.ID || h.Labels[LabelEgressInstance] != e.m.d.instance || h.Labels[LabelInstance] != "" {
		t.Errorf("helper labels %v", h.Labels)
	}
	if !slices.Equal(rec.EgressUpstreams, []string{"192.0.2.53:53"}) {
		t.Errorf("upstreams kept: %v", rec.EgressUpstreams)
	}
	if _, pushed := f.state(); len(pushed) != 1 || pushed[0].Egress[0].Target != "pypi.org" {
		t.Fatalf("pushed %+v", pushed)
	}

	// A change goes to the daemon and the store.
	if _, err := e.m.Egress.ChangePolicy(t.Context(), sb.ID, PolicyPatch, bodyOf(`[{"action":"deny","target":"pypi.org"}]`)); err != nil {
		t.Fatalf("PATCH: %v", err)
	}
	if rec, _ := e.store.Sandbox(sb.ID); rec.NetworkPolicy.Egress[0].Action != egress.Deny {
		t.Errorf("stored policy %+v", rec.NetworkPolicy)
	}

	// A dead daemon is restarted with the stored policy; so is a removed
	// helper, replaced in the sandbox's namespace.
	waitPushes := func(starts, pushes int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, pushed := f.state()
			if s == starts && len(pushed) == pushes {
				if pushed[pushes-1].Egress[0].Action != egress.Deny {
					t.Errorf("re-applied %+v", pushed[pushes-1])
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("daemon not restarted: %d starts, %d pushes", s, len(pushed))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	f.mu.Lock()
	close(f.sessions[0].done)
	f.mu.Unlock()
	waitPushes(2, 3)
	if err := e.rt.Remove(context.Background(), rec.EgressHelper); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	close(f.sessions[1].done)
	f.mu.Unlock()
	waitPushes(3, 4)
	rec, _ = e.store.Sandbox(sb.ID)
	if !e.rt.Exists(rec.EgressHelper) || e.rt.Spec(t, rec.EgressHelper).Network != joined {
		t.Errorf("no new helper in the sandbox's namespace: %q", rec.EgressHelper)
	}
	f.mu.Lock()
	probes := f.probes
	f.mu.Unlock()
	if probes != 1 {
		t.Errorf("%d probes for the host's resolvers, want 1", probes)
	}

	if err := e.m.Sandboxes.Delete(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if e.rt.Exists(rec.EgressHelper) {
		t.Error("the helper survived the delete")
	}

	// A runtime whose network stack bypasses netfilter cannot be policed.
	e.m.d.defaults.base.RuntimeClass = "runsc"
	_, err := e.m.Sandboxes.Create(context.Background(), req)
	wantCode(t, err, KindInvalid, CodeInvalidParameter)
	e.m.d.defaults.base.RuntimeClass = ""

	// A policy the daemon cannot apply fails the create and leaves nothing.
	f.fail = true
	if _, err := e.m.Sandboxes.Create(context.Background(), req); err == nil {
		t.Fatal("create succeeded with a failing daemon")
	}
	if left, _ := e.rt.List(context.Background(), map[string]string{LabelEgressFor: ""}); len(left) != 0 {
		t.Errorf("%d helpers left after a failed create", len(left))
	}
}

// A helper whose default drop never comes into force (its guard fails or
// exits) fails the create before the sandbox is ever given its network.
func TestEgressNoGuardNoNetwork(t *testing.T) {
	e := newEnv(t, nil)
	f := &egressFake{Runtime: e.rt, noGuard: true}
	e.m.d.rt = f
	req := validRequest()
	req.NetworkPolicy = &NetworkPolicy{DefaultAction: "deny"}
	if _, err := e.m.Sandboxes.Create(context.Background(), req); err == nil {
		t.Fatal("create succeeded without the helper's default drop")
	}
	f.mu.Lock()
	attached, starts := len(f.attached), f.starts
	f.mu.Unlock()
	if attached != 0 || starts != 0 {
		t.Errorf("sandbox connected %d times, %d daemons started, before any drop was in force", attached, starts)
	}
	if left, _ := e.rt.List(context.Background(), nil); len(left) != 0 {
		t.Errorf("%d containers left after a failed create", len(left))
	}
}

func TestEgressDefaultPolicy(t *testing.T) {
	cfg := testConfig(t)
	cfg.Egress.DefaultPolicy = config.EgressPolicy{DefaultAction: "deny", Egress: []config.EgressRule{{Action: "allow", Target: "PyPI.org"}}}
	store, err := OpenStore(cfg.Store.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f := &egressFake{Runtime: runtimetest.New(time.Now)}
	m, err := New(cfg, f, store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb, err := m.Sandboxes.Create(context.Background(), validRequest())
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := store.Sandbox(sb.ID); rec.NetworkPolicy == nil || rec.NetworkPolicy.Egress[0].Target != "pypi.org" {
		t.Errorf("a create without networkPolicy got %+v, want the default", rec.NetworkPolicy)
	}
	req := validRequest()
	req.NetworkPolicy = &NetworkPolicy{DefaultAction: "allow"}
	sb, err = m.Sandboxes.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := store.Sandbox(sb.ID); rec.NetworkPolicy.DefaultAction != egress.Allow || len(rec.NetworkPolicy.Egress) != 0 {
		t.Errorf("the request's own policy was replaced: %+v", rec.NetworkPolicy)
	}

	for _, c := range []struct {
		rt runtime.Runtime
		dp config.EgressPolicy
	}{
		{f, config.EgressPolicy{DefaultAction: "block"}},
		{f, config.EgressPolicy{Egress: []config.EgressRule{{Action: "allow", Target: "a b"}}}},
		{runtimetest.New(time.Now), config.EgressPolicy{DefaultAction: "allow"}},
	} {
		cfg := testConfig(t)
		cfg.Egress.DefaultPolicy = c.dp
		store, err := OpenStore(cfg.Store.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(cfg, c.rt, store, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "default_policy") {
			t.Errorf("default_policy %+v: %v, want a start-up error", c.dp, err)
		}
		store.Close()
	}
}

// TestEgressStats: the verdict counts of a policed sandbox's daemon reach
// /metrics with its id; an unpoliced sandbox has no series.
func TestEgressStats(t *testing.T) {
	e := newEnv(t, nil)
	e.m.d.rt = &egressFake{Runtime: e.rt}
	e.create(t, validRequest())
	req := validRequest()
	req.NetworkPolicy = &NetworkPolicy{DefaultAction: "deny"}
	sb, _ := e.create(t, req)
	stats := e.m.Egress.EgressStats(context.Background())
	if want := (egress.Stats{DNSAllowed: 3, DNSDenied: 2, ConnDenied: 1}); len(stats) != 1 || stats[sb.ID] != want {
		t.Fatalf("stats %+v, want only %s: %+v", stats, sb.ID, want)
	}
	var b strings.Builder
	WriteEgressPrometheus(&b, stats)
	for _, line := range []string{
		`sandboxd_egress_dns_total{sandbox_id="` + sb.ID + `",verdict="denied"} 2`,
		`sandboxd_egress_dns_total{sandbox_id="` + sb.ID + `",verdict="allowed"} 3`,
		`sandboxd_egress_connections_total{sandbox_id="` + sb.ID + `",verdict="denied"} 1`,
		"# TYPE sandboxd_egress_connections_total counter",
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, b.String())
		}
	}
}

// TestEgressUpstreams: the daemon's resolvers are the configured ones,
// else Docker's embedded resolver on an operator's network, else the
// host's as the engine gives them to its default network, asked once.
func TestEgressUpstreams(t *testing.T) {
	for _, c := range []struct {
		mode   string
		ups    []string
		want   []string
		probes int
	}{
		{"", nil, []string{"192.0.2.53:53"}, 1},
		{"bridge", nil, []string{"192.0.2.53:53"}, 1},
		{"mynet", nil, []string{embeddedResolver}, 0},
		{"", []string{"198.51.100.53"}, []string{"198.51.100.53"}, 0},
	} {
		e := newEnv(t, func(cfg *config.Config) {
			cfg.Docker.NetworkMode = c.mode
			cfg.Egress.DNSUpstream = c.ups
		})
		f := &egressFake{Runtime: e.rt}
		e.m.d.rt = f
		req := validRequest()
		req.NetworkPolicy = &NetworkPolicy{DefaultAction: "deny"}
		for range 2 {
			sb, _ := e.create(t, req)
			if rec, _ := e.store.Sandbox(sb.ID); !slices.Equal(rec.EgressUpstreams, c.want) {
				t.Errorf("network_mode %q, dns_upstream %v: upstreams %v, want %v", c.mode, c.ups, rec.EgressUpstreams, c.want)
			}
		}
		f.mu.Lock()
		probes := f.probes
		f.mu.Unlock()
		if probes != c.probes {
			t.Errorf("network_mode %q, dns_upstream %v: %d probes, want %d", c.mode, c.ups, probes, c.probes)
		}
	}
}

// TestSweepEgress: a policed sandbox left without a daemon (its
// re-application failed at start-up) gets one at the next sweep.
func TestSweepEgress(t *testing.T) {
	e := newEnv(t, nil)
	f := &egressFake{Runtime: e.rt}
	e.m.d.rt = f
	req := validRequest()
	req.NetworkPolicy = &NetworkPolicy{DefaultAction: "deny"}
	sb, _ := e.create(t, req)
	e.m.Egress.links.drop(sb.ID) // as after a restart of sandboxd
	e.m.Expiry.Sweep(context.Background())
	if starts, pushed := f.state(); starts != 2 || len(pushed) != 2 {
		t.Errorf("after a sweep: %d daemon starts, %d pushes; want 2 and 2", starts, len(pushed))
	}
	e.m.Expiry.Sweep(context.Background())
	if starts, _ := f.state(); starts != 2 {
		t.Errorf("a sweep restarted a live daemon: %d starts", starts)
	}
}

// bodyOf is a policy write's body.
func bodyOf(s string) func() ([]byte, error) {
	return func() ([]byte, error) { return []byte(s), nil }
}

// isKind reports whether err is a lifecycle *Error of kind k.
func isKind(err error, k Kind) bool {
	e, ok := AsError(err)
	return ok && e.Kind == k
}

// Every daemon gets the host's own addresses with its policy, and again
// when they change (read at each reaper sweep): they are closed like the
// gateway.
func TestEgressHostAddresses(t *testing.T) {
	e := newEnv(t, nil)
	f := &egressFake{Runtime: e.rt, hostAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.2")}}
	e.m.d.rt = f
	req := validRequest()
	req.NetworkPolicy = &NetworkPolicy{DefaultAction: "allow"}
	e.create(t, req)
	pushes := func() [][]netip.Addr {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Clone(f.pushHost)
	}
	if got := pushes(); len(got) != 1 || !slices.Equal(got[0], f.hostAddrs) {
		t.Fatalf("host addresses pushed %v, want [%v]", got, f.hostAddrs)
	}
	e.m.Egress.sweep(t.Context())
	if got := pushes(); len(got) != 1 {
		t.Fatalf("a sweep without a change pushed again: %v", got)
	}
	f.mu.Lock()
	f.hostAddrs = []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("198.51.100.7")}
	f.mu.Unlock()
	e.m.Egress.sweep(t.Context())
	if got := pushes(); len(got) != 2 || !slices.Equal(got[1], f.hostAddrs) {
		t.Fatalf("after the host got an address, pushed %v", got)
	}
}
