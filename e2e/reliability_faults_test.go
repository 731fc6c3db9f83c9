//go:build e2e

package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// agentProcess is what Docker's top shows for the in-sandbox agent.
const agentProcess = "/opt/sandboxd/sandboxd"

// TestReliabilitySandboxFaults breaks sandboxes in the ways they break in
// real life and checks that each fault is reported clearly and leaves
// sandboxd serving.
func TestReliabilitySandboxFaults(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	t.Run("main process exits", func(t *testing.T) {
		// The main process waits for a file that a command creates.
		sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
			"entrypoint": []string{"sh", "-c", "while [ ! -e /tmp/stop ]; do sleep 1; done; exit 42"},
		}))
		runCommand(t, s, sb.ID, "echo kept > /tmp/kept.txt && touch /tmp/stop")
		got := waitState(t, s, sb.ID, "Failed", "Terminated")
		if got.Status.State != "Failed" || !strings.Contains(got.Status.Message, "42") {
			t.Errorf("status %+v, want Failed with the exit code 42 in the message", got.Status)
		}
		// Commands need a running sandbox; files do not.
		doError(t, s, http.MethodPost, proxyPath(sb.ID, "/command"), map[string]any{"command": "true"}, http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
		if got := downloadFile(t, s, sb.ID, "/tmp/kept.txt"); got != "kept\n" {
			t.Errorf("file of the exited sandbox: %q, want %q", got, "kept\n")
		}
	})

	t.Run("container removed behind sandboxd's back", func(t *testing.T) {
		sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
		runCommand(t, s, sb.ID, "true") // the agent runs
		removeContainer(t, sandboxContainer(t, sb.ID).ID)
		doError(t, s, http.MethodPost, proxyPath(sb.ID, "/command"), map[string]any{"command": "true"}, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
		doError(t, s, http.MethodGet, sandboxPath(sb.ID), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	})

	t.Run("agent killed from inside", func(t *testing.T) {
		sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
		runCommand(t, s, sb.ID, "true")
		if !hasProcess(t, sb.ID, agentProcess) {
			t.Fatalf("no agent process in the sandbox: %q", containerProcesses(t, sb.ID))
		}
		s.doJSON(t, http.MethodPost, proxyPath(sb.ID, "/command"),
			map[string]any{"command": "sleep 1; kill -9 $(pidof sandboxd)", "background": true}, http.StatusOK, nil)
		waitUntil(t, stateWait, "the agent to be killed", func() bool { return !hasProcess(t, sb.ID, agentProcess) })
		// Until dockerd closes the dead agent's exec stream, which it does
		// a moment after the process is gone, a request can still go to the
		// old session and fail with 502; the one after it starts a new agent.
		status, _, body := s.do(t, http.MethodPost, proxyPath(sb.ID, "/command"), map[string]any{"command": "true"}, nil)
		if status == http.StatusBadGateway && strings.Contains(string(body), `"code":"BACKEND_`) {
			t.Logf("first request after the kill went to the closing session: %s", body)
		} else if status != http.StatusOK {
			t.Fatalf("first command after the agent was killed: status %d %s", status, body)
		}
		if got := runCommand(t, s, sb.ID, "echo back"); got != "back" {
			t.Errorf("command after the agent was killed: %q, want back", got)
		}
	})

	t.Run("main process OOM-killed", func(t *testing.T) {
		// tail -c keeps the last 200 MB in memory: far more than 64Mi. The
		// main process waits for a command's file, so the kill comes after
		// create answered; one at once fails the create instead
		// (TestParityEntrypointExitsAtOnce).
		sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
			"entrypoint":     []string{"sh", "-c", "while [ ! -e /tmp/go ]; do sleep 1; done; head -c 300000000 /dev/zero | tail -c 200000000 > /dev/null"},
			"resourceLimits": map[string]string{"cpu": "1", "memory": "64Mi"},
		}))
		runCommand(t, s, sb.ID, "touch /tmp/go")
		got := waitState(t, s, sb.ID, "Failed", "Terminated")
		if got.Status.State != "Failed" || (got.Status.Reason != "CONTAINER_OOM_KILLED" && !strings.Contains(got.Status.Message, "137")) {
			t.Errorf("status %+v, want Failed, OOM-killed or with exit code 137", got.Status)
		}
		t.Logf("status of the OOM-killed sandbox: %+v", got.Status)
	})

	t.Run("upload into a read-only path", func(t *testing.T) {
		sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
		status, _, body := uploadRaw(t, s, sb.ID, agentProcess+"-x", "data")
		t.Logf("upload into the read-only agent volume: %d %s", status, body)
		wantUploadError(t, "upload into the read-only agent volume", status, body)
	})

	t.Run("upload onto a full filesystem", func(t *testing.T) {
		// A read-only root gives /tmp as a 256 MiB tmpfs, which counts
		// against the memory limit.
		sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
			"resourceLimits": map[string]string{"cpu": "1", "memory": "1Gi"},
			"extensions":     map[string]string{"sandboxd.io/read-only-rootfs": "true"},
		}))
		runCommand(t, s, sb.ID, "head -c 300000000 /dev/zero > /tmp/fill 2>/dev/null; df /tmp")
		status, _, body := uploadRaw(t, s, sb.ID, "/tmp/more.txt", strings.Repeat("x", 64<<10))
		t.Logf("upload onto the full /tmp: %d %s", status, body)
		wantUploadError(t, "upload onto a full /tmp", status, body)
		runCommand(t, s, sb.ID, "rm /tmp/fill")
		uploadFile(t, s, sb.ID, "/tmp/more.txt", "fits now")
		if got := downloadFile(t, s, sb.ID, "/tmp/more.txt"); got != "fits now" {
			t.Errorf("file uploaded once there was room: %q", got)
		}
	})

	if !s.running() {
		t.Fatal("sandboxd is gone after the faults")
	}
	if status, _, body := s.do(t, http.MethodGet, "/health", nil, nil); status != http.StatusOK {
		t.Errorf("GET /health after the faults: %d %s", status, body)
	}
}

// wantUploadError checks that a failed upload is a JSON error: a 4xx or
// 5xx (not 502, which would mean sandboxd lost the sandbox) with a code
// and a message.
func wantUploadError(t *testing.T, what string, status int, body []byte) {
	t.Helper()
	if status < 400 || status == http.StatusBadGateway {
		t.Errorf("%s: status %d, want a 4xx or 5xx error; body %s", what, status, body)
		return
	}
	e := decodeJSON[lcError](t, body)
	if e.Code == "" || e.Message == "" {
		t.Errorf("%s: error without code or message: %s", what, body)
	}
}
