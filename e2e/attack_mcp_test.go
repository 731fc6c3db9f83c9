//go:build e2e

package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestAttackMCPTokenHolder: /mcp is the key holder's. A holder of a
// sandbox's execd token only (an agent, code it runs) gets 401 however it
// sends the token, and a web page gets 403 however it shapes the request
// (a CORS "simple" text/plain POST, Origin null from a sandboxed frame, a
// preflight); none of them runs a tool: the command they send leaves no
// file behind.
func TestAttackMCPTokenHolder(t *testing.T) {
	s := startServer(t)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(nil))
	waitState(t, s, sb.ID, "Running")
	var ep lcEndpoint
	s.doJSON(t, http.MethodGet, sandboxPath(sb.ID, "/endpoints/44772"), nil, http.StatusOK, &ep)
	token := ep.Headers[execdTokenHeader]
	if token == "" {
		t.Fatalf("endpoint headers %v: no execd token", ep.Headers)
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"command_run","arguments":{"sandbox_id":"` + sb.ID + `","command":"touch /tmp/pwned"}}}`
	mcp := map[string]string{"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{}
		for k, v := range mcp {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	for _, tt := range []struct {
		name    string
		method  string
		headers map[string]string
		status  int
	}{
		{"execd token header", http.MethodPost, with(map[string]string{apiKeyHeader: "", execdTokenHeader: token}), http.StatusUnauthorized},
		{"execd token as bearer", http.MethodPost, with(map[string]string{apiKeyHeader: "", "Authorization": "Bearer " + token}), http.StatusUnauthorized},
		{"execd token as the key", http.MethodPost, with(map[string]string{apiKeyHeader: token}), http.StatusUnauthorized},
		{"execd token as bearer beside a wrong key", http.MethodPost, with(map[string]string{apiKeyHeader: "x", "Authorization": "Bearer " + token}), http.StatusUnauthorized},
		{"page's text/plain simple request", http.MethodPost, with(map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}), http.StatusForbidden},
		{"page in a sandboxed frame (Origin null)", http.MethodPost, with(map[string]string{"Origin": "null"}), http.StatusForbidden},
		{"page of another port on this host, even with the key", http.MethodPost, with(map[string]string{"Origin": "http://127.0.0.1:1"}), http.StatusForbidden},
		{"rebinding page without the key", http.MethodPost, with(map[string]string{apiKeyHeader: "", "Origin": "http://rebind.example"}), 0},
		{"preflight from a page", http.MethodOptions, map[string]string{apiKeyHeader: "", "Origin": "http://evil.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, hdr, body := s.do(t, tt.method, "/mcp", []byte(call), tt.headers)
			if tt.status != 0 && status != tt.status {
				t.Errorf("status %d, want %d; body %s", status, tt.status, body)
			}
			if status/100 == 2 && tt.method == http.MethodPost || strings.Contains(string(body), `"result"`) {
				t.Errorf("the call was served: %d %s", status, body)
			}
			if got := hdr.Get("Access-Control-Allow-Origin"); got != "" {
				t.Errorf("CORS header %q for a foreign page", got)
			}
		})
	}
	if out := runCommand(t, s, sb.ID, "test -e /tmp/pwned && echo RAN || echo CLEAN"); !strings.Contains(out, "CLEAN") {
		t.Fatalf("a refused /mcp call ran its command: %q", out)
	}
	// The same call with the key runs (so the refusals above are not a
	// broken request).
	if status, _, body := s.do(t, http.MethodPost, "/mcp", []byte(call), with(nil)); status != http.StatusOK || !strings.Contains(string(body), `"result"`) {
		t.Fatalf("the key holder's call: %d %s", status, body)
	}
	if out := runCommand(t, s, sb.ID, "test -e /tmp/pwned && echo RAN || echo CLEAN"); !strings.Contains(out, "RAN") {
		t.Fatalf("the key holder's call did not run: %q", out)
	}
}
