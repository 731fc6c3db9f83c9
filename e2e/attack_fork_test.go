//go:build e2e

package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestAttackForkKeepsPolicy: a fork without overrides is under the egress
// policy in force on its source, not unpoliced: a sandbox the key holder
// restricted cannot be copied out of the restriction by forking it. The
// source's execd token cannot fork it either.
func TestAttackForkKeepsPolicy(t *testing.T) {
	s := startServer(t)
	removeInstanceHelpersAtEnd(t, s)
	src := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny"}}))
	waitState(t, s, src.ID, "Running")
	var ep lcEndpoint
	s.doJSON(t, http.MethodGet, sandboxPath(src.ID, "/endpoints/44772"), nil, http.StatusOK, &ep)
	if status, _, body := s.do(t, http.MethodPost, sandboxPath(src.ID, "/fork"), map[string]any{}, map[string]string{apiKeyHeader: "", execdTokenHeader: ep.Headers[execdTokenHeader]}); status != http.StatusUnauthorized {
		t.Errorf("fork with the source's execd token: %d %s", status, body)
	}
	op, seen := waitFork(t, s, postFork(t, s, src.ID, map[string]any{"timeout": 600}, nil).ID)
	if op.Status.State != "Succeeded" || len(op.SandboxIDs) != 1 {
		t.Fatalf("fork %+v (states %v)", op, seen)
	}
	fork := op.SandboxIDs[0]
	waitState(t, s, fork, "Running")
	mode, pol := egressPolicyOf(t, s, fork)
	if mode != "deny_all" || pol.DefaultAction != "deny" || len(pol.Egress) != 0 {
		t.Fatalf("the fork's policy: %s %+v, want the source's deny-all", mode, pol)
	}
	// Enforced, not only recorded: the fork's resolver is the egress
	// daemon's, which answers nothing under deny-all.
	out := runCommand(t, s, fork, "cat /etc/resolv.conf; nslookup -timeout=2 example.com 2>&1 || echo REFUSED")
	if !strings.Contains(out, "127.0.0.1") || !strings.Contains(out, "REFUSED") {
		t.Fatalf("the fork resolves past its policy: %q", out)
	}
}
