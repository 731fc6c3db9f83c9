//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// cliWait guards each CLI run against hangs; it is not a timing assertion.
const cliWait = 3 * time.Minute

// cliResult is one run of a client subcommand.
type cliResult struct {
	code           int
	stdout, stderr string
}

// cli runs `sandboxd ARGS...` as a client of s, finding the server and key
// in OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY; env adds variables.
func cli(t testing.TB, s *Server, stdin io.Reader, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cliWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, sandboxdBinary, args...)
	cmd.Env = append(cliEnv(s), env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("sandboxd %v: %v", args, err)
	}
	return cliResult{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

func cliEnv(s *Server) []string {
	return append(os.Environ(), "OPEN_SANDBOX_DOMAIN="+s.Addr, "OPEN_SANDBOX_API_KEY="+s.APIKey, "SANDBOX_CONFIG_PATH=/nonexistent/sandboxd.toml")
}

// cliOK runs a subcommand that must succeed and returns its stdout.
func cliOK(t testing.TB, s *Server, args ...string) string {
	t.Helper()
	r := cli(t, s, nil, nil, args...)
	if r.code != 0 {
		t.Fatalf("sandboxd %v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func TestCLI(t *testing.T) {
	s := startServer(t)
	id := strings.TrimSpace(cliOK(t, s, "create", "--metadata", "team=cli", "--metadata", "run=e2e", "--timeout", "20m",
		imageBusybox, "--", "sh", "-c", "echo hello-from-main; exec tail -f /dev/null"))
	if sb := getSandbox(t, s, "/v1", id); sb.Status.State != "Running" || sb.Metadata["team"] != "cli" || sb.Image.URI != imageBusybox {
		t.Fatalf("created sandbox: %+v", sb)
	}

	t.Run("ls", func(t *testing.T) {
		out := cliOK(t, s, "ls")
		if !strings.HasPrefix(out, "ID ") || !strings.Contains(out, id) || !strings.Contains(out, "Running") || !strings.Contains(out, "run=e2e,team=cli") {
			t.Errorf("ls:\n%s", out)
		}
		if out := cliOK(t, s, "ls", "--state", "Paused"); strings.Contains(out, id) {
			t.Errorf("ls --state Paused lists the running sandbox:\n%s", out)
		}
		if out := cliOK(t, s, "ls", "--metadata", "team=other"); strings.Contains(out, id) {
			t.Errorf("ls --metadata team=other lists it:\n%s", out)
		}
		if out := cliOK(t, s, "ls", "--json", "--metadata", "team=cli"); !strings.Contains(out, `"id": "`+id+`"`) {
			t.Errorf("ls --json:\n%s", out)
		}
	})

	t.Run("config file", func(t *testing.T) {
		// Without the environment, the server and key come from the config
		// file the server itself reads.
		cmd := exec.CommandContext(t.Context(), sandboxdBinary, "ls")
		cmd.Env = append(os.Environ(), "SANDBOX_CONFIG_PATH="+s.ConfigPath, "OPEN_SANDBOX_DOMAIN=", "OPEN_SANDBOX_API_KEY=")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), id) {
			t.Errorf("ls with only the config file: %v\n%s", err, out)
		}
	})

	t.Run("exec", func(t *testing.T) {
		r := cli(t, s, nil, nil, "exec", id, "--", "sh", "-c", `echo out1; echo err1 >&2; echo "$1"; exit 3`, "sh", "two words")
		if r.code != 3 || r.stdout != "out1\ntwo words\n" || r.stderr != "err1\n" {
			t.Errorf("exec: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if out := cliOK(t, s, "exec", id, "--", "echo a b c | wc -w"); strings.TrimSpace(out) != "3" {
			t.Errorf("exec of a command line: %q", out)
		}
		if out := cliOK(t, s, "exec", "--cwd", "/etc", id, "--", "pwd"); out != "/etc\n" {
			t.Errorf("exec --cwd: %q", out)
		}
		if r := cli(t, s, nil, nil, "exec", "no-such-sandbox", "--", "true"); r.code != 1 || !strings.Contains(r.stderr, "NOT_FOUND") {
			t.Errorf("exec in a missing sandbox: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("exec streams and Ctrl-C interrupts", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), cliWait)
		defer cancel()
		cmd := exec.CommandContext(ctx, sandboxdBinary, "exec", id, "--", "echo started; sleep 600; echo not-reached")
		cmd.Env = cliEnv(s)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(stdout)
		// The first line arrives while the command still runs.
		line, err := br.ReadString('\n')
		if err != nil || line != "started\n" {
			t.Fatalf("first line %q, %v", line, err)
		}
		waitUntil(t, stateWait, "sleep to run in the sandbox", func() bool {
			return strings.Contains(cliOK(t, s, "exec", id, "--", "ps -o comm"), "sleep")
		})
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(br)
		err = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code == 0 || code == -1 || strings.Contains(string(rest), "not-reached") {
			t.Errorf("after Ctrl-C: exit %d (%v), rest %q", code, err, rest)
		}
		waitUntil(t, stateWait, "the interrupted sleep to be gone", func() bool {
			return !strings.Contains(cliOK(t, s, "exec", id, "--", "ps -o comm"), "sleep")
		})
	})

	t.Run("cp", func(t *testing.T) {
		dir := t.TempDir()
		local := filepath.Join(dir, "script.sh")
		content := "#!/bin/sh\necho copied-in\n" + strings.Repeat("x", 3<<20) + "\n" // over the 1 MiB spool threshold
		if err := os.WriteFile(local, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		cliOK(t, s, "cp", local, id+":/tmp/")
		if out := cliOK(t, s, "exec", id, "--", "ls -l /tmp/script.sh | cut -c1-10; head -2 /tmp/script.sh | tail -1"); out != "-rwxr-xr-x\necho copied-in\n" {
			t.Errorf("uploaded file: %q", out)
		}
		back := filepath.Join(dir, "back.sh")
		cliOK(t, s, "cp", id+":/tmp/script.sh", back)
		if got, err := os.ReadFile(back); err != nil || string(got) != content {
			t.Errorf("downloaded file differs (%d bytes, %v)", len(got), err)
		}
		cliOK(t, s, "cp", id+":/tmp/script.sh", dir) // into a directory
		if got, err := os.ReadFile(filepath.Join(dir, "script.sh")); err != nil || string(got) != content {
			t.Errorf("download into a directory: %d bytes, %v", len(got), err)
		}
		if r := cli(t, s, strings.NewReader("from stdin\n"), nil, "cp", "-", id+":/tmp/in.txt"); r.code != 0 {
			t.Fatalf("cp from stdin: %+v", r)
		}
		if out := cliOK(t, s, "cp", id+":/tmp/in.txt", "-"); out != "from stdin\n" {
			t.Errorf("cp to stdout: %q", out)
		}
		if r := cli(t, s, nil, nil, "cp", id+":/tmp/missing", filepath.Join(dir, "x")); r.code != 1 || r.stderr == "" {
			t.Errorf("cp of a missing file: %+v", r)
		}
		if r := cli(t, s, nil, nil, "cp", "a", "b"); r.code != 2 {
			t.Errorf("cp without a sandbox side: %+v", r)
		}
	})

	t.Run("logs", func(t *testing.T) {
		if out := cliOK(t, s, "logs", "--tail", "10", id); !strings.Contains(out, "hello-from-main") {
			t.Errorf("logs: %q", out)
		}
	})

	t.Run("renew pause resume", func(t *testing.T) {
		before := time.Now()
		cliOK(t, s, "renew", id, "45m")
		exp := parseUTC(t, "expiresAt", getSandbox(t, s, "/v1", id).ExpiresAt)
		if exp.Before(before.Add(44*time.Minute)) || exp.After(time.Now().Add(46*time.Minute)) {
			t.Errorf("after renew 45m: expiresAt %s", exp)
		}
		cliOK(t, s, "pause", id)
		waitState(t, s, id, "Paused")
		if out := cliOK(t, s, "ls", "--state", "Paused"); !strings.Contains(out, id) {
			t.Errorf("ls --state Paused:\n%s", out)
		}
		cliOK(t, s, "resume", id)
		waitState(t, s, id, "Running")
		if r := cli(t, s, nil, nil, "renew", id, "soon"); r.code != 2 {
			t.Errorf("renew with a bad duration: %+v", r)
		}
	})

	t.Run("wrong key", func(t *testing.T) {
		r := cli(t, s, nil, []string{"OPEN_SANDBOX_API_KEY=wrong"}, "kill", id)
		if r.code != 1 || !strings.Contains(r.stderr, "INVALID_API_KEY") {
			t.Errorf("kill with a wrong key: %+v", r)
		}
		getSandbox(t, s, "/v1", id) // still there
	})

	t.Run("kill", func(t *testing.T) {
		if out := cliOK(t, s, "kill", id); out != id+"\n" {
			t.Errorf("kill printed %q", out)
		}
		assertGone(t, s, id)
		if r := cli(t, s, nil, nil, "kill", id); r.code != 1 {
			t.Errorf("kill of a killed sandbox: %+v", r)
		}
	})
}

// TestCLIShell runs `sandboxd shell` under a real pseudo-terminal: raw mode,
// the size and its changes, Ctrl-C reaching the remote foreground process,
// the shell's exit code, and the local terminal restored afterwards.
func TestCLIShell(t *testing.T) {
	s := startServer(t)
	id := strings.TrimSpace(cliOK(t, s, "create", imageBusybox))

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 31, Cols: 97}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), cliWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, sandboxdBinary, "shell", "--cwd", "/tmp", id)
	cmd.Env = cliEnv(s)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var screen strings.Builder
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	seen := func(what string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(screen.String(), what)
		}
	}
	// Each command prints something its echoed input does not contain.
	typeLine := func(line string) {
		t.Helper()
		if _, err := ptmx.WriteString(line); err != nil {
			t.Fatal(err)
		}
	}
	typeLine("echo \"size-$(stty size | tr ' ' x)-$((6*7))-$(pwd)\"\r")
	waitUntil(t, stateWait, "the remote terminal's size", seen("size-31x97-42-/tmp"))

	// Raw mode: the local terminal neither echoes nor edits; the remote one does.
	during, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if during.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
		t.Errorf("local terminal not in raw mode: lflag %#x", during.Lflag)
	}

	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 44, Cols: 123}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, stateWait, "the new size to reach the sandbox", func() bool {
		typeLine("echo \"resized-$(stty size | tr ' ' x)\"\r")
		time.Sleep(time.Second) // pace the retries; the check is the output
		return seen("resized-44x123")()
	})

	typeLine("sleep 600; echo \"after-$((1+1))\"\r")
	waitUntil(t, stateWait, "sleep to run", func() bool {
		return strings.Contains(cliOK(t, s, "exec", id, "--", "ps -o comm"), "sleep")
	})
	typeLine("\x03") // Ctrl-C, as typed
	waitUntil(t, stateWait, "sleep to be interrupted", func() bool {
		return !strings.Contains(cliOK(t, s, "exec", id, "--", "ps -o comm"), "sleep")
	})
	if seen("after-2")() {
		t.Errorf("Ctrl-C did not interrupt the whole command line:\n%s", screen.String())
	}
	typeLine("echo \"alive-$((2+3))\"\r")
	waitUntil(t, stateWait, "the shell after Ctrl-C", seen("alive-5"))

	typeLine("exit 7\r")
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Errorf("shell exit code %d (%v), want the remote shell's 7\n%s", code, err, screen.String())
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("terminal not restored: lflag %#x → %#x", before.Lflag, after.Lflag)
	}
}
