//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// TestMain lets spawnDaemon start this test binary as `sandboxd agent
// --daemon`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		if err := Main(context.Background(), os.Args[2:], nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testSocket returns an abstract socket name that no other test uses.
func testSocket() string { return "@sandboxd-agent-test-" + newID() }

// daemons spawns agent daemons in this process and records them.
type daemons struct {
	t  testing.TB
	mu sync.Mutex
	// stops ends each daemon spawned so far, in order.
	stops []func()
}

// spawn is a spawnDaemon that serves in a goroutine.
func (ds *daemons) spawn(ln *net.UnixListener) error {
	d := newDaemon(Options{TempDir: ds.t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.serve(ctx, ln) }()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
		d.state.close()
	})
	ds.t.Cleanup(stop)
	ds.mu.Lock()
	ds.stops = append(ds.stops, stop)
	ds.mu.Unlock()
	return nil
}

// stop ends the i-th daemon, as if it was killed.
func (ds *daemons) stop(i int) {
	ds.mu.Lock()
	stop := ds.stops[i]
	ds.mu.Unlock()
	stop()
}

func (ds *daemons) started() int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return len(ds.stops)
}

// host connects to the daemon on name as sandboxd does: through one exec of
// `sandboxd agent`, here attach on two pipes. It returns the agent as a test
// client sees it, what attach returned and the function that ends the exec.
func host(t testing.TB, name string, spawn func(*net.UnixListener) error) (*testAgent, <-chan error, func()) {
	t.Helper()
	c, done, hangUp := dialPipes(t, func(stdin io.Reader, stdout io.Writer) error {
		return attach(context.Background(), name, spawn, stdin, stdout, io.Discard, slog.New(slog.DiscardHandler))
	})
	return viaClient(t, c), done, hangUp
}

// viaClient serves the agent behind c on a local URL, through a reverse
// proxy as sandboxd's proxy route does.
func viaClient(t testing.TB, c *Client) *testAgent {
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "agent"}) },
		Transport: c.Transport(),
	})
	t.Cleanup(front.Close)
	return &testAgent{url: front.URL}
}

// noSpawn fails the test if a connection would start a daemon.
func noSpawn(t testing.TB) func(*net.UnixListener) error {
	return func(ln *net.UnixListener) error {
		ln.Close()
		t.Error("a daemon was started although one is running")
		return errors.New("no daemon expected")
	}
}

func (a *testAgent) activity(t *testing.T) int {
	t.Helper()
	return decode[map[string]int](t, a.do(t, http.MethodGet, "/_sandboxd/activity", nil), http.StatusOK)["running"]
}

// What one connection starts, the next one finds: background commands,
// sessions, PTYs and the activity count. Only the foreground command of the
// dropped connection dies.
func TestDaemonKeepsStateAcrossConnections(t *testing.T) {
	ds := &daemons{t: t}
	name := testSocket()
	a1, done1, hangUp1 := host(t, name, ds.spawn)

	bg := a1.run(t, "/command", map[string]any{"command": "sleep 300", "background": true}).events[0].Text
	sess := a1.newSession(t, nil)
	a1.run(t, "/session/"+sess+"/run", map[string]any{"command": "export KEPT=yes"})
	pty := a1.newPTY(t, nil)
	fg, stream, _ := a1.startStream(t, context.Background(), "/command", map[string]any{"command": "echo $$; exec sleep 300"})
	fgPid := pidOf(t, stream)

	hangUp1()
	if err := <-done1; err != nil {
		t.Fatalf("attach after the host hung up: %v, want nil", err)
	}
	eventually(t, "the dropped connection's foreground command to die", func() bool { return processGone(fgPid) })

	a2, _, _ := host(t, name, noSpawn(t))
	if st := a2.status(t, bg); !st.Running {
		t.Fatalf("background command after reconnecting: %+v, want running", st)
	}
	eventually(t, "the foreground command to be recorded as finished", func() bool { return !a2.status(t, fg).Running })
	if n := a2.activity(t); n != 1 {
		t.Fatalf("activity after reconnecting: %d running, want 1 (the background command)", n)
	}
	if res := a2.run(t, "/session/"+sess+"/run", map[string]any{"command": "echo $KEPT"}); !slices.Equal(res.stdout, []string{"yes"}) {
		t.Fatalf("session after reconnecting: stdout %q, want [yes]", res.stdout)
	}
	if st := decode[ptyStatusBody](t, a2.do(t, http.MethodGet, "/pty/"+pty, nil), http.StatusOK); st.SessionID != pty {
		t.Fatalf("pty after reconnecting: %+v", st)
	}
	if n := ds.started(); n != 1 {
		t.Fatalf("%d daemons started, want 1", n)
	}
}

// Of several `sandboxd agent` starting at once with no daemon, one starts
// it and all are served by it.
func TestConcurrentStartersShareOneDaemon(t *testing.T) {
	ds := &daemons{t: t}
	name := testSocket()
	gate := make(chan struct{})
	agents := make([]*testAgent, 8)
	for i := range agents {
		c, _, _ := dialPipes(t, func(stdin io.Reader, stdout io.Writer) error {
			<-gate
			return attach(context.Background(), name, ds.spawn, stdin, stdout, io.Discard, slog.New(slog.DiscardHandler))
		})
		agents[i] = viaClient(t, c)
	}
	close(gate)

	bg := agents[0].run(t, "/command", map[string]any{"command": "sleep 300", "background": true}).events[0].Text
	for i, a := range agents {
		if st := a.status(t, bg); !st.Running {
			t.Fatalf("agent %d: status %+v, want the running command started through agent 0", i, st)
		}
	}
	if n := ds.started(); n != 1 {
		t.Fatalf("%d daemons started, want 1", n)
	}
}

func TestSameUser(t *testing.T) {
	tests := []struct {
		peer, own uint32
		ok        bool
	}{
		{0, 0, true},
		{1000, 1000, true},
		{1000, 0, false},
		{0, 1000, false},
		{65534, 65535, false},
	}
	for _, tt := range tests {
		err := sameUser(&syscall.Ucred{Pid: 42, Uid: tt.peer, Gid: tt.peer}, int(tt.own))
		if (err == nil) != tt.ok {
			t.Errorf("peer uid %d, own uid %d: err %v, want ok=%v", tt.peer, tt.own, err, tt.ok)
		}
	}
}

// A daemon closes connections from another user without serving them, and
// the bridge then serves its connection alone.
func TestDaemonRefusesOtherUser(t *testing.T) {
	name := testSocket()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemon(Options{TempDir: t.TempDir()})
	d.uid = os.Getuid() + 1 // as if this test ran as someone else
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		d.state.close()
	})

	if conn, err := connect(name, noSpawn(t)); err == nil {
		conn.Close()
		t.Fatal("connected to a daemon of another user")
	} else if !strings.Contains(err.Error(), "did not greet") {
		t.Fatalf("connect: %v, want a refusal", err)
	}

	a, _, _ := host(t, name, noSpawn(t))
	id := a.run(t, "/command", map[string]any{"command": "true"}).events[0].Text
	if d.state.commands.get(id) != nil {
		t.Fatal("the refusing daemon ran the command")
	}
}

// When no daemon can be started, the connection is served all the same.
func TestAttachWithoutDaemon(t *testing.T) {
	var failed atomic.Int32
	spawn := func(ln *net.UnixListener) error {
		ln.Close()
		failed.Add(1)
		return errors.New("cannot start")
	}
	a, done, hangUp := host(t, testSocket(), spawn)
	if res := a.run(t, "/command", map[string]any{"command": "echo served"}); !slices.Equal(res.stdout, []string{"served"}) {
		t.Fatalf("stdout %q", res.stdout)
	}
	if n := failed.Load(); n != 1 {
		t.Fatalf("spawn called %d times, want 1", n)
	}
	hangUp()
	if err := <-done; err != nil {
		t.Fatalf("attach after hang-up: %v", err)
	}
}

// When the daemon dies, the bridge ends, so sandboxd sees the agent gone and
// the next connection starts a new daemon.
func TestBridgeEndsWithDaemon(t *testing.T) {
	ds := &daemons{t: t}
	name := testSocket()
	c, done, _ := dialPipes(t, func(stdin io.Reader, stdout io.Writer) error {
		return attach(context.Background(), name, ds.spawn, stdin, stdout, io.Discard, slog.New(slog.DiscardHandler))
	})
	a := viaClient(t, c)
	a.do(t, http.MethodGet, "/ping", nil)

	ds.stop(0)
	if err := <-done; err != nil {
		t.Fatalf("bridge after the daemon ended: %v, want nil", err)
	}
	<-c.Done()

	a, _, _ = host(t, name, ds.spawn)
	if resp := a.do(t, http.MethodGet, "/ping", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("ping after restart: %s", resp.Status)
	}
	if n := ds.started(); n != 2 {
		t.Fatalf("%d daemons started, want 2", n)
	}
}

// spawnDaemon starts a real, detached process (this test binary, see
// TestMain) that outlives the connection that started it and holds nothing
// of that connection.
func TestSpawnDaemon(t *testing.T) {
	name := testSocket()
	a1, done1, hangUp1 := host(t, name, spawnDaemon)
	a1.do(t, http.MethodGet, "/ping", nil)

	pid := daemonPid(t)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if sid := procStatField(t, pid, 6); sid != strconv.Itoa(pid) {
		t.Errorf("daemon %d is in session %s, want its own", pid, sid)
	}
	for fd := range 3 {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd)); err != nil || target != os.DevNull {
			t.Errorf("daemon fd %d is %q (%v), want %s", fd, target, err, os.DevNull)
		}
	}

	bg := a1.run(t, "/command", map[string]any{"command": "sleep 300", "background": true}).events[0].Text
	hangUp1()
	if err := <-done1; err != nil {
		t.Fatalf("attach after the host hung up: %v", err)
	}

	a2, _, _ := host(t, name, noSpawn(t))
	t.Cleanup(func() { a2.do(t, http.MethodDelete, "/command?id="+bg, nil) })
	if st := a2.status(t, bg); !st.Running {
		t.Fatalf("background command after reconnecting: %+v, want running", st)
	}
	// Commands must not inherit the daemon's socket.
	res := a2.run(t, "/command", map[string]any{"command": `for f in /proc/$$/fd/*; do readlink "$f"; done`})
	for _, target := range res.stdout {
		if strings.HasPrefix(target, "socket:") {
			t.Fatalf("a command inherited a socket: fds %q", res.stdout)
		}
	}
}

// daemonPid finds the daemon that spawnDaemon started from this process.
func daemonPid(t *testing.T) int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.HasSuffix(string(cmdline), "\x00agent\x00"+daemonFlag+"\x00") {
			continue
		}
		if ppid := procStatField(t, pid, 4); ppid == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("daemons started by this test: %v, want one", pids)
	}
	return pids[0]
}

// procStatField returns field n (1-based, as in proc(5)) of /proc/pid/stat.
func procStatField(t *testing.T, pid, n int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields 1 and 2 are the pid and the parenthesised command name.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return fields[n-3]
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The daemon's warnings reach the stderr of the bridges attached to it,
// which sandboxd logs; the daemon itself has no stderr.
func TestDaemonLogReachesBridge(t *testing.T) {
	ds := &daemons{t: t}
	name := testSocket()
	var stderr lockedBuffer
	c, _, _ := dialPipes(t, func(stdin io.Reader, stdout io.Writer) error {
		return attach(context.Background(), name, ds.spawn, stdin, stdout, &stderr, slog.New(slog.DiscardHandler))
	})
	a := viaClient(t, c)
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The bridge follows the log once it has connected; until then a
	// warning goes to nobody, so the request is repeated until one arrives.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "unknown owner") {
		if time.Now().After(deadline) {
			t.Fatalf("no daemon warning on the bridge's stderr; it holds %q", stderr.String())
		}
		resp := a.post(t, "/files/permissions", map[string]transfer.Permission{f: {Owner: "no-such-user-sandboxd"}})
		resp.Body.Close()
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "level=WARN") {
		t.Errorf("bridge stderr %q lacks the record's level", stderr.String())
	}
}

// A daemon made to warn in a loop passes its burst on, drops the rest, and
// says how many it dropped once it may send again.
func TestLogHubLimitsRate(t *testing.T) {
	t.Parallel()
	var h logHub
	ch := h.follow()
	defer h.unfollow(ch)
	const n = 60 // more than logBurst, less than ch holds
	for i := range n {
		fmt.Fprintf(&h, "line %d\n", i)
	}
	got := len(ch)
	if got < logBurst || got >= n {
		t.Fatalf("%d of %d lines passed at once, want the burst of %d and not all", got, n, logBurst)
	}
	for range got {
		<-ch
	}
	time.Sleep(2 * time.Second / logRate) // time for at least one more line
	fmt.Fprintf(&h, "after\n")
	if first := string(<-ch); !strings.Contains(first, "log lines dropped") {
		t.Errorf("first line after the drop = %q, want the count of dropped lines", first)
	}
	if next := string(<-ch); next != "after\n" {
		t.Errorf("then %q, want the new line", next)
	}
}

// A root peer outside the daemon's pid namespace (pid 0: sandboxd's
// direct path) is admitted whatever the daemon's user; root with a pid in
// it, or any other user outside it, is judged by its uid as before.
func TestAdmit(t *testing.T) {
	tests := []struct {
		pid       int32
		peer, own uint32
		ok        bool
	}{
		{0, 0, 1000, true},
		{0, 0, 0, true},
		{42, 0, 1000, false},
		{0, 1000, 0, false},
		{0, 65534, 1000, false},
		{42, 1000, 1000, true},
	}
	for _, tt := range tests {
		err := admit(&syscall.Ucred{Pid: tt.pid, Uid: tt.peer, Gid: tt.peer}, int(tt.own))
		if (err == nil) != tt.ok {
			t.Errorf("peer pid %d uid %d, own uid %d: err %v, want ok=%v", tt.pid, tt.peer, tt.own, err, tt.ok)
		}
	}
}
