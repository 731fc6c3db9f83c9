//go:build e2e

package e2e

import (
	"net/http"
	"testing"
)

// TestAttackSleepRefusedCallsDoNotWake: a sleeping sandbox is woken only by
// a call sandboxd serves. Its own execd token used where it opens nothing
// (the egress policy, /mcp, the lifecycle API), a body of the wrong type,
// and the token in the query string or a cookie are refused, and the
// sandbox sleeps on; the token's ordinary call then wakes it.
func TestAttackSleepRefusedCallsDoNotWake(t *testing.T) {
	t.Parallel()
	s := startSleepServer(t)
	b := sleepyBox(t, s, "pause", nil, nil)
	tok := b.Headers[execdTokenHeader]
	started := waitAsleep(t, s, b.ID, "IDLE_PAUSED")
	noKey := func(h map[string]string) map[string]string {
		h[apiKeyHeader] = ""
		return h
	}
	for _, c := range []struct {
		what, method, path string
		body               any
		headers            map[string]string
	}{
		{"egress policy with the execd token", http.MethodPost, egressPath(b.ID, "/policy"), map[string]string{"defaultAction": "allow"}, noKey(map[string]string{execdTokenHeader: tok})},
		{"/mcp with the execd token", http.MethodPost, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_resume","arguments":{"sandbox_id":"` + b.ID + `"}}}`, noKey(map[string]string{"Authorization": "Bearer " + tok, "Accept": "application/json, text/event-stream"})},
		{"resume with the execd token", http.MethodPost, "/v1/sandboxes/" + b.ID + "/resume", nil, noKey(map[string]string{execdTokenHeader: tok})},
		{"renew with the execd token", http.MethodPost, "/v1/sandboxes/" + b.ID + "/renew-expiration", map[string]string{"expiresAt": "2099-01-01T00:00:00Z"}, noKey(map[string]string{execdTokenHeader: tok})},
		{"endpoint with the execd token", http.MethodGet, "/v1/sandboxes/" + b.ID + "/endpoints/44772", nil, noKey(map[string]string{execdTokenHeader: tok})},
		{"token in the query string", http.MethodGet, proxyPath(b.ID, "/ping") + "?access_token=" + tok, nil, noKey(map[string]string{})},
		{"token as a cookie", http.MethodGet, proxyPath(b.ID, "/ping"), nil, noKey(map[string]string{"Cookie": execdTokenHeader + "=" + tok})},
		{"a web page's call with the key it cannot have", http.MethodPost, proxyPath(b.ID, "/command"), map[string]string{"command": "true"}, map[string]string{"Origin": "http://evil.example"}},
	} {
		status, _, body := s.do(t, c.method, c.path, c.body, c.headers)
		if status/100 == 2 {
			t.Errorf("%s: served %d %s", c.what, status, body)
		}
		if sb := getSandbox(t, s, "/v1", b.ID); sb.Status.Reason != "IDLE_PAUSED" || !sandboxContainer(t, b.ID).State.Paused {
			t.Fatalf("%s (%d) woke it: %s/%s", c.what, status, sb.Status.State, sb.Status.Reason)
		}
	}
	if status, _, body := b.do(t, http.MethodGet, "/ping", nil, nil); status != http.StatusOK {
		t.Fatalf("the token's ordinary call: %d %s", status, body)
	}
	wantAwake(t, s, b.ID, started, true)
}
