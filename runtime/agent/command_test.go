//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCommandOutput(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	big := strings.Repeat("x", 4<<20)
	tests := []struct {
		name       string
		command    string
		wantStdout []string
		wantStderr []string
	}{
		{"echo", "echo hi", []string{"hi"}, nil},
		{"stderr", "echo out; echo err >&2", []string{"out"}, []string{"err"}},
		{"terminators", `printf 'a\r\nb\rc\n\nd\r\n\r\ne'`, []string{"a", "b", "c", "\n", "d", "\n", "e"}, nil},
		{"NUL", `printf 'a\0b\n'`, []string{"a\x00b"}, nil},
		{"unicode separators", `printf 'x\xc2\x85y\xe2\x80\xa8z\n'`, []string{"x\u0085y\u2028z"}, nil},
		{"invalid UTF-8", `printf 'a\xffb\n'`, []string{"a\ufffdb"}, nil},
		{"no output", "true", nil, nil},
		{"4 MiB line", `head -c 4194304 /dev/zero | tr '\0' x; echo`, []string{big}, nil},
		{"4 MiB unterminated", `head -c 4194304 /dev/zero | tr '\0' x`, []string{big}, nil},
		{"heredoc", "cat <<'EOF'\nline $HOME\n\tindented\nEOF", []string{"line $HOME", "\tindented"}, nil},
		{"stdin is /dev/null", "cat; echo done", []string{"done"}, nil},
		{"many lines", "seq 1 20000", seqLines(20000), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := a.run(t, "/command", map[string]any{"command": tt.command})
			if code := res.exitCode(t); code != "0" {
				t.Fatalf("exit %s, stderr %q", code, res.stderr)
			}
			if !slices.Equal(res.stdout, tt.wantStdout) {
				t.Errorf("stdout %q, want %q", short(res.stdout), short(tt.wantStdout))
			}
			if !slices.Equal(res.stderr, tt.wantStderr) {
				t.Errorf("stderr %q, want %q", short(res.stderr), short(tt.wantStderr))
			}
		})
	}
}

func seqLines(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i + 1)
	}
	return out
}

func TestCommandExit(t *testing.T) {
	a := newTestAgent(t)
	tests := []struct {
		command   string
		evalue    string
		traceback string
	}{
		{"exit 0", "0", ""},
		{"exit 3", "3", "exit status 3"},
		{"false", "1", "exit status 1"},
		{"kill -KILL $$", "-1", "signal: killed"},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			res := a.run(t, "/command", map[string]any{"command": tt.command})
			last := res.events[len(res.events)-1]
			if tt.evalue == "0" {
				if last.Type != evComplete || last.ExecutionTime == nil {
					t.Fatalf("last event %+v, want execution_complete with execution_time", last)
				}
				return
			}
			for _, ev := range res.events {
				if ev.Type == evComplete {
					t.Fatalf("failed command sent execution_complete")
				}
			}
			if last.Type != evError || last.Error.EName != "CommandExecError" || last.Error.EValue != tt.evalue ||
				!slices.Equal(last.Error.Traceback, []string{tt.traceback}) {
				t.Fatalf("last event %+v, want error %s %q", last, tt.evalue, tt.traceback)
			}
		})
	}
}

func TestCommandRequestErrors(t *testing.T) {
	a := newTestAgent(t)
	file := filepath.Join(a.dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body any
	}{
		{"not JSON", "{"},
		{"no command", map[string]any{}},
		{"missing cwd", map[string]any{"command": "true", "cwd": filepath.Join(a.dir, "nope")}},
		{"cwd is a file", map[string]any{"command": "true", "cwd": file}},
		{"undefined variable in cwd", map[string]any{"command": "true", "cwd": "$SANDBOXD_TEST_UNDEFINED/x"}},
		{"gid without uid", map[string]any{"command": "true", "gid": 0}},
		{"negative timeout", map[string]any{"command": "true", "timeout": -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body
			if s, ok := body.(string); ok {
				resp, err := http.Post(a.url+"/command", "application/json", strings.NewReader(s))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				wantError(t, resp, http.StatusBadRequest, codeInvalidRequest)
				return
			}
			wantError(t, a.post(t, "/command", body), http.StatusBadRequest, codeInvalidRequest)
		})
	}
}

func TestCommandEnvironment(t *testing.T) {
	a := newTestAgent(t)
	t.Setenv("SANDBOXD_TEST_BASE", "base")
	t.Setenv("SANDBOXD_TEST_OVER", "old")
	res := a.run(t, "/command", map[string]any{
		"command": `echo "$SANDBOXD_TEST_BASE $SANDBOXD_TEST_OVER $SANDBOXD_TEST_NEW"; pwd`,
		"cwd":     "$SANDBOXD_TEST_DIR",
		"envs":    map[string]string{"SANDBOXD_TEST_OVER": "new", "SANDBOXD_TEST_NEW": "added", "SANDBOXD_TEST_DIR": a.dir},
	})
	want := []string{"base new added", a.dir}
	if !slices.Equal(res.stdout, want) {
		t.Fatalf("stdout %q, want %q", res.stdout, want)
	}
}

// A command far above the 128 KiB argv limit reaches the shell intact.
func TestCommandLarge(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	payload := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	res := a.run(t, "/command", map[string]any{
		"command": "x='" + payload + "'\necho ${#x}\ncat <<'EOF' | wc -c\n" + payload + "\nEOF",
	})
	if want := []string{"1048576", "1048577"}; !slices.Equal(res.stdout, want) {
		t.Fatalf("stdout %q, want %q (stderr %q)", res.stdout, want, short(res.stderr))
	}
}

func TestCommandUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("switching users needs root")
	}
	a := newTestAgent(t)
	for _, size := range []int{0, 200 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			cmd := "# " + strings.Repeat("p", size) + "\nid -u; id -g"
			res := a.run(t, "/command", map[string]any{"command": cmd, "uid": 65534, "gid": 65533})
			if want := []string{"65534", "65533"}; !slices.Equal(res.stdout, want) {
				t.Fatalf("stdout %q, want %q (stderr %q)", res.stdout, want, res.stderr)
			}
		})
	}
}

func TestCommandStartFailure(t *testing.T) {
	a := newTestAgent(t)
	// The kernel refuses an environment entry over 128 KiB.
	res := a.run(t, "/command", map[string]any{"command": "true", "envs": map[string]string{"HUGE": strings.Repeat("v", 200<<10)}})
	last := res.events[len(res.events)-1]
	if len(res.events) != 2 || last.Type != evError {
		t.Fatalf("events %+v, want init and error", res.events)
	}
	if _, err := strconv.Atoi(last.Error.EValue); err == nil {
		t.Fatalf("evalue %q is numeric; a start failure must not look like an exit code", last.Error.EValue)
	}

	a.findShell = func() (shell, error) { return shell{}, errors.New("no shell: neither bash nor sh found") }
	res = a.run(t, "/command", map[string]any{"command": "true"})
	if last := res.events[len(res.events)-1]; last.Type != evError || !strings.Contains(last.Error.EValue, "no shell") {
		t.Fatalf("events %+v, want an error saying there is no shell", res.events)
	}
}

// The timeout kills the whole process group, grandchildren included.
func TestCommandTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	res := a.run(t, "/command", map[string]any{
		"command": `bash -c 'sleep 300 & echo $!; wait'`,
		"timeout": 300,
	})
	if code := res.exitCode(t); code != "-1" {
		t.Fatalf("exit %s, want -1", code)
	}
	if len(res.stdout) != 1 {
		t.Fatalf("stdout %q, want the grandchild's pid", res.stdout)
	}
	pid, _ := strconv.Atoi(res.stdout[0])
	eventually(t, "grandchild to die", func() bool { return processGone(pid) })
}

// Unlike upstream execd, a foreground command dies with its client.
func TestCommandClientDisconnect(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, stream, _ := a.startStream(t, ctx, "/command", map[string]any{"command": "echo $$; sleep 300"})
	pid := pidOf(t, stream)
	if !alive(pid) {
		t.Fatalf("command %d is not running", pid)
	}
	cancel()
	eventually(t, "abandoned command to die", func() bool { return processGone(pid) })
}

// A process left running in the background by a command neither holds the
// stream open nor dies when the command ends.
func TestCommandLeavesBackgroundProcess(t *testing.T) {
	a := newTestAgent(t)
	res := a.run(t, "/command", map[string]any{"command": "sleep 300 & echo $!; echo done"})
	if len(res.stdout) != 2 || res.stdout[1] != "done" {
		t.Fatalf("stdout %q", res.stdout)
	}
	pid, _ := strconv.Atoi(res.stdout[0])
	if !alive(pid) {
		t.Fatalf("background process %d died with the command", pid)
	}
	_ = killPid(pid)
}

func killPid(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

func TestCommandConcurrent(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := a.run(t, "/command", map[string]any{"command": fmt.Sprintf("for j in $(seq 1 2000); do echo %d-$j; done", i)})
			if len(res.stdout) != 2000 || res.stdout[1999] != fmt.Sprintf("%d-2000", i) {
				errs <- fmt.Errorf("command %d: %d lines, last %q", i, len(res.stdout), res.stdout[len(res.stdout)-1])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestInterruptForeground(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	id, stream, _ := a.startStream(t, context.Background(), "/command", map[string]any{"command": "echo $$; sleep 300"})
	pid := pidOf(t, stream)
	resp := a.do(t, http.MethodDelete, "/command?id="+id, nil)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("interrupt: %s %s", resp.Status, b)
	}
	ev := finalEvent(t, stream)
	if ev.Type != evError || ev.Error.EValue != "-1" {
		t.Fatalf("after interrupt got %+v, want error -1", ev)
	}
	if !processGone(pid) {
		t.Fatalf("process %d still running after interrupt returned", pid)
	}
	// Interrupting again fails: nothing runs any more.
	wantError(t, a.do(t, http.MethodDelete, "/command?id="+id, nil), http.StatusInternalServerError, codeRuntimeError)
	wantError(t, a.do(t, http.MethodDelete, "/command?id=unknown", nil), http.StatusNotFound, codeContextNotFound)
	wantError(t, a.do(t, http.MethodDelete, "/command", nil), http.StatusBadRequest, codeMissingQuery)
}

// What a stopped command forks after the signal went out (here, in its
// SIGTERM trap) dies with it rather than being left behind.
func TestInterruptKillsLateChildren(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	id, stream, _ := a.startStream(t, context.Background(), "/command", map[string]any{
		"command": "trap 'sleep 300 & echo $!; exit 0' TERM; echo $$; sleep 300 & wait",
	})
	pidOf(t, stream)
	if resp := a.do(t, http.MethodDelete, "/command?id="+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("interrupt: %s", resp.Status)
	}
	late := pidOf(t, stream)
	eventually(t, "the late child to die", func() bool { return processGone(late) })
}

// A command that ignores SIGTERM gets SIGKILL after the grace period.
func TestInterruptEscalates(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.delays.interruptGrace = 100 * time.Millisecond
	id, stream, _ := a.startStream(t, context.Background(), "/command", map[string]any{"command": "trap '' TERM; echo $$; sleep 300 & wait"})
	pidOf(t, stream)
	if resp := a.do(t, http.MethodDelete, "/command?id="+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("interrupt: %s", resp.Status)
	}
	if ev := finalEvent(t, stream); ev.Type != evError || ev.Error.EValue != "-1" {
		t.Fatalf("got %+v, want error -1", ev)
	}
}

// A long command carries a ping event every pingInterval.
func TestCommandPing(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.delays.ping = 50 * time.Millisecond
	// The command prints nothing until the test has seen the ping.
	seen := filepath.Join(a.dir, "seen")
	_, stream, _ := a.startStream(t, context.Background(), "/command", map[string]any{"command": "while [ ! -e " + seen + " ]; do sleep 0.01; done; echo done"})
	line := "\n"
	for line == "\n" { // the blank line after init
		var err error
		if line, err = stream.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	var ev event
	if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Type != evPing || ev.Text != "pong" || ev.Timestamp == nil {
		t.Fatalf("got %q, want a ping event", line)
	}
	if err := os.WriteFile(seen, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := finalEvent(t, stream); ev.Type != evComplete {
		t.Fatalf("got %+v, want execution_complete", ev)
	}
}

type status struct {
	ID         string  `json:"id"`
	Content    string  `json:"content"`
	Running    bool    `json:"running"`
	ExitCode   *int    `json:"exit_code"`
	Error      string  `json:"error"`
	StartedAt  string  `json:"started_at"`
	FinishedAt *string `json:"finished_at"`
}

func (a *testAgent) status(t *testing.T, id string) status {
	t.Helper()
	return decode[status](t, a.do(t, http.MethodGet, "/command/status/"+id, nil), http.StatusOK)
}

func (a *testAgent) logs(t *testing.T, id string, cursor string) (string, string) {
	t.Helper()
	path := "/command/" + id + "/logs"
	if cursor != "" {
		path += "?cursor=" + cursor
	}
	resp := a.do(t, http.MethodGet, path, nil)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("logs: %s %s", resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	return string(b), resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR")
}

func TestBackgroundCommand(t *testing.T) {
	t.Parallel()
	for _, memory := range []bool{false, true} {
		t.Run(fmt.Sprintf("memory=%v", memory), func(t *testing.T) {
			a := newTestAgent(t)
			if memory {
				a.opts.TempDir = filepath.Join(a.dir, "missing") // nowhere to write: logs stay in memory
			}
			cmd := "for i in 1 2 3; do echo line$i; done; echo err >&2; printf partial; exit 4"
			res := a.run(t, "/command", map[string]any{"command": cmd, "background": true})
			if len(res.events) != 2 || res.events[1].Type != evComplete {
				t.Fatalf("events %+v, want init and execution_complete", res.events)
			}
			id := res.events[0].Text
			eventually(t, "background command to finish", func() bool { return !a.status(t, id).Running })
			st := a.status(t, id)
			if st.ID != id || st.Content != cmd || st.ExitCode == nil || *st.ExitCode != 4 || st.Error != "exit status 4" ||
				st.StartedAt == "" || st.FinishedAt == nil {
				t.Fatalf("status %+v", st)
			}
			tests := []struct{ cursor, body, next string }{
				{"", "line1\nline2\nline3\nerr\npartial", "5"},
				{"0", "line1\nline2\nline3\nerr\npartial", "5"},
				{"2", "line3\nerr\npartial", "5"},
				{"4", "partial", "5"},
				{"5", "", "5"},
				{"9", "", "5"},
			}
			for _, tt := range tests {
				body, next := a.logs(t, id, tt.cursor)
				if body != tt.body || next != tt.next {
					t.Errorf("cursor %q: got %q next %s, want %q next %s", tt.cursor, body, next, tt.body, tt.next)
				}
			}
		})
	}
}

// While a background command runs, logs hold complete lines only.
func TestBackgroundRunning(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	// The marker tells that printf has run: interrupting before it would
	// leave no partial line to check.
	marker := filepath.Join(a.dir, "printed")
	res := a.run(t, "/command", map[string]any{"command": "echo a; printf b; touch " + marker + "; sleep 300", "background": true})
	id := res.events[0].Text
	var body, next string
	eventually(t, "first line in the log", func() bool {
		body, next = a.logs(t, id, "0")
		return body != ""
	})
	eventually(t, "the partial line to be printed", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if body != "a\n" || next != "1" {
		t.Fatalf("logs %q next %s, want %q next 1", body, next, "a\n")
	}
	if n := decode[map[string]int](t, a.do(t, http.MethodGet, "/_sandboxd/activity", nil), http.StatusOK)["running"]; n != 1 {
		t.Fatalf("activity %d, want 1", n)
	}
	if resp := a.do(t, http.MethodDelete, "/command?id="+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("interrupt: %s", resp.Status)
	}
	eventually(t, "status to show the end", func() bool { return !a.status(t, id).Running })
	if st := a.status(t, id); *st.ExitCode != -1 {
		t.Fatalf("exit code %d, want -1", *st.ExitCode)
	}
	if body, next := a.logs(t, id, "1"); body != "b" || next != "2" {
		t.Fatalf("after the end: %q next %s, want the partial line", body, next)
	}
	if n := decode[map[string]int](t, a.do(t, http.MethodGet, "/_sandboxd/activity", nil), http.StatusOK)["running"]; n != 0 {
		t.Fatalf("activity %d, want 0", n)
	}
}

func TestBackgroundTimeout(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	res := a.run(t, "/command", map[string]any{"command": "sleep 300", "background": true, "timeout": 100})
	id := res.events[0].Text
	eventually(t, "timeout to kill the command", func() bool { return !a.status(t, id).Running })
	if st := a.status(t, id); *st.ExitCode != -1 {
		t.Fatalf("exit code %d, want -1", *st.ExitCode)
	}
}

func TestCommandStatusErrors(t *testing.T) {
	a := newTestAgent(t)
	wantError(t, a.do(t, http.MethodGet, "/command/status/nope", nil), http.StatusNotFound, codeInvalidRequest)
	wantError(t, a.do(t, http.MethodGet, "/command/nope/logs", nil), http.StatusNotFound, codeInvalidRequest)
	fg := a.run(t, "/command", map[string]any{"command": "true"}).events[0].Text
	if st := a.status(t, fg); st.Running || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("foreground status %+v", st)
	}
	wantError(t, a.do(t, http.MethodGet, "/command/"+fg+"/logs", nil), http.StatusBadRequest, codeInvalidRequest)
}

// Waiting for a running command holds no thread: the poller watches its
// pidfd. (Blocked in waitid, every running command would hold one.)
func TestRunningCommandsHoldNoThread(t *testing.T) {
	sh, err := new(shellFinder).find()
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	before := threads(t)
	var procs []*process
	defer func() {
		for _, p := range procs {
			_ = p.kill()
			<-p.done
		}
	}()
	for range n {
		p, err := start(sh, execSpec{script: "sleep 60"})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	// Give blocked waits the time to take threads of their own.
	time.Sleep(200 * time.Millisecond)
	if after := threads(t); after >= before+n/2 {
		t.Fatalf("%d threads with %d commands running, %d before", after, n, before)
	}
	for _, p := range procs[:1] {
		_ = p.kill()
		<-p.done
		if code, desc := p.result(); code != -1 || desc != "signal: killed" {
			t.Errorf("killed command: exit %d %q", code, desc)
		}
	}
}

// threads is the number of OS threads of this process.
func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// The child gets a blocking write end; the pump polls the read end.
func TestOutputPipeModes(t *testing.T) {
	r, w, err := outputPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, f := range []struct {
		f        *os.File
		nonblock bool
	}{{r, true}, {w, false}} {
		rc, err := f.f.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var flags int
		var ferr error
		if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
			t.Fatal(err, ferr)
		}
		if got := flags&unix.O_NONBLOCK != 0; got != f.nonblock {
			t.Errorf("%s: O_NONBLOCK %v, want %v", f.f.Name(), got, f.nonblock)
		}
	}
}
