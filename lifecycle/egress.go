package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/egress"
)

// LabelEgressFor marks an egress helper with its sandbox's id. It is the
// label upstream puts on its egress sidecar, so upstream tooling finds it.
const LabelEgressFor = "opensandbox.io/egress-sidecar-for"

// LabelEgressInstance marks the helpers of one sandboxd instance. Helpers
// do not carry LabelInstance: they are not sandboxes.
const LabelEgressInstance = "opensandbox.io/sandboxd-egress-instance"

func egressName(id string) string { return containerName(id) + "-egress" }

// helperLabels are the labels of sandbox id's egress helper.
func helperLabels(id, instance string) map[string]string {
	return map[string]string{LabelEgressFor: id, LabelEgressInstance: instance}
}

// egressLinks are the live control sessions to the egress daemons, by
// sandbox id.
type egressLinks struct {
	mu   sync.Mutex
	byID map[string]*egressLink

	resolversMu   sync.Mutex
	hostResolvers []string // found once, by egressUpstreams
}

type egressLink struct {
	change sync.Mutex // serialises policy changes of one sandbox
	mu     sync.Mutex // guards sess
	sess   runtime.Session
}

func (l *egressLinks) get(id string) *egressLink {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID == nil {
		l.byID = map[string]*egressLink{}
	}
	k := l.byID[id]
	if k == nil {
		k = &egressLink{}
		l.byID[id] = k
	}
	return k
}

// drop forgets a sandbox's link and ends its session.
func (l *egressLinks) drop(id string) {
	l.mu.Lock()
	k := l.byID[id]
	delete(l.byID, id)
	l.mu.Unlock()
	if k != nil {
		k.mu.Lock()
		if k.sess != nil {
			k.sess.Close()
		}
		k.mu.Unlock()
	}
}

// parsePolicy validates a create request's networkPolicy (nil: none):
// rules missing action or target are 422 as upstream's schema says, bad
// values 400.
func parsePolicy(np *NetworkPolicy) (*egress.Policy, error) {
	if np == nil {
		return nil, nil
	}
	p := egress.Policy{DefaultAction: np.DefaultAction}
	for i, raw := range np.Egress {
		var r struct {
			Action *string `json:"action"`
			Target *string `json:"target"`
		}
		loc := []string{"body", "networkPolicy", "egress", fmt.Sprint(i)}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, &Error{Kind: KindUnprocessable, Code: CodeInvalidParameter, Message: "a network rule must be an object with string action and target", Field: loc}
		}
		if r.Action == nil || r.Target == nil {
			return nil, &Error{Kind: KindUnprocessable, Code: CodeInvalidParameter, Message: "a network rule needs action and target", Field: loc}
		}
		if *r.Target == "" {
			return nil, &Error{Kind: KindUnprocessable, Code: CodeInvalidParameter, Message: "String should have at least 1 character", Field: append(loc, "target")}
		}
		p.Egress = append(p.Egress, egress.Rule{Action: *r.Action, Target: *r.Target})
	}
	n, err := egress.Normalize(p)
	if err != nil {
		return nil, errf(KindInvalid, CodeInvalidParameter, "networkPolicy: %v", err)
	}
	return &n, nil
}

// Egress is the service of egress policing: it plans how a sandbox's
// policy is enforced, makes and starts its helper, keeps a control
// session to its daemon, restores the daemon when it dies, and changes
// the policy (egress_policy.go).
type Egress struct {
	*deps
	links         egressLinks
	host          hostAddrs
	defaultPolicy *egress.Policy // [egress] default_policy
}

// newEgress returns the Egress service, having checked [egress]
// default_policy.
func newEgress(d *deps) (*Egress, error) {
	m := &Egress{deps: d}
	dp := m.cfg.Egress.DefaultPolicy
	if dp.DefaultAction == "" && len(dp.Egress) == 0 {
		return m, nil
	}
	p := egress.Policy{DefaultAction: dp.DefaultAction}
	for _, r := range dp.Egress {
		p.Egress = append(p.Egress, egress.Rule{Action: r.Action, Target: r.Target})
	}
	n, err := egress.Normalize(p)
	if err != nil {
		return nil, fmt.Errorf("config [egress] default_policy: %w", err)
	}
	if _, ok := m.egressRuntime(); !ok && (n.DefaultAction != egress.Deny || len(n.Egress) > 0) {
		if err := m.checkAddressPolicy(n); err != nil {
			return nil, fmt.Errorf("config [egress] default_policy: %w", err)
		}
	}
	m.defaultPolicy = &n
	return m, nil
}

// requestPolicy is a create request's policy, else the configured default.
func (eg *Egress) requestPolicy(np *NetworkPolicy) (*egress.Policy, error) {
	if np == nil && eg.defaultPolicy != nil {
		p := *eg.defaultPolicy
		p.Egress = slices.Clone(p.Egress)
		return &p, nil
	}
	return parsePolicy(np)
}

// egressRuntime returns the runtime's egress support, if it has any.
func (eg *Egress) egressRuntime() (runtime.Egress, bool) {
	er := eg.rt.Features().Egress
	return er, er != nil
}

// checkAddressPolicy refuses pol on a runtime without egress helpers
// unless the runtime enforces it itself (runtime.AddressPolicies).
func (eg *Egress) checkAddressPolicy(pol egress.Policy) error {
	ap := eg.rt.Features().AddressPolicies
	if ap == nil {
		return errf(KindInvalid, CodeInvalidParameter, "networkPolicy: this runtime enforces only {\"defaultAction\":\"deny\"} with no egress rules (a sandbox without network)")
	}
	if err := ap.CheckAddressPolicy(pol); err != nil {
		return errf(KindInvalid, CodeInvalidParameter, "%v", err)
	}
	return nil
}

// planEgress decides how p's policy is enforced. A runtime without egress
// helpers enforces deny-all as a sandbox without a network, and address
// rules only if it can itself (runtime.AddressPolicies); the policy is not
// the record's then, as there is no helper to push it to.
func (eg *Egress) planEgress(p *createPlan, pol *egress.Policy) error {
	if pol == nil {
		return nil
	}
	if _, ok := eg.egressRuntime(); !ok {
		if pol.DefaultAction == egress.Deny && len(pol.Egress) == 0 {
			p.spec.Network = runtime.Network{Mode: runtime.NetworkNone}
			return nil
		}
		if err := eg.checkAddressPolicy(*pol); err != nil {
			return err
		}
		if p.spec.Network.Mode != runtime.NetworkNone {
			p.spec.Network.Policy = pol
		}
		return nil
	}
	if p.spec.Network.Mode == runtime.NetworkNone {
		// Nothing to police: no network at all is stricter than any policy.
		return nil
	}
	if rt := p.spec.RuntimeClass; rt != "" && rt != "runc" {
		// gVisor and VM runtimes send the sandbox's packets past the
		// namespace's netfilter hooks: the firewall would see nothing.
		return errf(KindInvalid, CodeInvalidParameter, "networkPolicy is not supported with [docker] runtime = %q: its network stack bypasses the egress firewall", rt)
	}
	p.rec.NetworkPolicy = pol
	// Capabilities that would let the sandbox rewrite or sidestep the
	// firewall it shares with the helper (NET_RAW can set socket marks).
	// Dropped explicitly too: Docker's default set, which a config without
	// drop_capabilities keeps, has NET_RAW.
	caps := &p.spec.Capabilities
	caps.Add = slices.DeleteFunc(slices.Clone(caps.Add), func(c string) bool {
		return c == "NET_ADMIN" || c == "NET_RAW" || c == "ALL"
	})
	caps.Drop = append(slices.Clone(caps.Drop), "NET_ADMIN", "NET_RAW")
	return nil
}

// embeddedResolver is Docker's resolver on user networks. It forwards
// from the sandbox's own namespace, where the firewall drops what it
// sends, so on a user network of the operator's it answers only container
// names unless [egress] dns_upstream is set.
const embeddedResolver = "127.0.0.11:53"

// egressUpstreams settles the resolvers a policed sandbox's daemon
// forwards to, before any process of the sandbox runs (its resolver file is
// its own to rewrite): the configured ones, else the host's as Docker gives
// them to its bridge network (found once), else Docker's embedded resolver
// on an operator's user network.
func (eg *Egress) egressUpstreams(ctx context.Context, spec runtime.Spec) ([]string, error) {
	if ups := eg.cfg.Egress.DNSUpstream; len(ups) > 0 {
		return slices.Clone(ups), nil
	}
	if spec.Network.Mode == runtime.NetworkNamed {
		return []string{embeddedResolver}, nil
	}
	eg.links.resolversMu.Lock()
	defer eg.links.resolversMu.Unlock()
	if eg.links.hostResolvers == nil {
		er, _ := eg.egressRuntime()
		ups, err := er.HostResolvers(ctx, runtime.Spec{
			Image: spec.Image, Platform: spec.Platform,
			Labels: map[string]string{LabelEgressFor: "", LabelEgressInstance: eg.instance},
		})
		if err != nil {
			return nil, fmt.Errorf("find the host's resolvers: %w", err)
		}
		eg.links.hostResolvers = ups
	}
	return slices.Clone(eg.links.hostResolvers), nil
}

// prepareEgress creates a policed sandbox's helper beside the create of
// its container (the helper names the sandbox's container, which Docker
// resolves only when the helper starts). The returned function, given the
// created container (or "" if its create failed), waits for the helper and
// makes the container leave its network, so that it starts with loopback
// only and gets its interface once the firewall is in force.
func (eg *Egress) prepareEgress(ctx context.Context, p *createPlan) (detach func(cid string) error) {
	if p.rec.NetworkPolicy == nil {
		return func(string) error { return nil }
	}
	type helper struct {
		id  string
		ups []string
		err error
	}
	created := make(chan helper, 1)
	rec := p.rec // the goroutine's own copy
	go func() {
		var h helper
		if h.ups, h.err = eg.egressUpstreams(ctx, p.spec); h.err == nil {
			rec.EgressUpstreams = h.ups
			h.id, h.err = eg.createHelper(ctx, &rec, p.spec.Image, p.spec.Platform)
		}
		created <- h
	}()
	return func(cid string) error {
		var detached error
		if cid != "" {
			er, _ := eg.egressRuntime()
			detached = er.DetachNetwork(ctx, cid, p.spec.Network)
		}
		h := <-created
		p.rec.EgressUpstreams, p.rec.EgressHelper = h.ups, h.id
		return errors.Join(detached, h.err)
	}
}

// startEgress starts, beside the agent's start, what polices a started
// sandbox: its helper, whose guard puts the default drop in force, then the
// sandbox's network beside the daemon's start, then the policy. The
// returned function waits for it. The sandbox owns the namespace, so its
// firewall outlives the helper.
func (eg *Egress) startEgress(ctx context.Context, p *createPlan) func() error {
	if p.rec.NetworkPolicy == nil {
		return func() error { return nil }
	}
	rec := p.rec // the goroutine's own copy: the agent's start reads p.rec
	done := make(chan error, 1)
	go func() {
		er, _ := eg.egressRuntime()
		// Never connect before the drop is in force: the interface would
		// be unpoliced until it is.
		if err := er.StartEgressHelper(ctx, egressName(rec.ID)); err != nil {
			done <- err
			return
		}
		connected := make(chan error, 1)
		go func() { connected <- er.AttachNetwork(ctx, rec.ContainerID, p.spec.Network) }()
		_, err := eg.egressSession(ctx, &rec, eg.links.get(rec.ID))
		// The policy comes after the network: it also points the resolver
		// file, rewritten by Docker on connect, at the daemon.
		if err = errors.Join(<-connected, err); err == nil {
			_, err = eg.pushPolicy(ctx, &rec, *rec.NetworkPolicy)
		}
		done <- err
	}()
	return func() error { return <-done }
}

// egressArgs are the daemon's arguments for rec, the guard's as well.
func (eg *Egress) egressArgs(rec *Record) []string {
	ups := rec.EgressUpstreams
	if len(eg.cfg.Egress.DNSUpstream) > 0 {
		ups = eg.cfg.Egress.DNSUpstream
	}
	return []string{"--sandbox", rec.ID, "--upstream", strings.Join(ups, ",")}
}

// createHelper creates the egress helper of rec's container (by name: it
// may not exist yet) from image.
func (eg *Egress) createHelper(ctx context.Context, rec *Record, image, platform string) (string, error) {
	er, _ := eg.egressRuntime()
	hid, err := er.CreateEgressHelper(ctx, containerName(rec.ID), runtime.Spec{
		Name: egressName(rec.ID), Image: image, Platform: platform,
		Labels: helperLabels(rec.ID, eg.instance),
	}, eg.egressArgs(rec))
	if err != nil {
		return "", fmt.Errorf("egress helper: %w", err)
	}
	return hid, nil
}

// pushPolicy applies pol in the sandbox's helper, starting the daemon if it
// is not running, and returns the upstream resolvers it forwards to.
func (eg *Egress) pushPolicy(ctx context.Context, rec *Record, pol egress.Policy) ([]string, error) {
	link := eg.links.get(rec.ID)
	sess, err := eg.egressSession(ctx, rec, link)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(egress.Enforced{Policy: pol, Host: eg.hostAddresses(ctx)})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://egress/policy", bytes.NewReader(body))
	resp, err := sess.Transport().RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("egress daemon: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("egress daemon: %s", strings.TrimSpace(string(msg)))
	}
	var out struct {
		Upstreams []string `json:"upstreams"`
	}
	if err := json.Unmarshal(msg, &out); err != nil {
		return nil, fmt.Errorf("egress daemon answer: %w", err)
	}
	return out.Upstreams, nil
}

// egressSession returns the link's live session, starting the daemon if
// needed, in a new helper if the old one is gone; the caller holds no lock
// on link.
func (eg *Egress) egressSession(ctx context.Context, rec *Record, link *egressLink) (runtime.Session, error) {
	link.mu.Lock()
	defer link.mu.Unlock()
	if link.sess != nil {
		select {
		case <-link.sess.Done():
		default:
			return link.sess, nil
		}
	}
	er, ok := eg.egressRuntime()
	if !ok {
		return nil, errors.New("the runtime has no egress support")
	}
	args := eg.egressArgs(rec)
	sess, err := er.StartEgress(ctx, egressName(rec.ID), args)
	if err != nil {
		if rerr := eg.replaceHelper(ctx, rec); rerr != nil {
			return nil, fmt.Errorf("%w; %w", err, rerr)
		}
		if sess, err = er.StartEgress(ctx, egressName(rec.ID), args); err != nil {
			return nil, err
		}
	}
	link.sess = sess
	go eg.watchEgress(rec.ID, link, sess)
	return sess, nil
}

// replaceHelper makes a new helper for a sandbox whose helper is gone or
// stopped (killed, removed by hand). The sandbox kept its namespace, its
// interfaces and the firewall in force when the old daemon died: it has
// reached nothing the policy denies meanwhile, and none of its processes
// is restarted.
func (eg *Egress) replaceHelper(ctx context.Context, rec *Record) error {
	if h, err := eg.rt.Inspect(ctx, egressName(rec.ID)); err == nil && h.State == runtime.StateRunning {
		return nil // the daemon failed in a live helper: not ours to replace
	} else if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return err
	}
	sb, err := eg.rt.Inspect(ctx, rec.ContainerID)
	if err != nil {
		return err
	}
	er, _ := eg.egressRuntime()
	if sb.State != runtime.StateRunning {
		return fmt.Errorf("sandbox container is %s: its egress helper is replaced once it runs", sb.State)
	}
	if err := eg.removeLabelled(ctx, helperLabels(rec.ID, eg.instance)); err != nil {
		return err
	}
	var platform string
	if rec.Platform != nil {
		platform = rec.Platform.OS + "/" + rec.Platform.Arch
	}
	hid, err := eg.createHelper(ctx, rec, sb.Image, platform)
	if err != nil {
		return err
	}
	if err := er.StartEgressHelper(ctx, egressName(rec.ID)); err != nil {
		return err
	}
	rec.EgressHelper = hid
	if _, err := eg.store.UpdateSandbox(rec.ID, func(r *Record) error { r.EgressHelper = hid; return nil }); err != nil {
		return err
	}
	eg.log.Warn("egress helper was gone; replaced it", "sandbox_id", rec.ID, "container", hid)
	return nil
}

// reapplyPolicy pushes a sandbox's stored policy, read under the lock that
// orders its changes, so that it never undoes a change made meanwhile.
func (eg *Egress) reapplyPolicy(ctx context.Context, id string) (bool, error) {
	link := eg.links.get(id)
	link.change.Lock()
	defer link.change.Unlock()
	rec, err := eg.store.Sandbox(id)
	if err != nil || rec.NetworkPolicy == nil || rec.State != recordReady {
		return false, nil // gone, or a create that fails by itself
	}
	_, err = eg.pushPolicy(ctx, rec, *rec.NetworkPolicy)
	return true, err
}

// watchEgress restores the policy when the daemon dies (killed, crashed,
// its helper gone): the firewall stays in the namespace meanwhile, so the
// sandbox only loses name resolution and 80/443 until the daemon is back.
func (eg *Egress) watchEgress(id string, link *egressLink, sess runtime.Session) {
	<-sess.Done()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 30*time.Second) {
		eg.links.mu.Lock()
		current := eg.links.byID[id] == link
		eg.links.mu.Unlock()
		link.mu.Lock()
		replaced := link.sess != sess
		link.mu.Unlock()
		if !current || replaced {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		policed, err := eg.reapplyPolicy(ctx, id)
		cancel()
		if !policed {
			return
		}
		if err == nil {
			eg.log.Info("egress daemon restarted; policy re-applied", "sandbox_id", id)
			return
		}
		eg.log.Warn("egress daemon down; sandbox has no name resolution", "sandbox_id", id, "err", err)
		time.Sleep(delay)
	}
}

// sweep restores, at each reaper sweep, the daemon of every policed
// sandbox that has none: one whose re-application failed at start-up, or
// whose watcher gave up; and gives every daemon the host's addresses when
// they changed.
func (eg *Egress) sweep(ctx context.Context) {
	hostChanged := eg.refreshHost(ctx)
	recs, err := eg.store.Sandboxes()
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, rec := range recs {
		if rec.NetworkPolicy == nil || rec.State != recordReady {
			continue
		}
		link := eg.links.get(rec.ID)
		link.mu.Lock()
		live := link.sess != nil
		link.mu.Unlock()
		if live && !hostChanged {
			continue // alive, or its watcher is on it
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if _, err := eg.reapplyPolicy(ctx, rec.ID); err != nil {
				eg.log.Warn("re-apply egress policy", "sandbox_id", rec.ID, "err", err)
			}
		})
	}
	wg.Wait()
}

// Restore starts the daemons of policed sandboxes after a start of
// sandboxd (their sessions ended with the previous process) and removes
// helpers whose sandbox is gone. idle are the sandbox ids of the pools'
// idle members, whose daemons their pools start.
func (eg *Egress) Restore(ctx context.Context, idle map[string]bool) {
	recs, err := eg.store.Sandboxes()
	if err != nil {
		return
	}
	helpers, err := eg.rt.List(ctx, map[string]string{LabelEgressInstance: eg.instance})
	if err != nil {
		eg.log.Warn("list egress helpers", "err", err)
	}
	for _, h := range helpers {
		id := h.Labels[LabelEgressFor]
		if idle[id] || slices.ContainsFunc(recs, func(r *Record) bool { return r.ID == id && r.State == recordReady }) {
			continue
		}
		eg.log.Warn("removing egress helper of a gone sandbox", "sandbox_id", id, "container", h.ID)
		if err := eg.rt.Remove(ctx, h.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			eg.log.Error("remove egress helper", "container", h.ID, "err", err)
		}
	}
	// A few at a time, in the background: until its daemon is back, a
	// sandbox only lacks name resolution, and start-up need not wait.
	sem := make(chan struct{}, 8)
	for _, rec := range recs {
		if rec.NetworkPolicy == nil || rec.State != recordReady {
			continue
		}
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if _, err := eg.reapplyPolicy(ctx, rec.ID); err != nil {
				eg.log.Warn("re-apply egress policy", "sandbox_id", rec.ID, "err", err)
			}
		}()
	}
}

// removeEgress ends a sandbox's egress session and removes its helper.
func (eg *Egress) removeEgress(ctx context.Context, rec *Record) error {
	eg.links.drop(rec.ID)
	if rec.NetworkPolicy == nil {
		return nil
	}
	if err := eg.removeLabelled(ctx, helperLabels(rec.ID, eg.instance)); err != nil {
		return err
	}
	return nil
}

// hostAddrs are the host's own addresses as last read: every daemon keeps
// them closed, as it keeps the sandbox's gateway. A policed sandbox
// reaches the host through its gateway at any of them (the host's LAN
// interface, a bridge of another network), under defaultAction allow or
// through an allowed name that resolves to one.
type hostAddrs struct {
	mu    sync.Mutex
	known bool
	addrs []netip.Addr
}

// hostAddresses returns the host's addresses, read the first time.
func (eg *Egress) hostAddresses(ctx context.Context) []netip.Addr {
	eg.host.mu.Lock()
	known, addrs := eg.host.known, eg.host.addrs
	eg.host.mu.Unlock()
	if !known {
		eg.refreshHost(ctx)
		eg.host.mu.Lock()
		addrs = eg.host.addrs
		eg.host.mu.Unlock()
	}
	return addrs
}

// refreshHost reads the host's addresses again (each reaper sweep) and
// reports whether they changed since the last read, so that the daemons
// get them. A failed read keeps the last ones.
func (eg *Egress) refreshHost(ctx context.Context) bool {
	er, ok := eg.egressRuntime()
	if !ok {
		return false
	}
	addrs, err := er.HostAddresses(ctx)
	if err != nil {
		eg.log.Warn("read the host's addresses", "err", err)
		return false
	}
	eg.host.mu.Lock()
	defer eg.host.mu.Unlock()
	changed := eg.host.known && !slices.Equal(eg.host.addrs, addrs)
	eg.host.known, eg.host.addrs = true, addrs
	return changed
}
