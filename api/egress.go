package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// enforcementMode is what upstream calls dns+nft: names filtered by the
// resolver, addresses by nftables.
const enforcementMode = "dns+nft"

// maxPolicyBody bounds a /policy body, as upstream's sidecar does.
const maxPolicyBody = 1 << 20

// policyOps are the writes of the egress API, by method.
var policyOps = map[string]lifecycle.PolicyOp{
	http.MethodPost: lifecycle.PolicyReplace, http.MethodPut: lifecycle.PolicyReplace,
	http.MethodPatch: lifecycle.PolicyPatch, http.MethodDelete: lifecycle.PolicyRemove,
}

// serveEgress serves upstream's egress API (specs/egress-api.yaml) for a
// sandbox at path rest of its port 18080: sandboxd answers it itself, so
// nothing in the sandbox can reach or change the policy. Errors are
// text/plain and successes JSON, both newline-terminated, as upstream's.
func (s *Server) serveEgress(w http.ResponseWriter, r *http.Request, id, rest string) {
	switch rest {
	case "/healthz":
		_, _ = w.Write([]byte("ok"))
		return
	case "/policy":
	default:
		http.NotFound(w, r)
		return
	}
	pol, err := s.egress.Policy(id)
	if err != nil {
		egressError(w, err)
		return
	}
	if r.Method == http.MethodGet {
		writePolicyJSON(w, map[string]any{"status": "ok", "mode": pol.Mode(), "enforcementMode": enforcementMode, "policy": pol})
		return
	}
	op, ok := policyOps[r.Method]
	if !ok {
		w.Header().Set("Allow", "GET, POST, PUT, PATCH, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	c, err := s.egress.ChangePolicy(r.Context(), id, op, func() ([]byte, error) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPolicyBody))
		return bytes.TrimSpace(body), err
	})
	if err != nil {
		egressError(w, err)
		return
	}
	out := map[string]any{"status": "ok", "mode": c.Policy.Mode()}
	if c.Reason == "" || !c.Changed {
		out["enforcementMode"] = enforcementMode
	}
	if c.Reason != "" {
		out["reason"] = c.Reason
	}
	writePolicyJSON(w, out)
}

// egressError answers a failed egress API call as upstream's sidecar
// does: the message as text.
func egressError(w http.ResponseWriter, err error) {
	e, ok := lifecycle.AsError(err)
	if !ok {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	http.Error(w, e.Message, kindStatus[e.Kind])
}

func writePolicyJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
