package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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

// egressLinks are the live control sessions to the egress daemons, by
// sandbox id.
type egressLinks struct {
	mu   sync.Mutex
	byID map[string]*egressLink
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

// initEgress checks [egress] default_policy.
func (m *Manager) initEgress() error {
	dp := m.cfg.Egress.DefaultPolicy
	if dp.DefaultAction == "" && len(dp.Egress) == 0 {
		return nil
	}
	p := egress.Policy{DefaultAction: dp.DefaultAction}
	for _, r := range dp.Egress {
		p.Egress = append(p.Egress, egress.Rule{Action: r.Action, Target: r.Target})
	}
	n, err := egress.Normalize(p)
	if err != nil {
		return fmt.Errorf("config [egress] default_policy: %w", err)
	}
	if _, ok := m.egressRuntime(); !ok && (n.DefaultAction != egress.Deny || len(n.Egress) > 0) {
		return errors.New("config [egress] default_policy: this runtime enforces only deny-all")
	}
	m.defaultPolicy = &n
	return nil
}

// requestPolicy is a create request's policy, else the configured default.
func (m *Manager) requestPolicy(np *NetworkPolicy) (*egress.Policy, error) {
	if np == nil && m.defaultPolicy != nil {
		p := *m.defaultPolicy
		p.Egress = slices.Clone(p.Egress)
		return &p, nil
	}
	return parsePolicy(np)
}

// egressRuntime returns the runtime's egress support, if it has any.
func (m *Manager) egressRuntime() (runtime.Egress, bool) {
	er, ok := m.rt.(runtime.Egress)
	return er, ok
}

// planEgress decides how p's policy is enforced. A runtime without egress
// helpers can enforce only deny-all, as a sandbox without a network.
func (m *Manager) planEgress(p *createPlan, pol *egress.Policy) error {
	if pol == nil {
		return nil
	}
	if _, ok := m.egressRuntime(); !ok {
		if pol.DefaultAction != egress.Deny || len(pol.Egress) > 0 {
			return errf(KindInvalid, CodeInvalidParameter, "networkPolicy: this runtime enforces only {\"defaultAction\":\"deny\"} with no egress rules (a sandbox without network)")
		}
		p.spec.Network = runtime.Network{Mode: runtime.NetworkNone}
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

// startEgress creates the helper of a policed sandbox, applies its policy
// and points the sandbox's container at the helper's network namespace.
func (m *Manager) startEgress(ctx context.Context, p *createPlan) error {
	if p.rec.NetworkPolicy == nil {
		return nil
	}
	er, _ := m.egressRuntime()
	hid, err := er.CreateEgressHelper(ctx, runtime.Spec{
		Name: egressName(p.rec.ID), Image: p.spec.Image, Platform: p.spec.Platform,
		Labels:  map[string]string{LabelEgressFor: p.rec.ID, LabelEgressInstance: m.instance},
		Network: m.helperNetwork(p.spec.Network),
	})
	if err != nil {
		return fmt.Errorf("egress helper: %w", err)
	}
	p.rec.EgressHelper = hid
	ups, err := m.pushPolicy(ctx, &p.rec, *p.rec.NetworkPolicy)
	if err != nil {
		return err
	}
	// Kept so that a restarted daemon never reads the resolver file the
	// sandbox can write.
	p.rec.EgressUpstreams = ups
	p.spec.Network = runtime.Network{Mode: runtime.NetworkJoin, Name: hid}
	return nil
}

// pushPolicy applies pol in the sandbox's helper, starting the daemon if it
// is not running, and returns the upstream resolvers it forwards to.
func (m *Manager) pushPolicy(ctx context.Context, rec *Record, pol egress.Policy) ([]string, error) {
	link := m.egress.get(rec.ID)
	sess, err := m.egressSession(ctx, rec, link)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(pol)
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
// needed; the caller holds no lock on link.
func (m *Manager) egressSession(ctx context.Context, rec *Record, link *egressLink) (runtime.Session, error) {
	link.mu.Lock()
	defer link.mu.Unlock()
	if link.sess != nil {
		select {
		case <-link.sess.Done():
		default:
			return link.sess, nil
		}
	}
	er, ok := m.egressRuntime()
	if !ok {
		return nil, errors.New("the runtime has no egress support")
	}
	args := []string{"--sandbox", rec.ID}
	ups := rec.EgressUpstreams
	if len(m.cfg.Egress.DNSUpstream) > 0 {
		ups = m.cfg.Egress.DNSUpstream
	}
	if len(ups) > 0 {
		args = append(args, "--upstream", strings.Join(ups, ","))
	}
	sess, err := er.StartEgress(ctx, rec.EgressHelper, args)
	if err != nil {
		return nil, err
	}
	link.sess = sess
	go m.watchEgress(rec.ID, link, sess)
	return sess, nil
}

// watchEgress restores the policy when the daemon dies (killed, crashed):
// the firewall stays in the namespace meanwhile, so the sandbox only loses
// name resolution until the daemon is back.
func (m *Manager) watchEgress(id string, link *egressLink, sess runtime.Session) {
	<-sess.Done()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 30*time.Second) {
		m.egress.mu.Lock()
		current := m.egress.byID[id] == link
		m.egress.mu.Unlock()
		link.mu.Lock()
		replaced := link.sess != sess
		link.mu.Unlock()
		if !current || replaced {
			return
		}
		rec, err := m.store.Sandbox(id)
		if err != nil || rec.NetworkPolicy == nil || rec.State != recordReady {
			return // gone, or a create that fails by itself
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = m.pushPolicy(ctx, rec, *rec.NetworkPolicy)
		cancel()
		if err == nil {
			m.log.Info("egress daemon restarted; policy re-applied", "sandbox_id", id)
			return
		}
		m.log.Warn("egress daemon down; sandbox has no name resolution", "sandbox_id", id, "err", err)
		time.Sleep(delay)
	}
}

// restoreEgress starts the daemons of policed sandboxes after a start of
// sandboxd (their sessions ended with the previous process) and removes
// helpers whose sandbox is gone.
func (m *Manager) restoreEgress(ctx context.Context) {
	recs, err := m.store.Sandboxes()
	if err != nil {
		return
	}
	helpers, err := m.rt.List(ctx, map[string]string{LabelEgressInstance: m.instance})
	if err != nil {
		m.log.Warn("list egress helpers", "err", err)
	}
	for _, h := range helpers {
		id := h.Labels[LabelEgressFor]
		if slices.ContainsFunc(recs, func(r *Record) bool { return r.ID == id && r.State == recordReady }) {
			continue
		}
		m.log.Warn("removing egress helper of a gone sandbox", "sandbox_id", id, "container", h.ID)
		if err := m.rt.Remove(ctx, h.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			m.log.Error("remove egress helper", "container", h.ID, "err", err)
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
			if _, err := m.pushPolicy(ctx, rec, *rec.NetworkPolicy); err != nil {
				m.log.Warn("re-apply egress policy", "sandbox_id", rec.ID, "err", err)
			}
		}()
	}
}

// removeEgress ends a sandbox's egress session and removes its helper.
func (m *Manager) removeEgress(ctx context.Context, rec *Record) error {
	m.egress.drop(rec.ID)
	if rec.NetworkPolicy == nil {
		return nil
	}
	if err := m.rt.Remove(ctx, egressName(rec.ID)); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return err
	}
	return nil
}
