package lifecycle

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

// enforcementMode is what upstream calls dns+nft: names filtered by the
// resolver, addresses by nftables.
const enforcementMode = "dns+nft"

// maxPolicyBody bounds a /policy body, as upstream's sidecar does.
const maxPolicyBody = 1 << 20

// ServeEgress serves upstream's egress API (specs/egress-api.yaml) for a
// sandbox at path rest of its port 18080: sandboxd answers it itself, so
// nothing in the sandbox can reach or change the policy. Errors are
// text/plain and successes JSON, both newline-terminated, as upstream's.
func (eg *Egress) ServeEgress(w http.ResponseWriter, r *http.Request, id, rest string) {
	switch rest {
	case "/healthz":
		_, _ = w.Write([]byte("ok"))
		return
	case "/policy":
	default:
		http.NotFound(w, r)
		return
	}
	rec, err := eg.record(id)
	if err != nil {
		http.Error(w, "sandbox not found", http.StatusNotFound)
		return
	}
	if _, ok := eg.egressRuntime(); !ok {
		// No sidecar to answer, as upstream has none on such a runtime; the
		// policy given at create is the runtime's (a NetworkPolicy), fixed.
		http.Error(w, "egress API not supported on the "+eg.rt.Name()+" runtime: its policy is set at create only", http.StatusNotImplemented)
		return
	}
	if r.Method == http.MethodGet {
		pol := egress.Policy{DefaultAction: egress.Allow, Egress: []egress.Rule{}}
		if rec.NetworkPolicy != nil {
			pol = *rec.NetworkPolicy
		}
		writePolicyJSON(w, map[string]any{"status": "ok", "mode": pol.Mode(), "enforcementMode": enforcementMode, "policy": pol})
		return
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, POST, PUT, PATCH, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if rec.NetworkPolicy == nil || rec.State != recordReady {
		http.Error(w, "sandbox "+id+" has no egress policy to change: create it with networkPolicy", http.StatusConflict)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPolicyBody))
	if err != nil {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	body = bytes.TrimSpace(body)
	link := eg.links.get(id)
	// Changes of one sandbox apply in order; lookups are not held up.
	link.change.Lock()
	defer link.change.Unlock()
	if rec, err = eg.record(id); err != nil || rec.NetworkPolicy == nil {
		http.Error(w, "sandbox not found", http.StatusNotFound)
		return
	}
	next, reason, status, msg := changePolicy(r.Method, *rec.NetworkPolicy, body)
	if status != http.StatusOK {
		http.Error(w, msg, status)
		return
	}
	if reason != "no matching targets found" {
		if _, err := eg.pushPolicy(r.Context(), rec, next); err != nil {
			http.Error(w, "failed to apply nftables policy: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := eg.store.UpdateSandbox(id, func(r *Record) error { r.NetworkPolicy = &next; return nil }); err != nil {
			http.Error(w, "failed to persist policy: "+err.Error(), http.StatusInternalServerError)
			return
		}
		eg.log.InfoContext(r.Context(), "egress policy changed", "sandbox_id", id, "mode", next.Mode(), "rules", len(next.Egress))
	}
	out := map[string]any{"status": "ok", "mode": next.Mode()}
	if reason == "" || reason == "no matching targets found" {
		out["enforcementMode"] = enforcementMode
	}
	if reason != "" {
		out["reason"] = reason
	}
	writePolicyJSON(w, out)
}

// changePolicy computes the policy a write asks for, with upstream's
// reason field and error texts; status is 200 unless the write is refused.
func changePolicy(method string, cur egress.Policy, body []byte) (next egress.Policy, reason string, status int, msg string) {
	refuse := func(prefix string, err error) (egress.Policy, string, int, string) {
		if errors.Is(err, egress.ErrTooManyRules) {
			return egress.Policy{}, "", http.StatusRequestEntityTooLarge, err.Error()
		}
		return egress.Policy{}, "", http.StatusBadRequest, prefix + err.Error()
	}
	switch method {
	case http.MethodPost, http.MethodPut:
		if len(body) == 0 {
			return egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{}}, "policy reset to default deny-all", http.StatusOK, ""
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
		return n, "", http.StatusOK, ""
	case http.MethodPatch:
		if len(body) == 0 {
			return egress.Policy{}, "", http.StatusBadRequest, "empty body"
		}
		var rules []egress.Rule
		if err := json.Unmarshal(body, &rules); err != nil {
			return refuse("invalid patch rules: ", err)
		}
		n, err := cur.Patch(rules)
		if err != nil {
			return refuse("invalid patch rules: ", err)
		}
		return n, "", http.StatusOK, ""
	default: // DELETE
		if len(body) == 0 {
			return egress.Policy{}, "", http.StatusBadRequest, "empty body"
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
			return cur, "no matching targets found", http.StatusOK, ""
		}
		return n, "", http.StatusOK, ""
	}
}

func writePolicyJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
