//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// directWait bounds waits in these tests; it only stops a hung test.
const directWait = 2 * time.Minute

// execCreates returns the recorded exec creates on container cid (by id or
// by name).
func (r *dockerRecorder) execCreates(cid, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.paths {
		if strings.HasPrefix(p, "POST ") && (strings.HasSuffix(p, "/containers/"+cid+"/exec") || strings.HasSuffix(p, "/containers/"+name+"/exec")) {
			n++
		}
	}
	return n
}

// agentProcesses counts the agent's bridges and daemons in the sandbox.
func agentProcesses(t *testing.T, b *execdBox) (bridges, daemons int) {
	t.Helper()
	out := b.shell(t, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done`)
	for _, line := range strings.Split(out, "\n") {
		switch strings.TrimSpace(line) {
		case "/opt/sandboxd/sandboxd agent":
			bridges++
		case "/opt/sandboxd/sandboxd agent --daemon":
			daemons++
		}
	}
	return bridges, daemons
}

// directFlows runs every kind of execd traffic once: commands, files both
// ways, a background command's status and the PTY.
func directFlows(t *testing.T, b *execdBox) {
	t.Helper()
	if got := b.shell(t, "echo hello; id -u"); !strings.HasPrefix(got, "hello\n") {
		t.Errorf("command: %q", got)
	}
	if status, body := b.upload(t, "/tmp/direct/f.bin", 0, newPattern(1<<20, 5), true); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, _, n, sum := b.downloadSum(t, "/tmp/direct/f.bin"); status != http.StatusOK || n != 1<<20 || sum != patternSum(1<<20, 5) {
		t.Errorf("download: %d, %d bytes, sum %s", status, n, sum)
	}
	testPTY(t, b)
}

// TestDirectAgent: where sandboxd is root on the engine's host (as in this
// suite), it reaches the agent daemon without dockerd: after the exec that
// starts the daemon, no request of any kind creates an exec, the sandbox
// holds no bridge, and a daemon killed from inside comes back the same way.
func TestDirectAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the direct path needs sandboxd to be root")
	}
	s, rec := filesServer(t)
	b := newExecdBox(t, s, busyboxRequest())
	cid := sandboxContainer(t, b.ID).ID
	name := "sandbox-" + b.ID
	b.shell(t, "true")
	started := rec.execCreates(cid, name)
	if started > 1 {
		t.Errorf("%d exec creates to start the agent, want at most 1", started)
	}
	directFlows(t, b)
	if bridges, daemons := agentProcesses(t, b); bridges != 0 || daemons != 1 {
		t.Errorf("%d bridges and %d daemons in the sandbox, want 0 and 1", bridges, daemons)
	}
	if n := rec.execCreates(cid, name); n != started {
		t.Errorf("%d exec creates during the requests, want none", n-started)
	}

	// Killed from inside, the daemon is started again by one exec, and
	// reached directly again.
	b.run(t, map[string]any{"command": "sleep 1; kill -9 $(pidof sandboxd)", "background": true})
	waitUntil(t, directWait, "the agent to be started again", func() bool {
		status, _, _ := b.do(t, http.MethodGet, "/ping", nil, nil)
		return status == http.StatusOK && rec.execCreates(cid, name) > started
	})
	restarted := rec.execCreates(cid, name)
	if restarted != started+1 {
		t.Errorf("%d exec creates to restart the agent, want 1", restarted-started)
	}
	directFlows(t, b)
	if bridges, _ := agentProcesses(t, b); bridges != 0 {
		t.Errorf("%d bridges after the restart, want 0", bridges)
	}
	if n := rec.execCreates(cid, name); n != restarted {
		t.Errorf("%d exec creates after the restart, want none", n-restarted)
	}
}

// TestDirectAgentForcedExec: agent_transport = "exec" keeps the exec
// stream (the fallback everywhere the direct path is not possible), and
// every flow works over it.
func TestDirectAgentForcedExec(t *testing.T) {
	rec := startDockerRecorder(t)
	s := startServer(t, withTOML(fmt.Sprintf("[docker]\nhost = %q\nagent_transport = \"exec\"\n", "unix://"+rec.Sock)))
	b := newExecdBox(t, s, busyboxRequest())
	directFlows(t, b)
	if bridges, daemons := agentProcesses(t, b); bridges != 1 || daemons != 1 {
		t.Errorf("%d bridges and %d daemons in the sandbox, want 1 and 1", bridges, daemons)
	}
}

// probeSource connects to the agent daemon's abstract socket and prints
// what the daemon says first: its hello if it admits the connection,
// nothing if it refuses it.
const probeSource = `package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func main() {
	c, err := net.Dial("unix", "@sandboxd-agent-v1")
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(2)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	b, _ := io.ReadAll(io.LimitReader(c, 18))
	fmt.Printf("%q\n", b)
}
`

// TestDirectAgentPeerCheck: the daemon admits sandboxd's direct
// connection (root, outside the sandbox's pid namespace) even when it runs
// as another user, but a process inside the sandbox is judged as before:
// root in a sandbox whose agent runs as 1000, and nobody, are refused; the
// agent's own user is admitted (so the probe can tell the two apart).
func TestDirectAgentPeerCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the direct path needs sandboxd to be root")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(probeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(dir, "probe")
	build := exec.Command("go", "build", "-o", probe, "main.go")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	s, rec := filesServer(t)
	b := newExecdBox(t, s, busyboxWith(map[string]any{"extensions": map[string]string{"sandboxd.io/user": "1000:1000"}}))
	f, err := os.Open(probe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if status, body := b.upload(t, "/tmp/probe", 755, f, false); status != http.StatusOK {
		t.Fatalf("upload the probe: %d %s", status, body)
	}
	// The upload went over the direct path to a daemon of uid 1000.
	cid := sandboxContainer(t, b.ID).ID
	started := rec.execCreates(cid, "sandbox-"+b.ID)
	if got := b.shell(t, "id -u; /tmp/probe"); got != "1000\n\"sandboxd-agent-v1\\n\"" {
		t.Errorf("the agent's own user: %q, want uid 1000 and the hello", got)
	}
	if n := rec.execCreates(cid, "sandbox-"+b.ID); n != started {
		t.Errorf("%d exec creates for a command, want none (direct path)", n-started)
	}
	for _, user := range []string{"0", "65534"} {
		if got := dockerExec(t, cid, user, "/tmp/probe"); got != `""` {
			t.Errorf("uid %s inside the sandbox: %q, want a refusal", user, got)
		}
	}
}

// dockerExec runs cmd as user in container cid with the real engine (not
// through sandboxd) and returns its trimmed stdout.
func dockerExec(t *testing.T, cid, user string, cmd ...string) string {
	t.Helper()
	cli := dockerClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), directWait)
	defer cancel()
	ex, err := cli.ContainerExecCreate(ctx, cid, container.ExecOptions{Cmd: cmd, User: user, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	hr, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Close()
	var out, errOut strings.Builder
	if _, err := stdcopy.StdCopy(&out, &errOut, hr.Reader); err != nil {
		t.Fatalf("exec %v as %s: %v", cmd, user, err)
	}
	if errOut.Len() > 0 {
		t.Logf("exec %v as %s: stderr %s", cmd, user, errOut.String())
	}
	return strings.TrimSpace(out.String())
}
