//go:build e2e

package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// Upstream 1.1.1 (reference upstream-1.1.1.md §1, §3, §4) against the real
// engine: the SDKs' metrics event, the template routes and create fields
// sandboxd does not have, answered as upstream's Docker server answers them.

// TestUpstream111Routes: the metrics event is a 204 with no body (a 401
// without the key, a 404 without /v1); every template route and a create
// naming a template are 501 FSB::API_NOT_SUPPORTED; credentialProxy is
// 422 without a policy and 400 with one; nothing is created.
func TestUpstream111Routes(t *testing.T) {
	s := startServer(t)
	event := `{"eventType":"sandbox.create","createDurationMs":812,"success":true,"sandboxId":"x","image":"busybox"}`
	status, _, body := s.do(t, http.MethodPost, "/v1/metrics/events", event, map[string]string{"User-Agent": "OpenSandbox-Python-SDK/1.1.1"})
	if status != http.StatusNoContent || len(body) != 0 {
		t.Errorf("metrics event: %d %q, want 204 and no body", status, body)
	}
	status, _, body = s.do(t, http.MethodPost, "/v1/metrics/events", event, map[string]string{apiKeyHeader: ""})
	wantError(t, "metrics event without a key", status, body, http.StatusUnauthorized, "MISSING_API_KEY")
	doError(t, s, http.MethodPost, "/metrics/events", event, http.StatusNotFound, "")
	doError(t, s, http.MethodPost, "/v1/metrics/events", `[]`, http.StatusUnprocessableEntity, "")

	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/v1/templates"}, {http.MethodGet, "/v1/templates"}, {http.MethodGet, "/templates/t1"}, {http.MethodDelete, "/v1/templates/t1"},
	} {
		var body any
		if r.method == http.MethodPost {
			body = map[string]any{"name": "t1"}
		}
		msg := doError(t, s, r.method, r.path, body, http.StatusNotImplemented, "FSB::API_NOT_SUPPORTED")
		if msg != "Template management requires the kubernetes runtime." {
			t.Errorf("%s %s: message %q", r.method, r.path, msg)
		}
	}
	doError(t, s, http.MethodGet, "/v1/templates?pageSize=500", nil, http.StatusUnprocessableEntity, "")

	doError(t, s, http.MethodPost, "/v1/sandboxes", map[string]any{"templateId": "x", "timeout": 600}, http.StatusNotImplemented, "FSB::API_NOT_SUPPORTED")
	msg := doError(t, s, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"credentialProxy": map[string]any{"enabled": true}}), http.StatusUnprocessableEntity, "")
	if status, _, body := s.do(t, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"credentialProxy": map[string]any{"enabled": true}}), nil); !strings.Contains(string(body), "credentialProxy.enabled requires networkPolicy") {
		t.Errorf("credentialProxy without a policy: %d %s (%s)", status, body, msg)
	}
	policy := map[string]any{"defaultAction": "deny", "egress": []any{}}
	msg = doError(t, s, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"credentialProxy": map[string]any{"enabled": true}, "networkPolicy": policy}), http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
	if !strings.Contains(msg, "credentialProxy is not supported") {
		t.Errorf("credentialProxy with a policy: message %q", msg)
	}
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("refused creates left %d container(s)", len(left))
	}
	// Disabled, it is accepted and changes nothing.
	createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"credentialProxy": map[string]any{"enabled": false}}))
}

// TestUpstream111SDKMetricsEvent runs e2e/ts/upstream111.test.mjs: the
// TypeScript SDK's create posts its metrics event, and sandboxd answers 204.
func TestUpstream111SDKMetricsEvent(t *testing.T) {
	s := startServer(t)
	s.runNode(t, "upstream111.test.mjs", nil)
}
