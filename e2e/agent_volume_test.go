//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestAgentVolumeRemoved: the agent volume removed while sandboxd runs (a
// `docker volume prune` once no sandbox uses it) is refilled by the next
// create, whose agent then runs; sandboxd does not trust its memory of it.
func TestAgentVolumeRemoved(t *testing.T) {
	// sandboxd's own binary with bytes appended hashes differently, so
	// this test has an agent volume of its own to remove.
	bin, err := os.ReadFile(sandboxdBinary)
	if err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(t.TempDir(), "sandboxd-agent")
	if err := os.WriteFile(agent, append(bin, randomHex(t, 16)...), 0o755); err != nil {
		t.Fatal(err)
	}
	var volumes []string
	t.Cleanup(func() { removeVolumes(t, volumes) })
	s := startServer(t, withTOML(fmt.Sprintf("[runtime]\nagent_binaries = { %q = %q }", "linux/"+runtime.GOARCH, agent)))

	sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	if out := runCommand(t, s, sb.ID, "echo before"); out != "before" {
		t.Fatalf("command before the removal: %q", out)
	}
	vol := agentVolume(t, sb.ID)
	volumes = append(volumes, vol)
	wantEmpty(t, s, http.MethodDelete, sandboxPath(sb.ID), http.StatusNoContent)
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	if err := dockerClient(t).VolumeRemove(ctx, vol, false); err != nil {
		t.Fatalf("remove the agent volume %s: %v", vol, err)
	}

	sb = createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	if out := runCommand(t, s, sb.ID, "echo after"); out != "after" {
		t.Errorf("command in a sandbox created after the agent volume was removed: %q", out)
	}
	if got := agentVolume(t, sb.ID); got != vol {
		t.Errorf("agent volume %s, want the refilled %s", got, vol)
	}
}
