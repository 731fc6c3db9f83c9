//go:build e2e

package e2e

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

// TestLifecycleRestart crashes sandboxd (SIGKILL) and starts it again on
// the same store: every sandbox is still served with its state, renewed
// expiry and patched metadata, the short-lived one is reaped at its expiry,
// a command runs through the SDK, a container of the instance that has no
// record is removed, and a sandbox whose container went while sandboxd was
// down is forgotten.
func TestLifecycleRestart(t *testing.T) {
	t.Parallel() // waits about a minute for the short-lived sandbox
	s := startServer(t)
	suite := "restart-" + randomHex(t, 4)
	md := func(role string) map[string]string { return map[string]string{"suite": suite, "role": role} }
	renewed := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"metadata": md("renewed")}))
	manual := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"metadata": md("manual"), "timeout": nil}))
	short := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"metadata": md("short"), "timeout": 60}))
	vanished := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"metadata": md("vanished")}))

	at := time.Now().Add(50 * time.Minute).UTC().Truncate(time.Microsecond)
	var r struct {
		ExpiresAt string `json:"expiresAt"`
	}
	s.doJSON(t, http.MethodPost, sandboxPath(renewed.ID, "/renew-expiration"), map[string]string{"expiresAt": at.Format(time.RFC3339Nano)}, http.StatusOK, &r)
	if !parseUTC(t, "renewed expiresAt", r.ExpiresAt).Equal(at) {
		t.Fatalf("renew: expiresAt %s, want %s", r.ExpiresAt, at.Format(time.RFC3339Nano))
	}
	s.doJSON(t, http.MethodPatch, sandboxPath(manual.ID, "/metadata"), map[string]any{"patched": "before-kill", "role": nil}, http.StatusOK, nil)
	wantManualMD := map[string]string{"suite": suite, "patched": "before-kill"}
	wantEmpty(t, s, http.MethodPost, sandboxPath(renewed.ID, "/pause"), http.StatusAccepted)

	s.Kill9()
	removeContainer(t, sandboxContainer(t, vanished.ID).ID)
	// A container of this instance that sandboxd has no record of, as a
	// crash in the middle of a create would leave.
	rogue := "x-" + randomHex(t, 6)
	startContainer(t, map[string]string{labelInstance: s.InstanceID, labelID: rogue})
	s.Restart()

	waitUntil(t, stateWait, "the container without a record to be removed", func() bool {
		return len(containersByLabel(t, labelID, rogue)) == 0
	})

	l := listSandboxes(t, s, "/v1", "metadata=suite%3D"+suite)
	if got, want := ids(l.Items), []string{short.ID, manual.ID, renewed.ID}; !slices.Equal(got, want) {
		t.Fatalf("list after restart: ids %v, want %v", got, want)
	}
	for _, sb := range l.Items {
		want := "Running"
		if sb.ID == renewed.ID {
			want = "Paused"
		}
		if sb.Status.State != want {
			t.Errorf("after restart: %s is %q, want %s", sb.ID, sb.Status.State, want)
		}
	}
	doError(t, s, http.MethodGet, sandboxPath(vanished.ID), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	if got := getSandbox(t, s, "/v1", renewed.ID).ExpiresAt; got != r.ExpiresAt {
		t.Errorf("after restart: renewed sandbox expires at %s, want %s", got, r.ExpiresAt)
	}
	if got := getSandbox(t, s, "/v1", manual.ID); !maps.Equal(got.Metadata, wantManualMD) || got.ExpiresAt != "" {
		t.Errorf("after restart: manual sandbox metadata %v expiresAt %q, want %v and no expiry", got.Metadata, got.ExpiresAt, wantManualMD)
	}
	if got := getSandbox(t, s, "/v1", short.ID).ExpiresAt; got != short.ExpiresAt {
		t.Errorf("after restart: short-lived sandbox expires at %s, want %s", got, short.ExpiresAt)
	}
	if l := listSandboxes(t, s, "/v1", "metadata=patched%3Dbefore-kill"); !slices.Equal(ids(l.Items), []string{manual.ID}) {
		t.Errorf("list by patched metadata after restart: ids %v, want [%s]", ids(l.Items), manual.ID)
	}

	wantEmpty(t, s, http.MethodPost, sandboxPath(renewed.ID, "/resume"), http.StatusAccepted)
	s.runNode(t, "lifecycle_connect.test.mjs", map[string]string{"SANDBOXD_SANDBOX_IDS": renewed.ID + "," + manual.ID})

	waitReaped(t, s, short.ID, parseUTC(t, "expiresAt", short.ExpiresAt))
	for _, id := range []string{renewed.ID, manual.ID} {
		if got := getSandbox(t, s, "/v1", id); got.Status.State != "Running" {
			t.Errorf("after the short-lived sandbox was reaped: %s is %q, want Running", id, got.Status.State)
		}
	}
}

// startContainer runs a busybox container with the given labels behind
// sandboxd's back. The harness removes it with the instance's containers.
func startContainer(t testing.TB, labels map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	c := dockerClient(t)
	created, err := c.ContainerCreate(ctx, &container.Config{
		Image:  imageBusybox,
		Cmd:    []string{"tail", "-f", "/dev/null"},
		Labels: labels,
	}, &container.HostConfig{}, nil, nil, "")
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	if err := c.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start container %s: %v", created.ID, err)
	}
}
