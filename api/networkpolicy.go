package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// networkPolicyRoutes are upstream 1.1.1's key-holder routes to a
// sandbox's egress policy. They take the API key (the middleware's),
// and answer as upstream's server relaying to the sidecar's /policy:
// the body is validated first (422 with FastAPI's detail), then the
// sidecar's statuses and text errors pass through unchanged.
func (s *Server) networkPolicyRoutes(p routeAdder) {
	p("/sandboxes/{id}/networkpolicy", s.handleNetworkPolicy).
		Methods(http.MethodGet, http.MethodPut, http.MethodPatch, http.MethodDelete)
}

// networkPolicyOps are the writes of the route: PUT replaces (a full
// policy), PATCH merges rules, DELETE removes targets.
var networkPolicyOps = map[string]lifecycle.PolicyOp{
	http.MethodPut: lifecycle.PolicyReplace, http.MethodPatch: lifecycle.PolicyPatch, http.MethodDelete: lifecycle.PolicyRemove,
}

func (s *Server) handleNetworkPolicy(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if r.Method == http.MethodGet {
		pol, err := s.egress.Policy(id)
		if err != nil {
			s.networkPolicyError(w, r, err)
			return
		}
		writePolicyJSON(w, policyAnswer(pol))
		return
	}
	if !requireJSON(w, r) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPolicyBody))
	if err != nil {
		writeError(w, r, http.StatusRequestEntityTooLarge, "GENERAL::REQUEST_TOO_LARGE", "request body exceeds "+strconv.Itoa(maxPolicyBody)+" bytes")
		return
	}
	body = bytes.TrimSpace(body)
	op := networkPolicyOps[r.Method]
	if typ, loc, msg := validatePolicyBody(op, body); typ != "" {
		unprocessable(w, typ, loc, msg)
		return
	}
	c, err := s.egress.ChangePolicy(r.Context(), id, op, func() ([]byte, error) { return body, nil })
	if err != nil {
		s.networkPolicyError(w, r, err)
		return
	}
	writePolicyJSON(w, changeAnswer(c))
}

// networkPolicyError answers as upstream's relay: its own errors (an
// unknown sandbox, no sidecar to reach) in the envelope, the sidecar's as
// the sidecar's text.
func (s *Server) networkPolicyError(w http.ResponseWriter, r *http.Request, err error) {
	e, ok := lifecycle.AsError(err)
	switch {
	case ok && e.Code == lifecycle.CodeNoEgressPolicy:
		// Upstream's sandbox without a policy has no sidecar to relay to.
		writeError(w, r, http.StatusBadGateway, codeBackendConnectionFailed, e.Message)
	case ok && (e.Kind == lifecycle.KindNotFound || e.Kind == lifecycle.KindNotImplemented):
		s.fail(w, r, err)
	default:
		egressError(w, err)
	}
}

// validatePolicyBody checks a write's body against upstream's models (as
// FastAPI does before the relay) and returns the first violation as a
// detail type, location and message, or "" if the body fits.
func validatePolicyBody(op lifecycle.PolicyOp, body []byte) (typ string, loc []string, msg string) {
	if len(body) == 0 {
		return "missing", []string{"body"}, "Field required"
	}
	switch op {
	case lifecycle.PolicyReplace:
		var p map[string]json.RawMessage
		if json.Unmarshal(body, &p) != nil || p == nil {
			return "model_attributes_type", []string{"body"}, "Input should be a valid dictionary or object to extract fields from"
		}
		if raw, ok := p["defaultAction"]; ok && string(raw) != "null" {
			if typ, msg := checkAction(raw); typ != "" {
				return typ, []string{"body", "defaultAction"}, msg
			}
		}
		raw, ok := p["egress"]
		if !ok || string(raw) == "null" {
			return "", nil, ""
		}
		return validateRules(raw, []string{"body", "egress"})
	case lifecycle.PolicyPatch:
		return validateRules(body, []string{"body"})
	default:
		var targets []json.RawMessage
		if json.Unmarshal(body, &targets) != nil || targets == nil {
			return "list_type", []string{"body"}, "Input should be a valid list"
		}
		for i, t := range targets {
			var s string
			if json.Unmarshal(t, &s) != nil {
				return "string_type", []string{"body", strconv.Itoa(i)}, "Input should be a valid string"
			}
		}
		return "", nil, ""
	}
}

// validateRules checks a list of {action, target} rules.
func validateRules(raw json.RawMessage, loc []string) (string, []string, string) {
	var rules []json.RawMessage
	if json.Unmarshal(raw, &rules) != nil || rules == nil {
		return "list_type", loc, "Input should be a valid list"
	}
	for i, rr := range rules {
		at := append(append([]string{}, loc...), strconv.Itoa(i))
		var r map[string]json.RawMessage
		if json.Unmarshal(rr, &r) != nil || r == nil {
			return "model_attributes_type", at, "Input should be a valid dictionary or object to extract fields from"
		}
		action, ok := r["action"]
		if !ok {
			return "missing", append(at, "action"), "Field required"
		}
		if typ, msg := checkAction(action); typ != "" {
			return typ, append(at, "action"), msg
		}
		target, ok := r["target"]
		if !ok {
			return "missing", append(at, "target"), "Field required"
		}
		var t string
		if json.Unmarshal(target, &t) != nil {
			return "string_type", append(at, "target"), "Input should be a valid string"
		}
		if t == "" {
			return "string_too_short", append(at, "target"), "String should have at least 1 character"
		}
	}
	return "", nil, ""
}

// checkAction checks an action value: "allow" or "deny".
func checkAction(raw json.RawMessage) (typ, msg string) {
	var a string
	if err := json.Unmarshal(raw, &a); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return "string_type", "Input should be a valid string"
		}
		return "json_invalid", "JSON decode error"
	}
	if a != "allow" && a != "deny" {
		return "literal_error", "Input should be 'allow' or 'deny'"
	}
	return "", ""
}
