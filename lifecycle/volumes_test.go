package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

func TestCheckHostPath(t *testing.T) {
	root := t.TempDir()
	allowed := filepath.Join(root, "allowed")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{allowed, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(allowed, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(allowed, "real"), filepath.Join(root, "alias")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(allowed, "file.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	storeDir := filepath.Join(root, "state")
	innerStore := filepath.Join(allowed, "state")

	tests := []struct {
		name       string
		allow      []string
		store      string // store dir; "" = storeDir
		path       string
		code       string // "" = allowed
		want       string // resolved path when allowed
		notCreated string // a path that must not exist afterwards
	}{
		{name: "existing dir", allow: []string{allowed}, path: allowed, want: allowed},
		{name: "missing dir is left to the runtime", allow: []string{allowed}, path: filepath.Join(allowed, "new", "deep"), want: filepath.Join(allowed, "new", "deep"), notCreated: filepath.Join(allowed, "new")},
		{name: "existing regular file", allow: []string{allowed}, path: filepath.Join(allowed, "file.txt"), want: filepath.Join(allowed, "file.txt")},
		{name: "allow-list entry not normalised", allow: []string{allowed + "/"}, path: filepath.Join(allowed, "n2"), want: filepath.Join(allowed, "n2")},
		{name: "outside is refused and not created", allow: []string{allowed}, path: filepath.Join(outside, "made"), code: CodeVolHostNotAllowed, notCreated: filepath.Join(outside, "made")},
		{name: "sibling prefix is refused", allow: []string{allowed}, path: allowed + "2", code: CodeVolHostNotAllowed, notCreated: allowed + "2"},
		{name: "symlink escaping the prefix", allow: []string{allowed}, path: filepath.Join(allowed, "escape"), code: CodeVolHostNotAllowed},
		{name: "below a symlink escaping the prefix", allow: []string{allowed}, path: filepath.Join(allowed, "escape", "sub"), code: CodeVolHostNotAllowed, notCreated: filepath.Join(outside, "sub")},
		{name: "symlink into the prefix from outside", allow: []string{allowed}, path: filepath.Join(root, "alias"), code: CodeVolHostNotAllowed, notCreated: filepath.Join(allowed, "real")},
		{name: "dotdot", allow: []string{allowed}, path: allowed + "/../outside", code: CodeVolInvalidHostPath},
		{name: "double slash", allow: []string{allowed}, path: allowed + "//x", code: CodeVolInvalidHostPath, notCreated: filepath.Join(allowed, "x")},
		{name: "trailing slash", allow: []string{allowed}, path: allowed + "/", code: CodeVolInvalidHostPath},
		{name: "relative", allow: []string{allowed}, path: "relative/path", code: CodeVolInvalidHostPath},
		{name: "empty", allow: []string{allowed}, path: "", code: CodeVolInvalidHostPath},
		{name: "empty allow-list denies all", path: filepath.Join(allowed, "x"), code: CodeVolHostNotAllowed, notCreated: filepath.Join(allowed, "x")},
		{name: "docker socket with / allowed", allow: []string{"/"}, path: "/var/run/docker.sock", code: CodeVolHostNotAllowed},
		{name: "docker socket alias with / allowed", allow: []string{"/"}, path: "/run/docker.sock", code: CodeVolHostNotAllowed},
		{name: "docker storage with / allowed", allow: []string{"/"}, path: "/var/lib/docker/volumes", code: CodeVolHostNotAllowed},
		{name: "parent of the socket with / allowed", allow: []string{"/"}, path: "/var/run", code: CodeVolHostNotAllowed},
		{name: "root with / allowed", allow: []string{"/"}, path: "/", code: CodeVolHostNotAllowed},
		{name: "proc with / allowed", allow: []string{"/"}, path: "/proc/1", code: CodeVolHostNotAllowed},
		{name: "store dir", allow: []string{allowed}, store: innerStore, path: innerStore, code: CodeVolHostNotAllowed},
		{name: "below the store dir", allow: []string{allowed}, store: innerStore, path: filepath.Join(innerStore, "x"), code: CodeVolHostNotAllowed, notCreated: filepath.Join(innerStore, "x")},
		{name: "above the store dir", allow: []string{allowed}, store: innerStore, path: allowed, code: CodeVolHostNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) {
				c.Storage.AllowedHostPaths = tt.allow
				c.Store.Dir = storeDir
				if tt.store != "" {
					c.Store.Dir = tt.store
				}
			})
			mnt, err := e.m.d.checkHostPath(context.Background(), "v", tt.path)
			got, prefix := mnt.Source, mnt.Beneath
			if tt.code != "" {
				wantCode(t, err, KindInvalid, tt.code)
			} else {
				if err != nil {
					t.Fatalf("checkHostPath(%q): %v", tt.path, err)
				}
				if got != tt.want || prefix != allowed {
					t.Errorf("checkHostPath(%q) = %q below %q, want %q below %q", tt.path, got, prefix, tt.want, allowed)
				}
			}
			if tt.notCreated != "" {
				if _, err := os.Lstat(tt.notCreated); !os.IsNotExist(err) {
					t.Errorf("%s exists after a refused check (%v)", tt.notCreated, err)
				}
			}
		})
	}
}

// An engine that keeps its data or socket somewhere else is protected by
// where it says it keeps them, not only by Docker's default paths.
func TestCheckHostPathEnginePaths(t *testing.T) {
	dir := t.TempDir()
	data, sock := filepath.Join(dir, "docker-data"), filepath.Join(dir, "run", "engine.sock")
	e := newEnv(t, func(c *config.Config) { c.Storage.AllowedHostPaths = []string{dir} })
	e.rt.SetEnginePaths(data, sock)
	ctx := context.Background()
	for _, p := range []string{data, filepath.Join(data, "volumes"), sock, filepath.Join(dir, "run"), dir} {
		_, err := e.m.d.checkHostPath(ctx, "v", p)
		wantCode(t, err, KindInvalid, CodeVolHostNotAllowed)
	}
	if _, err := e.m.d.checkHostPath(ctx, "v", filepath.Join(dir, "work")); err != nil {
		t.Errorf("a path beside the engine's: %v", err)
	}

	// Until the engine says where it keeps them, no host path is mounted.
	e2 := newEnv(t, func(c *config.Config) { c.Storage.AllowedHostPaths = []string{dir} })
	e2.rt.FailPing(runtime.ErrUnavailable)
	if _, err := e2.m.d.checkHostPath(ctx, "v", filepath.Join(dir, "work")); err == nil {
		t.Error("a host path was accepted while the engine could not say where it keeps its data")
	}
}

func TestPrepareVolumes(t *testing.T) {
	root := t.TempDir()
	no := false
	tests := []struct {
		name        string
		vols        []Volume
		existing    map[string]map[string]string // named volumes already present
		allowedVols []string
		code        string
		wantMounts  []runtime.Mount
		wantManaged []string
	}{
		{
			name: "host with subPath",
			vols: []Volume{{Name: "h", MountPath: "/data", SubPath: "sub", ReadOnly: true, Host: &HostPath{Path: root}}},
			wantMounts: []runtime.Mount{
				{Kind: runtime.MountHost, Source: filepath.Join(root, "sub"), Beneath: root, Target: "/data", ReadOnly: true},
			},
		},
		{
			name:        "new named volume deleted with the sandbox",
			vols:        []Volume{{Name: "p", MountPath: "/cache", PVC: &PVC{ClaimName: "cache", DeleteOnSandboxTermination: true}}},
			wantMounts:  []runtime.Mount{{Kind: runtime.MountVolume, Source: "cache", Target: "/cache"}},
			wantManaged: []string{"cache"},
		},
		{
			name:     "another instance's managed volume refused",
			vols:     []Volume{{Name: "p", MountPath: "/cache", PVC: &PVC{ClaimName: "theirs", DeleteOnSandboxTermination: true}}},
			existing: map[string]map[string]string{"theirs": {LabelVolumeManaged: "server", LabelInstance: "another-instance"}},
			code:     CodeVolPVCNotAllowed,
		},
		{
			name:        "another instance's managed volume allow-listed is never deleted",
			vols:        []Volume{{Name: "p", MountPath: "/cache", PVC: &PVC{ClaimName: "theirs", DeleteOnSandboxTermination: true}}},
			existing:    map[string]map[string]string{"theirs": {LabelVolumeManaged: "server", LabelInstance: "another-instance"}},
			allowedVols: []string{"theirs"},
			wantMounts:  []runtime.Mount{{Kind: runtime.MountVolume, Source: "theirs", Target: "/cache"}},
		},
		{
			name:        "this instance's managed volume is deleted with the sandbox",
			vols:        []Volume{{Name: "p", MountPath: "/cache", PVC: &PVC{ClaimName: "ours", DeleteOnSandboxTermination: true}}},
			existing:    map[string]map[string]string{"ours": {LabelVolumeManaged: "server", LabelInstance: "SELF"}},
			wantMounts:  []runtime.Mount{{Kind: runtime.MountVolume, Source: "ours", Target: "/cache"}},
			wantManaged: []string{"ours"},
		},
		{
			name:     "foreign volume refused",
			vols:     []Volume{{Name: "p", MountPath: "/cache", PVC: &PVC{ClaimName: "theirs"}}},
			existing: map[string]map[string]string{"theirs": {}},
			code:     CodeVolPVCNotAllowed,
		},
		{
			name:        "foreign volume allow-listed is never deleted",
			vols:        []Volume{{Name: "p", MountPath: "/cache", PVC: &PVC{ClaimName: "theirs", DeleteOnSandboxTermination: true}}},
			existing:    map[string]map[string]string{"theirs": {}},
			allowedVols: []string{"theirs"},
			wantMounts:  []runtime.Mount{{Kind: runtime.MountVolume, Source: "theirs", Target: "/cache"}},
		},
		{
			name: "missing volume without create",
			vols: []Volume{{Name: "p", MountPath: "/cache", PVC: &PVC{ClaimName: "absent", CreateIfNotExists: &no}}},
			code: CodeVolPVCNotFound,
		},
		{
			name: "shape checked before anything is created",
			vols: []Volume{
				{Name: "p", MountPath: "/cache", PVC: &PVC{ClaimName: "early"}},
				{Name: "p", MountPath: "/other", PVC: &PVC{ClaimName: "other"}},
			},
			code: CodeVolDuplicateName,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) {
				c.Storage.AllowedHostPaths = []string{root}
				c.Storage.AllowedVolumes = tt.allowedVols
			})
			for name, labels := range tt.existing {
				if labels[LabelInstance] == "SELF" {
					labels[LabelInstance] = e.m.d.instance
				}
				if _, _, err := e.rt.EnsureVolume(context.Background(), name, true, labels); err != nil {
					t.Fatal(err)
				}
			}
			pv, err := e.m.d.prepareVolumes(context.Background(), tt.vols)
			if tt.code != "" {
				wantCode(t, err, KindInvalid, tt.code)
				if e.rt.HasVolume("early") {
					t.Error("a volume was created although the request was invalid")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mounts, managed := pv.mounts, pv.managed
			if !equalMounts(mounts, tt.wantMounts) {
				t.Errorf("mounts = %+v, want %+v", mounts, tt.wantMounts)
			}
			if len(managed) != len(tt.wantManaged) || (len(managed) > 0 && managed[0] != tt.wantManaged[0]) {
				t.Errorf("managed = %v, want %v", managed, tt.wantManaged)
			}
		})
	}
}

func equalMounts(a, b []runtime.Mount) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A mount the runtime refuses to make as checked is the request's fault:
// a 400 with the volume code, and nothing left behind.
func TestCreateMountRefused(t *testing.T) {
	for _, tt := range []struct {
		err  *runtime.MountError
		code string
	}{
		{&runtime.MountError{Target: "/data", Reason: "swapped"}, CodeVolHostNotAllowed},
		{&runtime.MountError{Target: "/data", SubPath: true, Reason: "old engine"}, CodeVolInvalidSubPath},
	} {
		e := newEnv(t, nil)
		e.rt.FailCreate(fmt.Errorf("create: %w", tt.err))
		_, err := e.m.Sandboxes.Create(context.Background(), validRequest())
		wantCode(t, err, KindInvalid, tt.code)
		if !strings.Contains(err.Error(), tt.err.Reason) {
			t.Errorf("error %q does not say why (%s)", err, tt.err.Reason)
		}
		if recs, _ := e.store.Sandboxes(); len(recs) != 0 {
			t.Errorf("refused create left records: %+v", recs)
		}
	}
}
