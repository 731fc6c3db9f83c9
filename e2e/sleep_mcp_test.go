//go:build e2e

package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestSleepWakesOnMCPCall: an MCP tool call (over /mcp, with the key)
// wakes a sandbox asleep by pause or by stop before it is served, as an
// SDK call does: the tool answers with the sandbox's files, never an
// error.
func TestSleepWakesOnMCPCall(t *testing.T) {
	t.Parallel()
	s := startSleepServer(t)
	headers := map[string]string{"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
	for _, tc := range []struct{ action, reason string }{{"pause", "IDLE_PAUSED"}, {"stop", "IDLE_STOPPED"}} {
		t.Run(tc.action, func(t *testing.T) {
			b := sleepyBox(t, s, tc.action, nil, nil)
			b.run(t, map[string]any{"command": "echo kept-" + tc.action + " > /root/mark"})
			started := waitAsleep(t, s, b.ID, tc.reason)
			call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"command_run","arguments":{"sandbox_id":"` + b.ID + `","command":"cat /root/mark"}}}`
			status, _, body := s.do(t, http.MethodPost, "/mcp", []byte(call), headers)
			if status != http.StatusOK || !strings.Contains(string(body), "kept-"+tc.action) || strings.Contains(string(body), `"isError":true`) {
				t.Fatalf("command_run on a sandbox asleep by %s: %d %s", tc.action, status, body)
			}
			wantAwake(t, s, b.ID, started, tc.action == "pause")
		})
	}
}
