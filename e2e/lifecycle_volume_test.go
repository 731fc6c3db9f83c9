//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// TestLifecycleVolumes mounts host directories under an allowed prefix and
// a named volume, and refuses host paths outside the allow-list without
// creating anything.
func TestLifecycleVolumes(t *testing.T) {
	allowed, outside := t.TempDir(), t.TempDir()
	claim, kept := "sandboxd-e2e-"+randomHex(t, 4), "sandboxd-e2e-kept-"+randomHex(t, 4)
	orphanA, orphanB := "sandboxd-e2e-orphan-"+randomHex(t, 4), "sandboxd-e2e-orphan-"+randomHex(t, 4)
	// Registered first, so they run after the harness removed the containers.
	for _, v := range []string{claim, kept, orphanA, orphanB} {
		removeVolumeAtEnd(t, v)
	}
	s := startServer(t, withTOML(fmt.Sprintf("[storage]\nallowed_host_paths = [%q]\n", allowed)))
	if err := os.WriteFile(filepath.Join(allowed, "from-host.txt"), []byte("host-content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(allowed, "created", "by", "sandboxd")

	t.Run("mounted", func(t *testing.T) {
		sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"volumes": []any{
			map[string]any{"name": "work", "host": map[string]string{"path": allowed}, "mountPath": "/mnt/host"},
			map[string]any{"name": "ro", "host": map[string]string{"path": allowed}, "mountPath": "/mnt/ro", "readOnly": true},
			map[string]any{"name": "fresh", "host": map[string]string{"path": fresh}, "mountPath": "/mnt/fresh"},
			map[string]any{"name": "file", "host": map[string]string{"path": filepath.Join(allowed, "from-host.txt")}, "mountPath": "/mnt/file.txt", "readOnly": true},
			map[string]any{"name": "cache", "pvc": map[string]any{"claimName": claim, "deleteOnSandboxTermination": true}, "mountPath": "/mnt/pvc"},
			map[string]any{"name": "kept", "pvc": map[string]any{"claimName": kept}, "mountPath": "/mnt/kept"},
		}}))

		if got := runCommand(t, s, sb.ID, "cat /mnt/file.txt"); got != "host-content" {
			t.Errorf("host file mounted as a file: %q, want host-content", got)
		}
		if got := runCommand(t, s, sb.ID, "cat /mnt/host/from-host.txt"); got != "host-content" {
			t.Errorf("host file seen in the sandbox: %q, want host-content", got)
		}
		if got := downloadFile(t, s, sb.ID, "/mnt/host/from-host.txt"); got != "host-content\n" {
			t.Errorf("host file downloaded from the sandbox: %q, want %q", got, "host-content\n")
		}
		runCommand(t, s, sb.ID, "echo from-sandbox > /mnt/host/from-sandbox.txt && echo fresh > /mnt/fresh/f.txt && echo kept > /mnt/pvc/p.txt")
		for path, want := range map[string]string{
			filepath.Join(allowed, "from-sandbox.txt"): "from-sandbox\n",
			filepath.Join(fresh, "f.txt"):              "fresh\n",
		} {
			if got, err := os.ReadFile(path); err != nil || string(got) != want {
				t.Errorf("host file %s written in the sandbox: %q, %v; want %q", path, got, err, want)
			}
		}
		if got := runCommand(t, s, sb.ID, "touch /mnt/ro/x 2>/dev/null && echo writable || echo read-only"); got != "read-only" {
			t.Errorf("readOnly mount: %s", got)
		}
		if got := runCommand(t, s, sb.ID, "cat /mnt/pvc/p.txt"); got != "kept" {
			t.Errorf("file in the named volume: %q, want kept", got)
		}

		ctr := sandboxContainer(t, sb.ID)
		found := false
		for _, m := range ctr.Mounts {
			if m.Type == "volume" && m.Name == claim && m.Destination == "/mnt/pvc" {
				found = true
			}
		}
		if !found {
			t.Errorf("container mounts %+v: no volume %s at /mnt/pvc", ctr.Mounts, claim)
		}
		for _, v := range []string{claim, kept} {
			if !volumeExists(t, v) {
				t.Fatalf("named volume %s does not exist while its sandbox runs", v)
			}
		}

		wantEmpty(t, s, http.MethodDelete, sandboxPath(sb.ID), http.StatusNoContent)
		assertGone(t, s, sb.ID)
		if volumeExists(t, claim) {
			t.Errorf("named volume %s with deleteOnSandboxTermination survived the sandbox", claim)
		}
		if !volumeExists(t, kept) {
			t.Errorf("named volume %s without deleteOnSandboxTermination went with the sandbox", kept)
		}
	})

	t.Run("refused", func(t *testing.T) {
		escape := filepath.Join(allowed, "escape")
		if err := os.Symlink(outside, escape); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name, path, code string
			mustNotExist     string // a host path the refused request must not create
		}{
			{"outside the allow-list", filepath.Join(outside, "new-dir"), "VOLUME::HOST_PATH_NOT_ALLOWED", filepath.Join(outside, "new-dir")},
			{"symlink out of the allow-list", filepath.Join(escape, "new-dir"), "VOLUME::HOST_PATH_NOT_ALLOWED", filepath.Join(outside, "new-dir")},
			{"docker socket", "/var/run/docker.sock", "VOLUME::HOST_PATH_NOT_ALLOWED", ""},
			{"prefix look-alike", allowed + "-sibling", "VOLUME::HOST_PATH_NOT_ALLOWED", allowed + "-sibling"},
			{"dot-dot", allowed + "/../" + filepath.Base(outside) + "/dd", "VOLUME::INVALID_HOST_PATH", filepath.Join(outside, "dd")},
			{"relative", "tmp/relative", "VOLUME::INVALID_HOST_PATH", ""},
		}
		for _, tt := range tests {
			req := busyboxWith(map[string]any{"volumes": []any{
				map[string]any{"name": "data", "host": map[string]string{"path": tt.path}, "mountPath": "/mnt/data"},
			}})
			msg := doError(t, s, http.MethodPost, "/v1/sandboxes", req, http.StatusBadRequest, tt.code)
			if tt.code == "VOLUME::HOST_PATH_NOT_ALLOWED" && !strings.Contains(msg, tt.path) {
				t.Errorf("%s: message %q does not name the path %s", tt.name, msg, tt.path)
			}
			if tt.mustNotExist == "" {
				continue
			}
			if _, err := os.Lstat(tt.mustNotExist); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: refused request created %s on the host (lstat: %v)", tt.name, tt.mustNotExist, err)
			}
		}
		if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
			t.Errorf("refused creates left %d container(s)", len(left))
		}
	})

	t.Run("failed creates leave no named volume", func(t *testing.T) {
		pvc := func(name string) map[string]any {
			return map[string]any{"name": "cache", "pvc": map[string]any{"claimName": name, "deleteOnSandboxTermination": true}, "mountPath": "/mnt/pvc"}
		}
		refused := busyboxWith(map[string]any{"volumes": []any{
			pvc(orphanA),
			map[string]any{"name": "data", "host": map[string]string{"path": filepath.Join(outside, "refused")}, "mountPath": "/mnt/data"},
		}})
		doError(t, s, http.MethodPost, "/v1/sandboxes", refused, http.StatusBadRequest, "VOLUME::HOST_PATH_NOT_ALLOWED")
		if volumeExists(t, orphanA) {
			t.Errorf("a create refused for its host volume left the named volume %s it created", orphanA)
		}

		noImage := busyboxWith(map[string]any{
			"image":   map[string]string{"uri": "sandboxd-test/does-not-exist-" + randomHex(t, 4) + ":latest"},
			"volumes": []any{pvc(orphanB)},
		})
		doError(t, s, http.MethodPost, "/v1/sandboxes", noImage, http.StatusInternalServerError, "DOCKER::SANDBOX_IMAGE_PULL_FAILED")
		if volumeExists(t, orphanB) {
			t.Errorf("a create that failed to pull its image left the named volume %s it created", orphanB)
		}
		if l := listSandboxes(t, s, "/v1", ""); len(l.Items) != 0 {
			t.Errorf("failed creates left records: ids %v", ids(l.Items))
		}
	})
}

// volumeExists asks Docker whether a named volume exists.
func volumeExists(t testing.TB, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	_, err := dockerClient(t).VolumeInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("inspect volume %s: %v", name, err)
	}
	return true
}

// removeVolumeAtEnd removes a named volume, if it still exists, when the
// test ends (after the harness has removed the containers using it).
func removeVolumeAtEnd(t testing.TB, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
		defer cancel()
		if err := dockerClient(t).VolumeRemove(ctx, name, true); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("clean-up: remove volume %s: %v", name, err)
		}
	})
}

// TestLifecycleVolumeSubPath mounts one directory of a named volume. On
// engines before API 1.45 (Docker 20.10 here) the engine drops the subPath
// option and would mount the whole volume writable; sandboxd binds the
// sub-directory itself. Only the subtree is visible, readOnly holds, and a
// subPath through a symlink inside the volume is refused.
func TestLifecycleVolumeSubPath(t *testing.T) {
	claim := "sandboxd-e2e-sub-" + randomHex(t, 4)
	removeVolumeAtEnd(t, claim)
	s := startServer(t)
	vol := func(subPath string, readOnly bool) map[string]any {
		v := map[string]any{"name": "d", "pvc": map[string]any{"claimName": claim}, "mountPath": "/mnt/d", "readOnly": readOnly}
		if subPath != "" {
			v["subPath"] = subPath
		}
		return v
	}
	whole := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"volumes": []any{vol("", false)}}))
	runCommand(t, s, whole.ID, "mkdir -p /mnt/d/datasets/train && echo train > /mnt/d/datasets/train/a.txt && echo secret > /mnt/d/top.txt && ln -s / /mnt/d/datasets/root && ln -s ../.. /mnt/d/datasets/up")

	sub := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"volumes": []any{vol("datasets/train", true)}}))
	if got := runCommand(t, s, sub.ID, "ls -A /mnt/d"); got != "a.txt" {
		t.Errorf("subPath datasets/train shows %q, want only a.txt", got)
	}
	if got := runCommand(t, s, sub.ID, "cat /mnt/d/a.txt"); got != "train" {
		t.Errorf("a.txt in the subPath mount: %q", got)
	}
	if got := runCommand(t, s, sub.ID, "touch /mnt/d/new 2>/dev/null && echo writable || echo read-only"); got != "read-only" {
		t.Errorf("readOnly subPath mount: %s", got)
	}
	if got := runCommand(t, s, whole.ID, "ls /mnt/d/datasets/train"); got != "a.txt" {
		t.Errorf("the volume's subtree after the read-only sandbox tried to write: %q", got)
	}

	for _, p := range []string{"datasets/root", "datasets/root/etc", "datasets/up/top.txt"} {
		req := busyboxWith(map[string]any{"volumes": []any{vol(p, true)}})
		doError(t, s, http.MethodPost, "/v1/sandboxes", req, http.StatusBadRequest, "VOLUME::INVALID_SUB_PATH")
	}
	if l := listSandboxes(t, s, "/v1", ""); len(l.Items) != 2 {
		t.Errorf("refused subPath creates left sandboxes: %v", ids(l.Items))
	}
}

// TestLifecycleVolumePins: a host mount is pinned under the state dir for
// as long as its sandbox exists, across a restart of sandboxd; deleting the
// sandbox releases it, and so does a restart after its container was
// removed behind sandboxd's back.
func TestLifecycleVolumePins(t *testing.T) {
	allowed := t.TempDir()
	s := startServer(t, withTOML(fmt.Sprintf("[storage]\nallowed_host_paths = [%q]\n", allowed)))
	pins := func() int {
		info, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(info), filepath.Join(s.Dir, "store", "mounts")+"/")
	}
	req := busyboxWith(map[string]any{"volumes": []any{
		map[string]any{"name": "h", "host": map[string]string{"path": allowed}, "mountPath": "/mnt/h"},
	}})
	kept, gone := createSandbox(t, s, "/v1/sandboxes", req), createSandbox(t, s, "/v1/sandboxes", req)
	if n := pins(); n != 2 {
		t.Fatalf("%d pins for two sandboxes with a host mount", n)
	}
	s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	if err := dockerClient(t).ContainerRemove(ctx, sandboxContainer(t, gone.ID).ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	s.start()
	if n := pins(); n != 1 {
		t.Errorf("%d pins after a restart with one sandbox left, want 1", n)
	}
	runCommand(t, s, kept.ID, "echo after-restart > /mnt/h/f")
	if got, err := os.ReadFile(filepath.Join(allowed, "f")); err != nil || string(got) != "after-restart\n" {
		t.Errorf("the host mount after the restart: %q, %v", got, err)
	}
	wantEmpty(t, s, http.MethodDelete, sandboxPath(kept.ID), http.StatusNoContent)
	if n := pins(); n != 0 {
		t.Errorf("%d pins after the last sandbox was deleted", n)
	}
}
