//go:build e2e

package e2e

import (
	"net/http"
	"testing"
)

// sandboxJSON is the part of the lifecycle API's Sandbox object that the
// smoke tests look at.
type sandboxJSON struct {
	ID     string `json:"id"`
	Status struct {
		State string `json:"state"`
	} `json:"status"`
	Entrypoint []string `json:"entrypoint"`
	ExpiresAt  string   `json:"expiresAt"`
}

// busyboxRequest is a minimal create request for the busybox test image.
func busyboxRequest() map[string]any {
	return map[string]any{
		"image":          map[string]any{"uri": imageBusybox},
		"entrypoint":     []string{"tail", "-f", "/dev/null"},
		"timeout":        600,
		"resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"},
	}
}

func TestSmokeLifecycleHTTP(t *testing.T) {
	s := startServer(t)

	status, _, body := s.do(t, http.MethodGet, "/health", nil, map[string]string{apiKeyHeader: ""})
	if status != http.StatusOK {
		t.Fatalf("GET /health: status %d, body %s", status, body)
	}
	if got := decodeJSON[map[string]string](t, body)["status"]; got != "healthy" {
		t.Errorf("GET /health: status field %q, want healthy", got)
	}

	var created sandboxJSON
	s.doJSON(t, http.MethodPost, "/v1/sandboxes", busyboxRequest(), http.StatusAccepted, &created)
	if created.ID == "" {
		t.Fatal("create: response has no id")
	}

	var got sandboxJSON
	s.doJSON(t, http.MethodGet, sandboxPath(created.ID), nil, http.StatusOK, &got)
	if got.ID != created.ID || got.Status.State != "Running" {
		t.Errorf("GET sandbox: id %q state %q, want %q Running", got.ID, got.Status.State, created.ID)
	}
	if got.ExpiresAt == "" {
		t.Error("GET sandbox: no expiresAt for a sandbox with a timeout")
	}

	// Docker agrees: one running container carrying both labels.
	ctr := sandboxContainer(t, created.ID)
	if !ctr.State.Running {
		t.Errorf("container %s is %s, want running", ctr.ID, ctr.State.Status)
	}
	if inst := ctr.Config.Labels[labelInstance]; inst != s.InstanceID {
		t.Errorf("container label %s = %q, want %q", labelInstance, inst, s.InstanceID)
	}

	s.doJSON(t, http.MethodDelete, sandboxPath(created.ID), nil, http.StatusNoContent, nil)
	if status, _, body := s.do(t, http.MethodGet, sandboxPath(created.ID), nil, nil); status != http.StatusNotFound {
		t.Errorf("GET after DELETE: status %d, want 404; body %s", status, body)
	}
	if left := containersByLabel(t, labelID, created.ID); len(left) != 0 {
		t.Errorf("DELETE left %d container(s) behind", len(left))
	}
}

func TestSmokeLifecycleTypeScriptSDK(t *testing.T) {
	s := startServer(t)
	s.runNode(t, "sdk_smoke.test.mjs", nil)
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("the SDK's kill left %d container(s) behind", len(left))
	}
}

// TestSmokeRestart checks that a sandbox outlives its server: after a crash
// (SIGKILL) and after a clean stop, the restarted server still serves it.
func TestSmokeRestart(t *testing.T) {
	s := startServer(t)
	var created sandboxJSON
	s.doJSON(t, http.MethodPost, "/v1/sandboxes", busyboxRequest(), http.StatusAccepted, &created)

	for _, stop := range []struct {
		name string
		stop func()
	}{
		{"SIGKILL", s.Kill9},
		{"SIGTERM", s.Stop},
	} {
		stop.stop()
		s.Restart()
		var got sandboxJSON
		s.doJSON(t, http.MethodGet, sandboxPath(created.ID), nil, http.StatusOK, &got)
		if got.Status.State != "Running" {
			t.Errorf("after %s and restart: state %q, want Running", stop.name, got.Status.State)
		}
		if ctr := sandboxContainer(t, created.ID); !ctr.State.Running {
			t.Errorf("after %s and restart: container is %s, want running", stop.name, ctr.State.Status)
		}
	}
	s.doJSON(t, http.MethodDelete, sandboxPath(created.ID), nil, http.StatusNoContent, nil)
}
