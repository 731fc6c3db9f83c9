package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime/egress"
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

// handleEgress serves port 18080 of the proxy route: upstream's egress
// API, which sandboxd answers itself, so nothing in the sandbox can reach
// or change the policy. It opens with the sandbox's egress token (the
// 18080 endpoint's header) or an API key, never with the execd token.
func (s *Server) handleEgress(w http.ResponseWriter, r *http.Request, id, rest string) {
	cred, ok := s.authorizeEgress(w, r, id, rest)
	if !ok {
		return
	}
	release, ok := s.admitProxied(w, r, id, cred)
	if !ok {
		return
	}
	defer release()
	switch rest {
	case "/healthz":
		_, _ = w.Write([]byte("ok"))
	case "/policy":
		s.servePolicy(w, r, id)
	default:
		http.NotFound(w, r)
	}
}

// authorizeEgress checks the credential of an egress API call and
// returns its name for the in-flight limits. The execd token opens only
// /healthz: its holder drives the sandbox, and the policy is the key
// holder's restriction of that.
func (s *Server) authorizeEgress(w http.ResponseWriter, r *http.Request, id, rest string) (string, bool) {
	if len(s.keys) == 0 {
		return "anonymous", true
	}
	egressTok := r.Header.Get(lifecycle.EgressAuthHeader)
	tok, key := r.Header.Get(lifecycle.TokenHeader), r.Header.Get(headerAPIKey)
	if s.proxy.CheckEgressToken(id, egressTok) {
		return "egress:" + id, true
	}
	for _, k := range []string{key, tok} {
		if i := s.keyIndex(k); i >= 0 {
			return "key:" + strconv.Itoa(i), true
		}
	}
	switch {
	case s.proxy.CheckToken(id, tok) && rest == "/healthz":
		return "token:" + id, true
	case s.proxy.CheckToken(id, tok) && egressTok == "":
		writeError(w, r, http.StatusForbidden, codeEgressForbidden, "The sandbox's execd token does not open its egress policy. Send the headers of its 18080 endpoint ("+lifecycle.EgressAuthHeader+") or an OPEN-SANDBOX-API-KEY header.")
	case egressTok == "" && tok == "" && key == "":
		writeError(w, r, http.StatusUnauthorized, "MISSING_API_KEY", "Authentication credentials are missing. Send the headers of the sandbox's 18080 endpoint ("+lifecycle.EgressAuthHeader+") or an OPEN-SANDBOX-API-KEY header.")
	default:
		writeError(w, r, http.StatusUnauthorized, "INVALID_API_KEY", "Authentication credentials are invalid for this sandbox's egress API.")
	}
	return "", false
}

// servePolicy serves /policy. Errors are text/plain and successes JSON,
// both newline-terminated, as upstream's sidecar answers.
func (s *Server) servePolicy(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method == http.MethodGet {
		pol, err := s.egress.Policy(id)
		if err != nil {
			egressError(w, err)
			return
		}
		writePolicyJSON(w, policyAnswer(pol))
		return
	}
	op, ok := policyOps[r.Method]
	if !ok {
		w.Header().Set("Allow", "GET, POST, PUT, PATCH, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// An empty POST resets the policy, as upstream's; a body must be
	// declared JSON (a web page can send text/plain without asking).
	if r.ContentLength != 0 && !requireJSON(w, r) {
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
	writePolicyJSON(w, changeAnswer(c))
}

// policyAnswer is upstream's answer to a policy read.
func policyAnswer(pol egress.Policy) map[string]any {
	return map[string]any{"status": "ok", "mode": pol.Mode(), "enforcementMode": enforcementMode, "policy": pol}
}

// changeAnswer is upstream's answer to a policy write.
func changeAnswer(c lifecycle.PolicyChange) map[string]any {
	out := map[string]any{"status": "ok", "mode": c.Policy.Mode()}
	if c.Reason == "" || !c.Changed {
		out["enforcementMode"] = enforcementMode
	}
	if c.Reason != "" {
		out["reason"] = c.Reason
	}
	return out
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
