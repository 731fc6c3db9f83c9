//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// egressAuthHeader carries a sandbox's egress token: the header of its
// 18080 endpoint.
const egressAuthHeader = "OPENSANDBOX-EGRESS-AUTH"

// egressPolicyOf reads a sandbox's policy with the key, through the
// networkpolicy route.
func egressPolicyOf(t *testing.T, s *Server, id string) (mode string, pol struct {
	DefaultAction string              `json:"defaultAction"`
	Egress        []map[string]string `json:"egress"`
}) {
	t.Helper()
	var got struct {
		Mode   string `json:"mode"`
		Policy json.RawMessage
	}
	s.doJSON(t, http.MethodGet, sandboxPath(id, "/networkpolicy"), nil, http.StatusOK, &got)
	if err := json.Unmarshal(got.Policy, &pol); err != nil {
		t.Fatalf("policy %s: %v", got.Policy, err)
	}
	return got.Mode, pol
}

// TestSecurityEgressCredential: who may change a sandbox's egress policy.
// The execd token (which whoever drives the sandbox holds) cannot: POST
// /policy {"defaultAction":"allow"} and PATCHes allowing 0.0.0.0/0 or the
// metadata address are refused with the envelope and change nothing, also
// with the token sent as the egress credential. The 18080 endpoint's own
// header (the egress token, which only the key holder can read) and the
// key through /networkpolicy can.
func TestSecurityEgressCredential(t *testing.T) {
	s := startServer(t)
	removeInstanceHelpersAtEnd(t, s)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny"}}))
	var execd, eg lcEndpoint
	s.doJSON(t, http.MethodGet, sandboxPath(sb.ID, "/endpoints/44772"), nil, http.StatusOK, &execd)
	s.doJSON(t, http.MethodGet, sandboxPath(sb.ID, "/endpoints/18080"), nil, http.StatusOK, &eg)
	token, egressTok := execd.Headers[execdTokenHeader], eg.Headers[egressAuthHeader]
	p := egressPath(sb.ID, "/policy")
	for _, c := range []struct {
		method string
		body   any
	}{
		{http.MethodPost, map[string]string{"defaultAction": "allow"}},
		{http.MethodPut, map[string]string{"defaultAction": "allow"}},
		{http.MethodPatch, []map[string]string{{"action": "allow", "target": "0.0.0.0/0"}}},
		{http.MethodPatch, []map[string]string{{"action": "allow", "target": "169.254.169.254"}}},
		{http.MethodGet, nil},
	} {
		status, hdr, body := s.do(t, c.method, p, c.body, map[string]string{apiKeyHeader: "", execdTokenHeader: token})
		secWantError(t, c.method+" /policy with the execd token", status, hdr, body, http.StatusForbidden, "EGRESS::FORBIDDEN")
		status, hdr, body = s.do(t, c.method, p, c.body, map[string]string{apiKeyHeader: "", egressAuthHeader: token})
		secWantError(t, c.method+" /policy with the execd token as the egress credential", status, hdr, body, http.StatusUnauthorized, "INVALID_API_KEY")
	}
	if mode, pol := egressPolicyOf(t, s, sb.ID); mode != "deny_all" || pol.DefaultAction != "deny" || len(pol.Egress) != 0 {
		t.Fatalf("after the refused writes the policy is %s %+v, want deny-all", mode, pol)
	}
	if token == "" || egressTok == "" || egressTok == token || len(eg.Headers) != 1 {
		t.Fatalf("endpoint headers: 44772 %v, 18080 %v; want the execd token and a distinct egress token only", execd.Headers, eg.Headers)
	}
	// The execd token still opens the execd API.
	if status, _, body := s.do(t, http.MethodGet, proxyPath(sb.ID, "/ping"), nil, map[string]string{apiKeyHeader: "", execdTokenHeader: token}); status != http.StatusOK {
		t.Errorf("GET /ping with the execd token: %d %s", status, body)
	}

	// The egress token, as the SDKs send it.
	status, _, body := s.do(t, http.MethodPatch, p, []map[string]string{{"action": "allow", "target": "169.254.169.254"}}, map[string]string{apiKeyHeader: "", egressAuthHeader: egressTok})
	if status != http.StatusOK {
		t.Fatalf("PATCH /policy with the egress token: %d %s", status, body)
	}
	if _, pol := egressPolicyOf(t, s, sb.ID); len(pol.Egress) != 1 || pol.Egress[0]["target"] != "169.254.169.254" {
		t.Errorf("after the egress token's PATCH the policy is %+v", pol)
	}
	// The egress token of one sandbox opens no other's.
	other := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny"}}))
	status, hdr, body := s.do(t, http.MethodPost, egressPath(other.ID, "/policy"), map[string]string{"defaultAction": "allow"}, map[string]string{apiKeyHeader: "", egressAuthHeader: egressTok})
	secWantError(t, "POST another sandbox's /policy with this one's egress token", status, hdr, body, http.StatusUnauthorized, "INVALID_API_KEY")

	// The key through /networkpolicy, at both prefixes.
	for _, prefix := range []string{"/v1", ""} {
		np := prefix + "/sandboxes/" + sb.ID + "/networkpolicy"
		s.doJSON(t, http.MethodPatch, np, []map[string]string{{"action": "allow", "target": "0.0.0.0/0"}}, http.StatusOK, nil)
		s.doJSON(t, http.MethodPut, np, map[string]string{"defaultAction": "allow"}, http.StatusOK, nil)
		if mode, pol := egressPolicyOf(t, s, sb.ID); mode != "allow_all" || pol.DefaultAction != "allow" {
			t.Errorf("%s: after PUT allow the policy is %s %+v", np, mode, pol)
		}
		s.doJSON(t, http.MethodPut, np, map[string]string{"defaultAction": "deny"}, http.StatusOK, nil)
	}
	// Nor do the tokens open the key holder's route.
	for _, h := range []map[string]string{{apiKeyHeader: "", execdTokenHeader: token}, {apiKeyHeader: "", egressAuthHeader: egressTok}} {
		status, hdr, body := s.do(t, http.MethodPut, sandboxPath(sb.ID, "/networkpolicy"), map[string]string{"defaultAction": "allow"}, h)
		secWantError(t, "PUT /networkpolicy with a sandbox token", status, hdr, body, http.StatusUnauthorized, "")
	}
}

// TestNetworkPolicyRoute is upstream 1.1.1's networkpolicy route, with
// its reference tests: PUT then GET, PATCH merges keeping defaultAction,
// DELETE is idempotent, bad bodies are 422, and the server's own errors
// (unknown sandbox, no policy to change) are in the envelope.
func TestNetworkPolicyRoute(t *testing.T) {
	s := startServer(t)
	removeInstanceHelpersAtEnd(t, s)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny"}}))
	np := sandboxPath(sb.ID, "/networkpolicy")

	s.doJSON(t, http.MethodPut, np, map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "pypi.org"}}}, http.StatusOK, nil)
	mode, pol := egressPolicyOf(t, s, sb.ID)
	if mode != "enforcing" || len(pol.Egress) != 1 || pol.Egress[0]["target"] != "pypi.org" || pol.Egress[0]["action"] != "allow" {
		t.Errorf("after PUT: %s %+v", mode, pol)
	}
	s.doJSON(t, http.MethodPatch, np, []map[string]string{{"action": "deny", "target": "pypi.org"}, {"action": "allow", "target": "a.com"}}, http.StatusOK, nil)
	_, pol = egressPolicyOf(t, s, sb.ID)
	pypi := 0
	for _, r := range pol.Egress {
		if r["target"] == "pypi.org" {
			pypi++
			if r["action"] != "deny" {
				t.Errorf("after PATCH pypi.org is %s", r["action"])
			}
		}
	}
	if pol.DefaultAction != "deny" || pypi != 1 {
		t.Errorf("after PATCH: %+v, want defaultAction deny and one pypi.org rule", pol)
	}
	s.doJSON(t, http.MethodDelete, np, []string{"a.com", "nope"}, http.StatusOK, nil)
	if _, pol = egressPolicyOf(t, s, sb.ID); strings.Contains(toJSON(t, pol.Egress), "a.com") {
		t.Errorf("after DELETE a.com is still there: %+v", pol)
	}
	s.doJSON(t, http.MethodDelete, np, []string{"a.com"}, http.StatusOK, nil)

	for _, c := range []struct {
		method, body string
		status       int
	}{
		{http.MethodPatch, `{}`, http.StatusUnprocessableEntity},
		{http.MethodPatch, `[{"action":"allow"}]`, http.StatusUnprocessableEntity},
		{http.MethodPut, `{"defaultAction":"open"}`, http.StatusUnprocessableEntity},
		{http.MethodDelete, `[1]`, http.StatusUnprocessableEntity},
		{http.MethodPatch, `[{"action":"allow","target":"http://a.com"}]`, http.StatusBadRequest},
	} {
		status, _, body := s.do(t, c.method, np, c.body, nil)
		if status != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.body, status, body, c.status)
		}
		if c.status == http.StatusUnprocessableEntity && !strings.Contains(string(body), `"detail":[`) {
			t.Errorf("%s %s: %s, want FastAPI's detail", c.method, c.body, body)
		}
	}
	// A body must be declared JSON, here and on /policy.
	for _, path := range []string{np, egressPath(sb.ID, "/policy")} {
		status, hdr, body := s.do(t, http.MethodPut, path, []byte(`{"defaultAction":"allow"}`), map[string]string{"Content-Type": "text/plain"})
		secWantError(t, "PUT "+path+" as text/plain", status, hdr, body, http.StatusUnsupportedMediaType, "")
	}
	if mode, _ := egressPolicyOf(t, s, sb.ID); mode == "allow_all" {
		t.Errorf("a text/plain PUT changed the policy")
	}

	status, hdr, body := s.do(t, http.MethodGet, sandboxPath("no-such-sandbox", "/networkpolicy"), nil, nil)
	secWantError(t, "GET an unknown sandbox's networkpolicy", status, hdr, body, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	open := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	status, hdr, body = s.do(t, http.MethodPatch, sandboxPath(open.ID, "/networkpolicy"), []map[string]string{{"action": "allow", "target": "a.com"}}, nil)
	secWantError(t, "PATCH a sandbox without policy", status, hdr, body, http.StatusBadGateway, "BACKEND_CONNECTION_FAILED")
	status, _, _ = s.do(t, http.MethodGet, np, nil, map[string]string{apiKeyHeader: ""})
	if status != http.StatusUnauthorized {
		t.Errorf("GET networkpolicy without the key: %d, want 401", status)
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
