//go:build e2e

package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// imageBusyboxARM64 is sandboxd-test/busybox for linux/arm64 (images/busybox-arm64).
const imageBusyboxARM64 = "sandboxd-test/busybox-arm64:latest"

// releaseVersion is stamped into the release build the test makes.
const releaseVersion = "v0.0.0-e2e"

// arm64Emulation says why this machine cannot run linux/arm64 programs in
// containers, or "" if it can: that takes a binfmt_misc handler for arm64
// ELF files registered with the F flag (the interpreter opened at
// registration, so it works in any mount namespace).
func arm64Emulation() string {
	const handler = "/proc/sys/fs/binfmt_misc/qemu-aarch64"
	data, err := os.ReadFile(handler)
	if err != nil {
		return "no binfmt_misc handler for arm64 (" + handler + "); install qemu-user-static and binfmt-support, as e2e/setup.sh does"
	}
	lines := strings.Split(string(data), "\n")
	if lines[0] != "enabled" {
		return handler + " is disabled"
	}
	for _, l := range lines {
		if flags, ok := strings.CutPrefix(l, "flags: "); ok && strings.Contains(flags, "F") {
			return ""
		}
	}
	return handler + " lacks the F flag, so its interpreter is not found inside containers"
}

// TestPlatformArm64Sandbox runs an arm64 sandbox under emulation next to
// an amd64 one: a plain build refuses it and says which agent is missing;
// a release build gives each sandbox the agent of its image's platform,
// through which commands, files and a PTY work.
func TestPlatformArm64Sandbox(t *testing.T) {
	if why := arm64Emulation(); why != "" {
		t.Skip("this machine cannot emulate arm64: " + why)
	}
	if !imageExists(t, imageBusyboxARM64) {
		t.Fatalf("%s is missing: run images/build.sh busybox-arm64", imageBusyboxARM64)
	}
	armRequest := busyboxWith(map[string]any{"image": map[string]any{"uri": imageBusyboxARM64}})

	t.Run("plain build names the missing agent", func(t *testing.T) {
		s := startServer(t)
		msg := doError(t, s, http.MethodPost, "/v1/sandboxes", armRequest, http.StatusInternalServerError, "")
		for _, want := range []string{"linux/arm64", "carries agents for linux/amd64 only", "release build",
			`[runtime] agent_binaries = { "linux/arm64" = `, "GOARCH=arm64"} {
			if !strings.Contains(msg, want) {
				t.Errorf("create of an arm64 sandbox: message %q does not contain %q", msg, want)
			}
		}
	})

	t.Run("release build", func(t *testing.T) {
		release := buildRelease(t)
		if out, err := exec.Command(release, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), "sandboxd "+releaseVersion+" (commit ") {
			t.Errorf("sandboxd version: %q, %v", out, err)
		}
		var volumes []string
		t.Cleanup(func() { removeVolumes(t, volumes) }) // after the server's clean-up
		s := startServerWith(t, release)
		var health map[string]string
		s.doJSON(t, http.MethodGet, "/health", nil, http.StatusOK, &health)
		if health["version"] != releaseVersion || health["commit"] == "" {
			t.Errorf("/health = %v, want version %s and a commit", health, releaseVersion)
		}

		amd := checkPlatformBox(t, s, newExecdBox(t, s, busyboxRequest()), "amd64")
		arm := checkPlatformBox(t, s, newExecdBox(t, s, armRequest), "arm64")
		volumes = append(volumes, amd, arm)
		if amd == arm {
			t.Errorf("both sandboxes use agent volume %s", amd)
		}
	})

	// The way the plain build's error points to: an agent built for arm64
	// and named in the config.
	t.Run("plain build with agent_binaries", func(t *testing.T) {
		agent := filepath.Join(t.TempDir(), "sandboxd-linux-arm64")
		build := exec.Command("go", "build", "-o", agent, "./cmd/sandboxd")
		build.Dir = repoRoot()
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build the arm64 agent: %v\n%s", err, out)
		}
		var volumes []string
		t.Cleanup(func() { removeVolumes(t, volumes) })
		s := startServer(t, withTOML(fmt.Sprintf("[runtime]\nagent_binaries = { \"linux/arm64\" = %q }", agent)))
		volumes = append(volumes, checkPlatformBox(t, s, newExecdBox(t, s, armRequest), "arm64"))
	})
}

// platformFacts are what a sandbox of each platform shows.
var platformFacts = map[string]struct{ uname, elfMachine string }{
	// elfMachine: e_machine of an ELF file, bytes 18-19, little-endian.
	"amd64": {"x86_64", "3e 00"},
	"arm64": {"aarch64", "b7 00"},
}

// checkPlatformBox checks that a sandbox of an arch image runs commands,
// files and a PTY through an agent of that arch from that arch's agent
// volume, and returns the volume.
func checkPlatformBox(t *testing.T, s *Server, b *execdBox, arch string) string {
	t.Helper()
	var vol string
	t.Run(arch, func(t *testing.T) {
		facts := platformFacts[arch]
		if got := runCommand(t, s, b.ID, "uname -m"); got != facts.uname {
			t.Errorf("uname -m = %q, want %q", got, facts.uname)
		}
		// The agent that runs the commands is the binary in the agent
		// volume: it must be built for the image's platform.
		if got := strings.TrimSpace(runCommand(t, s, b.ID, "od -An -tx1 -j18 -N2 /opt/sandboxd/sandboxd")); got != facts.elfMachine {
			t.Errorf("ELF machine of the agent = %q, want %q", got, facts.elfMachine)
		}
		vol = agentVolume(t, b.ID)
		if !strings.HasPrefix(vol, "sandboxd-agent-linux-"+arch+"-") {
			t.Errorf("agent volume %s, want one for linux/%s", vol, arch)
		}
		content := "written through the " + arch + " agent\n"
		uploadFile(t, s, b.ID, "/tmp/platform.txt", content)
		if got := downloadFile(t, s, b.ID, "/tmp/platform.txt"); got != content {
			t.Errorf("download = %q, want %q", got, content)
		}
		if got := runCommand(t, s, b.ID, "cat /tmp/platform.txt"); got+"\n" != content {
			t.Errorf("cat = %q, want %q", got, content)
		}
		testPTY(t, b)
	})
	return vol
}

// buildRelease runs the release build for linux/amd64 and returns the
// sandboxd binary from its archive.
func buildRelease(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./cmd/release", "-platforms", "linux/amd64", "-version", releaseVersion, "-out", dir)
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release build: %v\n%s", err, out)
	}
	f, err := os.Open(filepath.Join(dir, "sandboxd-"+releaseVersion+"-linux-amd64.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("no sandboxd binary in the release archive: %v", err)
		}
		if filepath.Base(hdr.Name) != "sandboxd" {
			continue
		}
		bin := filepath.Join(dir, "sandboxd")
		out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		return bin
	}
}

// agentVolume returns the volume mounted at /opt/sandboxd in a sandbox.
func agentVolume(t *testing.T, sandboxID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	info, err := dockerClient(t).ContainerInspect(ctx, "sandbox-"+sandboxID)
	if err != nil {
		t.Fatalf("inspect sandbox %s: %v", sandboxID, err)
	}
	for _, m := range info.Mounts {
		if m.Destination == "/opt/sandboxd" {
			return m.Name
		}
	}
	t.Fatalf("sandbox %s has no agent volume: %+v", sandboxID, info.Mounts)
	return ""
}

// removeVolumes removes the agent volumes a test's own build filled.
func removeVolumes(t *testing.T, names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	for _, n := range names {
		if n == "" {
			continue // a check failed before it found the volume
		}
		if err := dockerClient(t).VolumeRemove(ctx, n, false); err != nil {
			t.Logf("clean-up: remove volume %s: %v", n, err)
		}
	}
}
