//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxAgentBytes is the bound on the agent inside every sandbox (issue: a
// small agent, at most 12 MiB, in what the README's first command builds).
const maxAgentBytes = 12 << 20

// TestReadmeRunCommand builds what the README's first command builds and
// checks that it is a server and a small agent beside it, which sandboxes
// then run: the command a newcomer copies gives them the small agent.
func TestReadmeRunCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "## The two commands")
	if !ok {
		t.Fatal("README.md has no \"## The two commands\" section")
	}
	_, block, ok := strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatal("no sh block in the two commands")
	}
	run, _, _ := strings.Cut(block, "\n")
	build, _, _ := strings.Cut(run, " && ")
	if !strings.Contains(build, "go build") || !strings.Contains(build, " -o . ") {
		t.Fatalf("the README's first command does not start with a go build into the current directory: %q", run)
	}
	// The same build, into a directory of the test's own rather than the
	// checkout.
	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", strings.Replace(build, " -o . ", " -o "+dir+"/ ", 1))
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	fi, err := os.Stat(filepath.Join(dir, "sandboxd-agent"))
	if err != nil {
		t.Fatalf("the README's command builds no agent: %v", err)
	}
	t.Logf("agent built by the README's command: %.1f MiB", float64(fi.Size())/(1<<20))
	if fi.Size() > maxAgentBytes {
		t.Errorf("the agent is %d bytes, over %d", fi.Size(), maxAgentBytes)
	}

	s := startServerWith(t, filepath.Join(dir, "sandboxd"))
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	if out := runCommand(t, s, sb.ID, "echo small"); out != "small" {
		t.Fatalf("command output %q", out)
	}
	if log, _ := os.ReadFile(s.LogPath); strings.Contains(string(log), "the agent in sandboxes is this sandboxd binary") {
		t.Fatalf("the server built by the README's command runs itself as the agent:\n%s", s.logTail())
	}
}
