package lifecycle

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

// Codes of the egress policy errors. Upstream's egress API answers them
// as text (api egress.go), so they appear in sandboxd's log only.
const (
	CodeNoEgressPolicy = "EGRESS::NO_POLICY"
	CodeEgressFailed   = "EGRESS::APPLY_FAILED"
)

// PolicyOp is a write of upstream's egress API (specs/egress-api.yaml).
type PolicyOp int

const (
	// PolicyReplace sets the whole policy; an empty body resets it to
	// deny-all (POST, PUT).
	PolicyReplace PolicyOp = iota
	// PolicyPatch merges rules into it (PATCH).
	PolicyPatch
	// PolicyRemove drops the rules of some targets (DELETE).
	PolicyRemove
)

// PolicyChange is the outcome of a policy write.
type PolicyChange struct {
	Policy egress.Policy
	// Reason is upstream's reason field: a reset to deny-all, or a removal
	// that matched no target ("" otherwise).
	Reason string
	// Changed is false when the write changed nothing (a removal that
	// matched no target).
	Changed bool
}

// Policy returns the egress policy of sandbox id as its egress API
// reports it: allow-all when it has none. sandboxd answers that API
// itself, so nothing in the sandbox can reach or change the policy.
func (eg *Egress) Policy(id string) (egress.Policy, error) {
	rec, err := eg.policyRecord(id)
	if err != nil {
		return egress.Policy{}, err
	}
	if rec.NetworkPolicy == nil {
		return egress.Policy{DefaultAction: egress.Allow, Egress: []egress.Rule{}}, nil
	}
	return *rec.NetworkPolicy, nil
}

// policyRecord is the record of a sandbox whose policy the egress API
// reads or writes.
func (eg *Egress) policyRecord(id string) (*Record, error) {
	rec, err := eg.record(id)
	if err != nil {
		return nil, errf(KindNotFound, CodeSandboxNotFound, "sandbox not found")
	}
	if _, ok := eg.egressRuntime(); !ok {
		// No sidecar to answer, as upstream has none on such a runtime; the
		// policy given at create is the runtime's (a NetworkPolicy), fixed.
		return nil, errf(KindNotImplemented, CodeAPINotSupported, "egress API not supported on the %s runtime: its policy is set at create only", eg.rt.Name())
	}
	return rec, nil
}

// ChangePolicy applies a write to sandbox id's policy, with upstream's
// error texts. body is read only once the sandbox is known to have a
// policy to change; a failure to read it is KindTooLarge.
func (eg *Egress) ChangePolicy(ctx context.Context, id string, op PolicyOp, body func() ([]byte, error)) (PolicyChange, error) {
	rec, err := eg.policyRecord(id)
	if err != nil {
		return PolicyChange{}, err
	}
	if rec.NetworkPolicy == nil || rec.State != recordReady {
		return PolicyChange{}, errf(KindConflict, CodeNoEgressPolicy, "sandbox %s has no egress policy to change: create it with networkPolicy", id)
	}
	data, err := body()
	if err != nil {
		return PolicyChange{}, &Error{Kind: KindTooLarge, Code: CodeInvalidParameter, Message: "request body too large", Err: err}
	}
	link := eg.links.get(id)
	// Changes of one sandbox apply in order; lookups are not held up.
	link.change.Lock()
	defer link.change.Unlock()
	if rec, err = eg.record(id); err != nil || rec.NetworkPolicy == nil {
		return PolicyChange{}, errf(KindNotFound, CodeSandboxNotFound, "sandbox not found")
	}
	c, err := changePolicy(op, *rec.NetworkPolicy, data)
	if err != nil || !c.Changed {
		return c, err
	}
	if _, err := eg.pushPolicy(ctx, rec, c.Policy); err != nil {
		return PolicyChange{}, &Error{Kind: KindInternal, Code: CodeEgressFailed, Message: "failed to apply nftables policy: " + err.Error(), Err: err}
	}
	if _, err := eg.store.UpdateSandbox(id, func(r *Record) error { r.NetworkPolicy = &c.Policy; return nil }); err != nil {
		return PolicyChange{}, &Error{Kind: KindInternal, Code: CodeEgressFailed, Message: "failed to persist policy: " + err.Error(), Err: err}
	}
	eg.log.InfoContext(ctx, "egress policy changed", "sandbox_id", id, "mode", c.Policy.Mode(), "rules", len(c.Policy.Egress))
	return c, nil
}

// changePolicy computes the policy a write asks for, with upstream's
// reason field and error texts.
func changePolicy(op PolicyOp, cur egress.Policy, body []byte) (PolicyChange, error) {
	refuse := func(prefix string, err error) (PolicyChange, error) {
		if errors.Is(err, egress.ErrTooManyRules) {
			return PolicyChange{}, &Error{Kind: KindTooLarge, Code: CodeInvalidParameter, Message: err.Error()}
		}
		return PolicyChange{}, &Error{Kind: KindInvalid, Code: CodeInvalidParameter, Message: prefix + err.Error()}
	}
	empty := &Error{Kind: KindInvalid, Code: CodeInvalidParameter, Message: "empty body"}
	switch op {
	case PolicyReplace:
		if len(body) == 0 {
			return PolicyChange{Policy: egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{}}, Reason: "policy reset to default deny-all", Changed: true}, nil
		}
		var p *egress.Policy
		if err := json.Unmarshal(body, &p); err != nil {
			return refuse("invalid policy: ", err)
		}
		if p == nil {
			p = &egress.Policy{}
		}
		n, err := egress.Normalize(*p)
		if err != nil {
			return refuse("invalid policy: ", err)
		}
		return PolicyChange{Policy: n, Changed: true}, nil
	case PolicyPatch:
		if len(body) == 0 {
			return PolicyChange{}, empty
		}
		var rules []egress.Rule
		if err := json.Unmarshal(body, &rules); err != nil {
			return refuse("invalid patch rules: ", err)
		}
		n, err := cur.Patch(rules)
		if err != nil {
			return refuse("invalid patch rules: ", err)
		}
		return PolicyChange{Policy: n, Changed: true}, nil
	default: // PolicyRemove
		if len(body) == 0 {
			return PolicyChange{}, empty
		}
		var targets []string
		if err := json.Unmarshal(body, &targets); err != nil {
			return refuse("invalid delete targets: ", err)
		}
		n, removed, err := cur.Without(targets)
		if err != nil {
			return refuse("invalid delete targets: ", err)
		}
		if !removed {
			return PolicyChange{Policy: cur, Reason: "no matching targets found"}, nil
		}
		return PolicyChange{Policy: n, Changed: true}, nil
	}
}
