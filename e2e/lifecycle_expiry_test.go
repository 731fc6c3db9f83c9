//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

// TestLifecycleMainProcessExits checks the states of sandboxes whose main
// process ends: Failed with the exit code, or Terminated. The entrypoints
// wait for a file the test creates once the sandboxes are up (one that
// ends at once fails the create: TestParityEntrypointExitsAtOnce).
func TestLifecycleMainProcessExits(t *testing.T) {
	s := startServer(t)
	suite := "exits-" + randomHex(t, 4)
	const waitGo = "until [ -e /tmp/go ]; do sleep 0.1; done"
	failed := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
		"entrypoint": []string{"sh", "-c", "echo about-to-fail; " + waitGo + "; exit 3"},
		"metadata":   map[string]string{"suite": suite},
	}))
	done := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
		"entrypoint": []string{"sh", "-c", waitGo},
		"metadata":   map[string]string{"suite": suite},
	}))
	for _, id := range []string{failed.ID, done.ID} {
		runCommand(t, s, id, "touch /tmp/go")
	}

	got := waitState(t, s, failed.ID, "Failed", "Terminated")
	if got.Status.State != "Failed" || !strings.Contains(got.Status.Message, "3") {
		t.Errorf("exit 3: status %+v, want Failed with the exit code 3 in the message", got.Status)
	}
	got = waitState(t, s, done.ID, "Failed", "Terminated")
	if got.Status.State != "Terminated" {
		t.Errorf("true: status %+v, want Terminated", got.Status)
	}

	// The list reports the same states.
	want := map[string]string{failed.ID: "Failed", done.ID: "Terminated"}
	l := listSandboxes(t, s, "/v1", "metadata=suite%3D"+suite)
	if len(l.Items) != 2 {
		t.Fatalf("list: ids %v, want both sandboxes", ids(l.Items))
	}
	for _, sb := range l.Items {
		if sb.Status.State != want[sb.ID] {
			t.Errorf("list: %s is %q, want %q", sb.ID, sb.Status.State, want[sb.ID])
		}
	}
	if l := listSandboxes(t, s, "/v1", "state=failed&metadata=suite%3D"+suite); len(l.Items) != 1 || l.Items[0].ID != failed.ID {
		t.Errorf("list state=failed: ids %v, want [%s]", ids(l.Items), failed.ID)
	}

	// The output of a failed sandbox is what explains it.
	if got := string(wantText(t, s, sandboxPath(failed.ID, "/diagnostics/logs"))); got != "about-to-fail\n" {
		t.Errorf("logs of the failed sandbox: %q, want %q", got, "about-to-fail\n")
	}

	// An exited sandbox cannot be paused but can be deleted.
	doError(t, s, http.MethodPost, sandboxPath(failed.ID, "/pause"), nil, http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
	wantEmpty(t, s, http.MethodDelete, sandboxPath(failed.ID), http.StatusNoContent)
	assertGone(t, s, failed.ID)

	// A container removed behind sandboxd's back takes its sandbox with it.
	removeContainer(t, sandboxContainer(t, done.ID).ID)
	doError(t, s, http.MethodGet, sandboxPath(done.ID), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	if l := listSandboxes(t, s, "/v1", "metadata=suite%3D"+suite); len(l.Items) != 0 {
		t.Errorf("list after the containers went: ids %v, want none", ids(l.Items))
	}
	doError(t, s, http.MethodDelete, sandboxPath(done.ID), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
}

// removeContainer force-removes a container behind sandboxd's back.
func removeContainer(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	if err := dockerClient(t).ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatalf("remove container %s: %v", id, err)
	}
}

// TestLifecycleTTLExpiry checks that a sandbox is reaped once its timeout
// has passed, and not before.
func TestLifecycleTTLExpiry(t *testing.T) {
	t.Parallel() // waits about a minute
	s := startServer(t)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"timeout": 60}))
	expires := parseUTC(t, "expiresAt", sb.ExpiresAt)
	if got := expires.Sub(parseUTC(t, "createdAt", sb.CreatedAt)); got != time.Minute {
		t.Errorf("expiresAt - createdAt = %s, want 1m", got)
	}
	waitReaped(t, s, sb.ID, expires)
}

// waitReaped waits until a sandbox is gone (GET 404), fails if it went
// before expires, and checks that its container is gone too.
func waitReaped(t testing.TB, s *Server, id string, expires time.Time) {
	t.Helper()
	waitExpired(t, s, id, expires)
	assertGone(t, s, id)
}

// waitExpired waits until a sandbox is gone from the API (GET 404), and
// fails if it went before expires.
func waitExpired(t testing.TB, s *Server, id string, expires time.Time) {
	t.Helper()
	waitUntil(t, time.Until(expires)+reapSlack, "sandbox "+id+" to be reaped", func() bool {
		status, _, body := s.do(t, http.MethodGet, sandboxPath(id), nil, nil)
		switch status {
		case http.StatusOK:
			return false
		case http.StatusNotFound:
			return true
		}
		t.Fatalf("GET %s while waiting for expiry: status %d; body %s", id, status, body)
		return false
	})
	// Server and test share the clock, so a 404 seen before expiresAt means
	// the sandbox was removed early.
	if now := time.Now(); now.Before(expires) {
		t.Errorf("sandbox %s was gone at %s, before its expiresAt %s", id, now.Format(time.RFC3339Nano), expires.Format(time.RFC3339Nano))
	}
}
