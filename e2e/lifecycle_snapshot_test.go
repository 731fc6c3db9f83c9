//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// TestLifecycleSnapshots snapshots a sandbox holding a file, restores it
// into a new sandbox that has the file, and deletes the snapshot.
func TestLifecycleSnapshots(t *testing.T) {
	s := startServer(t)
	src := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	const marker, content = "/data/marker.txt", "written before the snapshot"
	uploadFile(t, s, src.ID, marker, content)
	unknown := "00000000-0000-4000-8000-000000000000"

	status, hdr, body := s.do(t, http.MethodPost, sandboxPath(src.ID, "/snapshots"), map[string]string{"name": "snap-1"}, nil)
	if status != http.StatusAccepted {
		t.Fatalf("create snapshot: status %d, want 202; body %s", status, body)
	}
	assertNoNulls(t, "create snapshot", body)
	snap := decodeJSON[lcSnapshot](t, body)
	removeImageAtEnd(t, "opensandbox-snapshots:"+snap.ID)
	if snap.ID == "" || snap.SandboxID != src.ID || snap.Name != "snap-1" {
		t.Errorf("create snapshot: %+v, want an id, sandboxId %s and name snap-1", snap, src.ID)
	}
	if loc := hdr.Get("Location"); loc != "/v1/snapshots/"+snap.ID {
		t.Errorf("create snapshot: Location %q, want /v1/snapshots/%s", loc, snap.ID)
	}
	if st := snap.Status.State; st != "Creating" && st != "Ready" {
		t.Errorf("create snapshot: state %q, want Creating or Ready", st)
	}
	parseUTC(t, "snapshot createdAt", snap.CreatedAt)

	waitUntil(t, stateWait, "snapshot "+snap.ID+" to be Ready", func() bool {
		for _, prefix := range []string{"/v1", ""} {
			snap = decodeJSON[lcSnapshot](t, getBody(t, s, prefix+"/snapshots/"+snap.ID))
		}
		if snap.Status.State == "Failed" {
			t.Fatalf("snapshot failed: %+v", snap)
		}
		return snap.Status.State == "Ready"
	})
	if !imageExists(t, "opensandbox-snapshots:"+snap.ID) {
		t.Errorf("snapshot is Ready but Docker has no image opensandbox-snapshots:%s", snap.ID)
	}

	t.Run("list", func(t *testing.T) {
		l := decodeJSON[lcSnapshotList](t, getBody(t, s, "/v1/snapshots?sandboxId="+src.ID))
		if len(l.Items) != 1 || l.Items[0].ID != snap.ID || l.Items[0].Status.State != "Ready" {
			t.Errorf("list by sandboxId: %+v, want just %s Ready", l.Items, snap.ID)
		}
		if want := (lcPage{Page: 1, PageSize: 20, TotalItems: 1, TotalPages: 1}); l.Pagination != want {
			t.Errorf("list by sandboxId: pagination %+v, want %+v", l.Pagination, want)
		}
		for _, q := range []string{"sandboxId=" + unknown, "sandboxId=" + src.ID + "&state=Creating"} {
			body := getBody(t, s, "/snapshots?"+q)
			if n := len(decodeJSON[lcSnapshotList](t, body).Items); n != 0 {
				t.Errorf("list %s: %d items, want none; body %s", q, n, body)
			}
		}
		doError(t, s, http.MethodGet, "/v1/snapshots?pageSize=201", nil, http.StatusUnprocessableEntity, "")
	})

	t.Run("restore", func(t *testing.T) {
		req := map[string]any{"snapshotId": snap.ID, "timeout": 600, "resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"}}
		restored := createSandbox(t, s, "/v1/sandboxes", req)
		if restored.SnapshotID != snap.ID {
			t.Errorf("restored sandbox: snapshotId %q, want %q", restored.SnapshotID, snap.ID)
		}
		if restored.Image != nil {
			t.Errorf("restored sandbox: image %+v, want it omitted", restored.Image)
		}
		if want := []string{"tail", "-f", "/dev/null"}; !slices.Equal(restored.Entrypoint, want) {
			t.Errorf("restored sandbox: entrypoint %q, want the default %q", restored.Entrypoint, want)
		}
		if got := runCommand(t, s, restored.ID, "cat "+marker); got != content {
			t.Errorf("cat %s in the restored sandbox: %q, want %q", marker, got, content)
		}
		if got := downloadFile(t, s, restored.ID, marker); got != content {
			t.Errorf("download %s from the restored sandbox: %q, want %q", marker, got, content)
		}
		doError(t, s, http.MethodDelete, "/v1/snapshots/"+snap.ID, nil, http.StatusConflict, "SNAPSHOT::DELETE_CONFLICT")
		wantEmpty(t, s, http.MethodDelete, sandboxPath(restored.ID), http.StatusNoContent)
	})

	t.Run("errors", func(t *testing.T) {
		req := map[string]any{"snapshotId": unknown, "timeout": 600, "resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"}}
		doError(t, s, http.MethodPost, "/v1/sandboxes", req, http.StatusNotFound, "SNAPSHOT::NOT_FOUND")
		both := busyboxWith(map[string]any{"snapshotId": snap.ID})
		doError(t, s, http.MethodPost, "/v1/sandboxes", both, http.StatusUnprocessableEntity, "")
		doError(t, s, http.MethodPost, sandboxPath(unknown, "/snapshots"), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
		doError(t, s, http.MethodPost, sandboxPath(src.ID, "/snapshots"), map[string]string{"name": ""}, http.StatusUnprocessableEntity, "")
		doError(t, s, http.MethodGet, "/v1/snapshots/"+unknown, nil, http.StatusNotFound, "SNAPSHOT::NOT_FOUND")

		wantEmpty(t, s, http.MethodPost, sandboxPath(src.ID, "/pause"), http.StatusAccepted)
		doError(t, s, http.MethodPost, sandboxPath(src.ID, "/snapshots"), nil, http.StatusConflict, "SNAPSHOT::INVALID_SOURCE_STATE")
		wantEmpty(t, s, http.MethodPost, sandboxPath(src.ID, "/resume"), http.StatusAccepted)
	})

	t.Run("delete", func(t *testing.T) {
		wantEmpty(t, s, http.MethodDelete, "/v1/snapshots/"+snap.ID, http.StatusNoContent)
		doError(t, s, http.MethodGet, "/v1/snapshots/"+snap.ID, nil, http.StatusNotFound, "SNAPSHOT::NOT_FOUND")
		doError(t, s, http.MethodDelete, "/snapshots/"+snap.ID, nil, http.StatusNotFound, "SNAPSHOT::NOT_FOUND")
		if imageExists(t, "opensandbox-snapshots:"+snap.ID) {
			t.Errorf("image opensandbox-snapshots:%s still exists after the snapshot was deleted", snap.ID)
		}
		req := map[string]any{"snapshotId": snap.ID, "timeout": 600, "resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"}}
		doError(t, s, http.MethodPost, "/v1/sandboxes", req, http.StatusNotFound, "SNAPSHOT::NOT_FOUND")
		if body := getBody(t, s, "/v1/snapshots?sandboxId="+src.ID); len(decodeJSON[lcSnapshotList](t, body).Items) != 0 {
			t.Errorf("list after delete: %s, want no items", body)
		}
	})
}

// lcSnapshotList is GET /v1/snapshots.
type lcSnapshotList struct {
	Items      []lcSnapshot `json:"items"`
	Pagination lcPage       `json:"pagination"`
}

// snapshotReady snapshots a sandbox and waits for the snapshot to be
// Ready; its image is removed at the end of the test.
func snapshotReady(t testing.TB, s *Server, sandboxID string) lcSnapshot {
	t.Helper()
	var snap lcSnapshot
	s.doJSON(t, http.MethodPost, sandboxPath(sandboxID, "/snapshots"), nil, http.StatusAccepted, &snap)
	removeImageAtEnd(t, "opensandbox-snapshots:"+snap.ID)
	waitUntil(t, stateWait, "snapshot "+snap.ID+" to be Ready", func() bool {
		snap = decodeJSON[lcSnapshot](t, getBody(t, s, "/v1/snapshots/"+snap.ID))
		if snap.Status.State == "Failed" {
			t.Fatalf("snapshot failed: %+v", snap)
		}
		return snap.Status.State == "Ready"
	})
	return snap
}

// TestSnapshotKeepsOnlyTheFilesystem: a snapshot carries its sandbox's
// files, not what the sandbox's create set (env with its secrets,
// metadata labels, pool labels) nor the agent's files (a background
// command's output); a restore has only what its own request sets. The
// sources are a sandbox created with env and metadata, and one claimed
// from a pool whose template sets env.
func TestSnapshotKeepsOnlyTheFilesystem(t *testing.T) {
	s := startServer(t)
	pool := map[string]any{
		"name": "snapsrc",
		"template": map[string]any{
			"image":          map[string]any{"uri": imageBusybox},
			"entrypoint":     []string{"tail", "-f", "/dev/null"},
			"resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"},
			"env":            map[string]string{"SECRET": "pool-secret-x"},
		},
		"capacitySpec": map[string]int{"bufferMax": 1, "bufferMin": 1, "poolMax": 1, "poolMin": 0},
	}
	s.doJSON(t, http.MethodPost, "/v1/pools", pool, http.StatusCreated, nil)
	waitPool(t, s, "snapsrc", 1)
	sources := map[string]lcSandbox{
		"created": createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
			"env":      map[string]string{"SECRET": "create-secret-x"},
			"metadata": map[string]string{"owner": "alice"},
		})),
		"pooled": createSandbox(t, s, "/v1/sandboxes", map[string]any{
			"extensions": map[string]string{"poolRef": "snapsrc"}, "timeout": 600, "metadata": map[string]string{"owner": "alice"},
		}),
	}
	for name, src := range sources {
		t.Run(name, func(t *testing.T) {
			if got := runCommand(t, s, src.ID, "echo $SECRET"); !strings.HasSuffix(got, "-secret-x") {
				t.Fatalf("source's SECRET is %q: the test does not test what it says", got)
			}
			uploadFile(t, s, src.ID, "/data/kept.txt", "the filesystem")
			s.doJSON(t, http.MethodPost, proxyPath(src.ID, "/command"), map[string]any{"command": "echo agent-output-secret; sleep 300", "background": true}, http.StatusOK, nil)
			snap := snapshotReady(t, s, src.ID)

			cfg := imageConfig(t, "opensandbox-snapshots:"+snap.ID)
			for _, kv := range cfg.Env {
				if strings.HasPrefix(kv, "SECRET=") {
					t.Errorf("snapshot image env has %q, want no SECRET", kv)
				}
			}
			for k := range cfg.Labels {
				t.Errorf("snapshot image has label %q (the source image has none)", k)
			}

			restored := createSandbox(t, s, "/v1/sandboxes", map[string]any{
				"snapshotId": snap.ID, "timeout": 600, "resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"},
				"env": map[string]string{"OWN": "restore-value"},
			})
			if got := runCommand(t, s, restored.ID, "cat /data/kept.txt"); got != "the filesystem" {
				t.Errorf("restored /data/kept.txt = %q, want the source's file", got)
			}
			if got := runCommand(t, s, restored.ID, "env | grep -c SECRET; echo $OWN"); got != "0\nrestore-value" {
				t.Errorf("restored sandbox: SECRET count and OWN = %q, want 0 and the restore's own env", got)
			}
			if got := runCommand(t, s, restored.ID, "grep -rl agent-output-secret /tmp /var/tmp 2>/dev/null; ls -a /tmp"); strings.Contains(got, "agent-output-secret") || strings.Contains(got, "sandboxd-") {
				t.Errorf("restored sandbox holds the agent's output files: %q", got)
			}
			info := sandboxContainer(t, restored.ID)
			for _, kv := range info.Config.Env {
				if strings.HasPrefix(kv, "SECRET=") {
					t.Errorf("restored container env has %q", kv)
				}
			}
			for k, v := range info.Config.Labels {
				if k == "owner" || k == labelPool || strings.Contains(k, "pool") || v == src.ID {
					t.Errorf("restored container has the source's label %s=%q", k, v)
				}
			}
			if md := getSandbox(t, s, "/v1", restored.ID).Metadata; len(md) != 0 {
				t.Errorf("restored sandbox metadata %v, want none (its request set none)", md)
			}
		})
	}
}

// imageConfig is Docker's configuration of an image.
func imageConfig(t testing.TB, ref string) *container.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	img, err := dockerClient(t).ImageInspect(ctx, ref)
	if err != nil {
		t.Fatalf("inspect image %s: %v", ref, err)
	}
	if img.Config == nil {
		return &container.Config{}
	}
	return &container.Config{Env: img.Config.Env, Labels: img.Config.Labels}
}
