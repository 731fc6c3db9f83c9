package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// maxAgentSize bounds the agent binary: every sandbox maps it and every
// Kubernetes sandbox pod copies it (issue 25).
const maxAgentSize = 12 << 20

// TestAgentSize builds the agent as a release does (cmd/release: static,
// stripped) for each platform a release embeds, and checks its size.
func TestAgentSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent twice")
	}
	for _, arch := range []string{"amd64", "arm64"} {
		out := filepath.Join(t.TempDir(), "sandboxd-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build for linux/%s: %v\n%s", arch, err, b)
		}
		fi, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("linux/%s agent: %d bytes (%.1f MiB)", arch, fi.Size(), float64(fi.Size())/(1<<20))
		if fi.Size() > maxAgentSize {
			t.Errorf("linux/%s agent is %d bytes, over the %d bound", arch, fi.Size(), maxAgentSize)
		}
	}
}
