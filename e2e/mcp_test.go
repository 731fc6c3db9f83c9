//go:build e2e

package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPTypeScriptClient drives the MCP tools with the official MCP
// TypeScript SDK (e2e/mcp/mcp.test.mjs) over both transports: stdio
// (`sandboxd mcp` against the server) and the server's /mcp. A second
// sandboxd on the same engine holds a sandbox the tools must not reach.
func TestMCPTypeScriptClient(t *testing.T) {
	s := startServer(t)
	other := startServer(t)
	foreign := createSandbox(t, other, "/v1/sandboxes", busyboxRequest())
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			runMCPNode(t, s, map[string]string{"MCP_TRANSPORT": transport, "SANDBOXD_FOREIGN_ID": foreign.ID})
		})
	}
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("the tools' kills left %d container(s) behind", len(left))
	}
}

// /mcp is behind the API key like the API, with the key in the SDKs'
// header or as a bearer token; without one the answer is 401 with
// WWW-Authenticate: Bearer (and no OAuth metadata), and a web page's
// request is refused by the server's Origin check.
func TestMCPHTTPAuth(t *testing.T) {
	s := startServer(t)
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`
	mcpHeaders := func(extra map[string]string) map[string]string {
		h := map[string]string{"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	for _, tt := range []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"no key", map[string]string{apiKeyHeader: ""}, http.StatusUnauthorized},
		{"wrong key", map[string]string{apiKeyHeader: "wrong"}, http.StatusUnauthorized},
		{"wrong bearer", map[string]string{apiKeyHeader: "", "Authorization": "Bearer wrong"}, http.StatusUnauthorized},
		{"key in the header", nil, http.StatusOK},
		{"key as bearer", map[string]string{apiKeyHeader: "", "Authorization": "Bearer " + s.APIKey}, http.StatusOK},
		{"a web page's request", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, hdr, body := s.do(t, http.MethodPost, "/mcp", []byte(initialize), mcpHeaders(tt.headers))
			if status != tt.status {
				t.Fatalf("status %d, want %d; body %s", status, tt.status, body)
			}
			switch status {
			case http.StatusUnauthorized:
				if got := hdr.Get("WWW-Authenticate"); got != "Bearer" {
					t.Errorf("WWW-Authenticate %q, want Bearer", got)
				}
				if strings.Contains(string(body), "serverInfo") {
					t.Errorf("401 with an MCP answer: %s", body)
				}
			case http.StatusOK:
				if !strings.Contains(string(body), `"name":"sandboxd"`) {
					t.Errorf("initialize answered %s", body)
				}
			}
		})
	}
	// No OAuth discovery document: clients use the configured header.
	if status, _, _ := s.do(t, http.MethodGet, "/.well-known/oauth-protected-resource", nil, nil); status != http.StatusNotFound {
		t.Errorf("GET /.well-known/oauth-protected-resource: %d, want 404", status)
	}
	// A body over the bound is refused before it is read whole.
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", 5<<20) + `"}}`
	if status, _, _ := s.do(t, http.MethodPost, "/mcp", []byte(big), mcpHeaders(nil)); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a 5 MiB request: status %d, want 413", status)
	}
}

// runMCPNode runs e2e/mcp/mcp.test.mjs with node's test runner against s.
func runMCPNode(t *testing.T, s *Server, env map[string]string) {
	t.Helper()
	dir := filepath.Join(repoRoot(), "e2e", "mcp")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the MCP TypeScript SDK is not installed in %s (run e2e/setup.sh): %v", dir, err)
	}
	cmd := exec.CommandContext(t.Context(), "node", "--test", "--test-reporter=spec", "mcp.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SANDBOXD_URL="+s.URL,
		"SANDBOXD_DOMAIN="+s.Addr,
		"SANDBOXD_API_KEY="+s.APIKey,
		"SANDBOXD_BIN="+sandboxdBinary,
		"NO_COLOR=1",
	)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test mcp.test.mjs: %v\n%s", err, out)
	}
	t.Logf("node --test mcp.test.mjs:\n%s", out)
}
