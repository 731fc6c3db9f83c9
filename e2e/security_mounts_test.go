//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"
)

// secVolumeRequest is a busybox create request with one volume.
func secVolumeRequest(vol map[string]any) map[string]any {
	return busyboxWith(map[string]any{"volumes": []any{vol}})
}

// TestSecurityMounts asks for mounts that would hand the sandbox the host
// (the Docker socket, /, /etc, a symlink out of the allowed prefix, '..')
// and checks each 400 VOLUME::* refusal, that no container was made and
// that no directory appeared on the host. A mount under the allowed prefix
// works, so the refusals are about the paths.
func TestSecurityMounts(t *testing.T) {
	root := t.TempDir()
	allowed := filepath.Join(root, "allowed")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{allowed, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	escape := filepath.Join(allowed, "escape")
	if err := os.Symlink(outside, escape); err != nil {
		t.Fatal(err)
	}
	etcProbe := "/etc/sandboxd-e2e-" + randomHex(t, 6)
	s := startServer(t, withTOML(fmt.Sprintf("[storage]\nallowed_host_paths = [%q]\n", allowed)))

	host := func(p string) map[string]any {
		return map[string]any{"name": "v", "mountPath": "/mnt/v", "host": map[string]any{"path": p}}
	}
	tests := []struct {
		name       string
		vol        map[string]any
		code       string
		notCreated []string // paths that must not exist afterwards
	}{
		{name: "docker socket", vol: host("/var/run/docker.sock"), code: "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{name: "docker socket under /run", vol: host("/run/docker.sock"), code: "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{name: "directory of the docker socket", vol: host("/var/run"), code: "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{name: "root", vol: host("/"), code: "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{name: "etc", vol: host("/etc"), code: "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{name: "missing dir in etc", vol: host(etcProbe), code: "VOLUME::HOST_PATH_NOT_ALLOWED", notCreated: []string{etcProbe}},
		{name: "docker data root", vol: host("/var/lib/docker"), code: "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{name: "symlink out of the prefix", vol: host(escape), code: "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{name: "below a symlink out of the prefix", vol: host(filepath.Join(escape, "made")), code: "VOLUME::HOST_PATH_NOT_ALLOWED", notCreated: []string{filepath.Join(outside, "made")}},
		{
			name: "subPath through a symlink out of the prefix",
			vol:  map[string]any{"name": "v", "mountPath": "/mnt/v", "subPath": "escape/made2", "host": map[string]any{"path": allowed}},
			code: "VOLUME::HOST_PATH_NOT_ALLOWED", notCreated: []string{filepath.Join(outside, "made2")},
		},
		{name: "dotdot out of the prefix", vol: host(allowed + "/../outside/made3"), code: "VOLUME::INVALID_HOST_PATH", notCreated: []string{filepath.Join(outside, "made3")}},
		{name: "dotdot inside the prefix", vol: host(allowed + "/x/../made4"), code: "VOLUME::INVALID_HOST_PATH", notCreated: []string{filepath.Join(allowed, "x"), filepath.Join(allowed, "made4")}},
		{name: "relative path", vol: host("allowed/made5"), code: "VOLUME::INVALID_HOST_PATH"},
		{
			name: "subPath with dotdot",
			vol:  map[string]any{"name": "v", "mountPath": "/mnt/v", "subPath": "../outside/made6", "host": map[string]any{"path": allowed}},
			code: "VOLUME::INVALID_SUB_PATH", notCreated: []string{filepath.Join(outside, "made6")},
		},
		{
			name: "mountPath with dotdot",
			vol:  map[string]any{"name": "v", "mountPath": "/mnt/../proc/sys", "host": map[string]any{"path": filepath.Join(allowed, "made7")}},
			code: "VOLUME::INVALID_MOUNT_PATH", notCreated: []string{filepath.Join(allowed, "made7")},
		},
		{name: "sibling of the prefix", vol: host(allowed + "2"), code: "VOLUME::HOST_PATH_NOT_ALLOWED", notCreated: []string{allowed + "2"}},
		{name: "state directory", vol: host(filepath.Join(s.Dir, "store")), code: "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{
			name: "existing named volume not made by sandboxd",
			vol:  map[string]any{"name": "v", "mountPath": "/mnt/v", "pvc": map[string]any{"claimName": secForeignVolume(t, nil), "createIfNotExists": false}},
			code: "VOLUME::PVC_NOT_ALLOWED",
		},
		{
			name: "named volume managed by another instance",
			vol:  map[string]any{"name": "v", "mountPath": "/mnt/v", "pvc": map[string]any{"claimName": secOtherInstanceVolume(t), "deleteOnSandboxTermination": true}},
			code: "VOLUME::PVC_NOT_ALLOWED",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, prefix := range []string{"", "/v1"} {
				status, hdr, body := s.do(t, http.MethodPost, prefix+"/sandboxes", secVolumeRequest(tt.vol), nil)
				secWantError(t, "create with "+tt.name, status, hdr, body, http.StatusBadRequest, tt.code)
			}
			if n := secInstanceContainers(t, s); n != 0 {
				t.Errorf("a refused create left %d container(s)", n)
			}
			for _, p := range tt.notCreated {
				secAssertAbsent(t, tt.name, p)
			}
		})
	}
	// Nothing at all appeared outside the prefix.
	if entries, err := os.ReadDir(outside); err != nil || len(entries) != 0 {
		t.Errorf("the directory outside the prefix has %d entries after the refusals (%v)", len(entries), err)
	}
	if fi, err := os.Lstat("/var/run/docker.sock"); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("/var/run/docker.sock is no longer a socket: %v %v", fi, err)
	}

	// Control: a directory under the prefix is mounted and created there.
	inside := filepath.Join(allowed, "work")
	box := newExecdBox(t, s, secVolumeRequest(host(inside)))
	if _, code := box.secShell(t, "echo hi > /mnt/v/hello"); code != 0 {
		t.Fatalf("writing to the allowed mount failed with exit %d", code)
	}
	if data, err := os.ReadFile(filepath.Join(inside, "hello")); err != nil || string(data) != "hi\n" {
		t.Errorf("the allowed mount did not reach the host: %q %v", data, err)
	}
}

// TestSecurityMountsLegacyAllowAll is upstream's legacy allow-all
// (allowed_host_paths = ["/"]): the Docker socket, its directory, the
// Docker data root, / and sandboxd's state stay refused.
func TestSecurityMountsLegacyAllowAll(t *testing.T) {
	s := startServer(t, withTOML("[storage]\nallowed_host_paths = [\"/\"]\n"))
	for _, p := range []string{"/var/run/docker.sock", "/run/docker.sock", "/var/run", "/run", "/var/lib/docker", "/var/lib", "/", "/proc/1", "/sys", "/dev", filepath.Join(s.Dir, "store")} {
		vol := map[string]any{"name": "v", "mountPath": "/mnt/v", "host": map[string]any{"path": p}}
		status, hdr, body := s.do(t, http.MethodPost, "/v1/sandboxes", secVolumeRequest(vol), nil)
		secWantError(t, "mount "+p, status, hdr, body, http.StatusBadRequest, "VOLUME::HOST_PATH_NOT_ALLOWED")
	}
	if n := secInstanceContainers(t, s); n != 0 {
		t.Errorf("refused creates left %d container(s)", n)
	}
}

// secForeignVolume makes a named volume with labels that this sandboxd
// did not create and removes it when the test ends.
func secForeignVolume(t *testing.T, labels map[string]string) string {
	t.Helper()
	name := "sandboxd-e2e-foreign-" + randomHex(t, 4)
	c := dockerClient(t)
	if _, err := c.VolumeCreate(t.Context(), volume.CreateOptions{Name: name, Labels: labels}); err != nil {
		t.Fatalf("create volume %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
		defer cancel()
		if err := c.VolumeRemove(ctx, name, true); err != nil {
			t.Errorf("remove volume %s: %v", name, err)
		}
	})
	return name
}

// swapperSource is a program that swaps two paths with
// renameat2(RENAME_EXCHANGE) in a loop, as hostile code in a sandbox can
// do in a host directory it has mounted read-write.
const swapperSource = `package main

import (
	"os"
	"syscall"
	"unsafe"
)

func main() {
	a, _ := syscall.BytePtrFromString(os.Args[1])
	b, _ := syscall.BytePtrFromString(os.Args[2])
	const atFDCWD, renameExchange = -100, 2
	for {
		fd := atFDCWD
		syscall.Syscall6(SYSNO, uintptr(fd), uintptr(unsafe.Pointer(a)), uintptr(fd), uintptr(unsafe.Pointer(b)), renameExchange, 0)
	}
}
`

// buildSwapper compiles swapperSource for this machine into dir.
func buildSwapper(t *testing.T, dir string) string {
	t.Helper()
	sysno := map[string]string{"amd64": "316", "arm64": "276"}[goruntime.GOARCH]
	if sysno == "" {
		t.Skipf("no renameat2 syscall number for %s", goruntime.GOARCH)
	}
	src := filepath.Join(t.TempDir(), "swapper.go")
	if err := os.WriteFile(src, []byte(strings.Replace(swapperSource, "SYSNO", sysno, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "swapper")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the swapper: %v\n%s", err, b)
	}
	return out
}

// TestSecurityMountSwapRace is the host bind-mount race: sandbox A has
// work/ mounted read-write and swaps work/sub (a real directory) with
// work/link (a symlink to a directory outside the allowed prefix) in a
// loop, while sandboxes B mount work/sub read-only (until 10 were mounted,
// at most 300 tries), then missing directories below it. Whatever the
// timing, B sees either what it asked for or a refusal, never the
// directory outside the prefix (its marker file), and nothing is created
// there.
func TestSecurityMountSwapRace(t *testing.T) {
	root := t.TempDir()
	allowed, outside := filepath.Join(root, "allowed"), filepath.Join(root, "outside")
	work := filepath.Join(allowed, "work")
	sub, link := filepath.Join(work, "sub"), filepath.Join(work, "link")
	for _, d := range []string{outside, sub} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, content := range map[string]string{filepath.Join(outside, "outside-marker"): "foreign", filepath.Join(sub, "inside-marker"): "own"} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	buildSwapper(t, work)
	s := startServer(t, withTOML(fmt.Sprintf("[storage]\nallowed_host_paths = [%q]\n", allowed)))

	a := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"volumes": []any{
		map[string]any{"name": "w", "mountPath": "/mnt/w", "host": map[string]any{"path": work}},
	}}))
	// setsid: out of the command's process group, which ends with it.
	runCommand(t, s, a.ID, "setsid /mnt/w/swapper /mnt/w/sub /mnt/w/link </dev/null >/dev/null 2>&1 &")

	// race creates sandboxes B that mount pathFor(i) read-only and checks
	// what each sees. Most creates are refused at once (the check sees the
	// symlink), so it tries until enough were mounted, within a bound.
	race := func(what string, pathFor func(i int) string, check func(i int, seen string)) {
		const maxTries, wantMounted = 300, 10
		var tries, mounted, refused, swapped int
		for i := 0; i < maxTries && mounted < wantMounted; i++ {
			tries++
			if fi, err := os.Lstat(sub); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				swapped++
			}
			req := busyboxWith(map[string]any{"volumes": []any{
				map[string]any{"name": "s", "mountPath": "/mnt/s", "readOnly": true, "host": map[string]any{"path": pathFor(i)}},
			}})
			status, hdr, body := s.do(t, http.MethodPost, "/v1/sandboxes", req, nil)
			if status != http.StatusAccepted {
				secWantError(t, what+" during the swap", status, hdr, body, http.StatusBadRequest, "VOLUME::")
				refused++
				// Refusals come in bursts while the swapper is off the
				// CPU with work/sub swapped; let it run.
				time.Sleep(10 * time.Millisecond)
				continue
			}
			b := decodeJSON[lcSandbox](t, body)
			check(i, runCommand(t, s, b.ID, "ls -A /mnt/s"))
			mounted++
			wantEmpty(t, s, http.MethodDelete, sandboxPath(b.ID), http.StatusNoContent)
		}
		t.Logf("%s: %d tries, %d mounted, %d refused; work/sub was swapped at %d of the samples", what, tries, mounted, refused, swapped)
		if mounted == 0 || swapped == 0 {
			t.Errorf("%s: %d mounted and %d samples swapped in %d tries: the race was not run", what, mounted, swapped, tries)
		}
	}
	race("mount work/sub", func(int) string { return sub }, func(i int, seen string) {
		if seen != "inside-marker" {
			t.Errorf("try %d: the sandbox mounted %q, not work/sub: it sees %q", i, sub, seen)
		}
	})
	// A missing directory is created where it was checked, never through
	// the symlink (the MkdirAll of a planted path).
	race("create below work/sub", func(i int) string { return filepath.Join(sub, fmt.Sprintf("made-%d", i)) }, func(i int, seen string) {
		if seen != "" {
			t.Errorf("try %d: the new directory below work/sub shows %q", i, seen)
		}
	})
	if entries, err := os.ReadDir(outside); err != nil || len(entries) != 1 {
		t.Errorf("the directory outside the prefix has %d entries, want only the marker (%v): %v", len(entries), err, entries)
	}
	if pids := runCommand(t, s, a.ID, "pidof swapper || echo none"); pids == "none" {
		t.Errorf("the swapper died during the race")
	}
	// Pins go with their sandbox: only A's is left.
	info, err := os.ReadFile("/proc/self/mountinfo")
	if n := strings.Count(string(info), s.Dir); err != nil || n != 1 {
		t.Errorf("%d mounts under the server's state dir with one sandbox left (%v):\n%s", n, err, info)
	}
}

// releaseMountPins detaches the host mounts sandboxd pinned under dir (its
// state dir) for containers the harness removed behind its back, so that
// removing the temporary directory never descends into a pinned host
// directory.
func releaseMountPins(t testing.TB, dir string) {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("read mountinfo: %v", err)
		return
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			if err := syscall.Unmount(f[4], syscall.MNT_DETACH); err != nil {
				t.Errorf("detach the pin %s: %v", f[4], err)
			}
		}
	}
}

// secOtherInstanceVolume makes a named volume labelled as managed by
// another sandboxd instance on the same engine.
func secOtherInstanceVolume(t *testing.T) string {
	return secForeignVolume(t, map[string]string{"opensandbox.io/volume-managed-by": "server", labelInstance: "e2e-other-" + randomHex(t, 4)})
}

// TestSecurityMountsOtherInstanceVolume: another instance's managed
// volume, even allow-listed and asked to go with the sandbox, survives the
// sandbox (only this instance's volumes are deleted).
func TestSecurityMountsOtherInstanceVolume(t *testing.T) {
	theirs := secOtherInstanceVolume(t)
	s := startServer(t, withTOML(fmt.Sprintf("[storage]\nallowed_volumes = [%q]\n", theirs)))
	sb := createSandbox(t, s, "/v1/sandboxes", secVolumeRequest(map[string]any{
		"name": "v", "mountPath": "/mnt/v", "pvc": map[string]any{"claimName": theirs, "deleteOnSandboxTermination": true},
	}))
	wantEmpty(t, s, http.MethodDelete, sandboxPath(sb.ID), http.StatusNoContent)
	if !volumeExists(t, theirs) {
		t.Errorf("another instance's volume %s was deleted with this instance's sandbox", theirs)
	}
}

// TestSecurityMountsNested is the attack on nested allowed prefixes
// (allowed and allowed/shared, listed in both orders): sandbox A, with
// allowed mounted read-write, moves shared away and puts a symlink to a
// directory outside every prefix in its place. A later mount of shared, or
// of a directory below it, is refused or reaches shared's own directory,
// never the symlink's target, and nothing is created there. A sandboxd
// started after the swap refuses the configuration and names the symlink.
func TestSecurityMountsNested(t *testing.T) {
	for _, order := range []string{"outer first", "inner first"} {
		t.Run(order, func(t *testing.T) {
			root := t.TempDir()
			allowed, outside := filepath.Join(root, "allowed"), filepath.Join(root, "outside")
			shared := filepath.Join(allowed, "shared")
			for _, d := range []string{shared, filepath.Join(outside, "data")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for p, content := range map[string]string{filepath.Join(outside, "outside-marker"): "foreign", filepath.Join(outside, "data", "outside-marker"): "foreign", filepath.Join(shared, "inside-marker"): "own"} {
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			list := fmt.Sprintf("[%q, %q]", allowed, shared)
			if order == "inner first" {
				list = fmt.Sprintf("[%q, %q]", shared, allowed)
			}
			s := startServer(t, withTOML("[storage]\nallowed_host_paths = "+list+"\n"))

			a := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"volumes": []any{
				map[string]any{"name": "a", "mountPath": "/mnt/a", "host": map[string]any{"path": allowed}},
			}}))
			runCommand(t, s, a.ID, fmt.Sprintf("mv /mnt/a/shared /mnt/a/shared.old && ln -s %s /mnt/a/shared", outside))
			if fi, err := os.Lstat(shared); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the sandbox did not swap %s for a symlink: %v", shared, err)
			}

			for _, p := range []string{shared, filepath.Join(shared, "data"), filepath.Join(shared, "made")} {
				req := busyboxWith(map[string]any{"volumes": []any{
					map[string]any{"name": "s", "mountPath": "/mnt/s", "readOnly": true, "host": map[string]any{"path": p}},
				}})
				status, hdr, body := s.do(t, http.MethodPost, "/v1/sandboxes", req, nil)
				if status != http.StatusAccepted {
					secWantError(t, "mount "+p+" after the swap", status, hdr, body, http.StatusBadRequest, "VOLUME::")
					continue
				}
				b := decodeJSON[lcSandbox](t, body)
				if seen := runCommand(t, s, b.ID, "ls -A /mnt/s"); strings.Contains(seen, "outside-marker") {
					t.Errorf("a mount of %s reached the symlink's target: it sees %q", p, seen)
				}
				wantEmpty(t, s, http.MethodDelete, sandboxPath(b.ID), http.StatusNoContent)
			}
			if entries, err := os.ReadDir(outside); err != nil || len(entries) != 2 {
				t.Errorf("the directory outside the prefixes has %d entries, want its own 2 (%v): %v", len(entries), err, entries)
			}

			// Restarted after the swap, sandboxd refuses to start.
			s.Stop()
			ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
			defer cancel()
			out, err := exec.CommandContext(ctx, s.binary, "--config", s.ConfigPath).CombinedOutput()
			if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "symlink") {
				t.Errorf("sandboxd started after the swap: %v (%v)\n%s", err, ctx.Err(), out)
			}
		})
	}
}
