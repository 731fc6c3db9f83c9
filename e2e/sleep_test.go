//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Sandboxes that sleep instead of dying (docs/sleep.md). Each test runs
// its own server, whose test-only [lifecycle] test_min_idle_seconds lets
// a sandbox sleep after sleepIdle instead of the wire's minimum 30 s, and
// in parallel, so the waits overlap.

const sleepIdle = 2 * time.Second

// Extension keys of the sleep policy.
const (
	extSleepAfterIdle = "access.pause.after.idle.seconds"
	extIdleAction     = "sandboxd.io/idle-action"
	extResumeOn       = "sandboxd.io/resume-on"
	extExpireAction   = "sandboxd.io/expire-action"
)

func startSleepServer(t *testing.T) *Server {
	t.Helper()
	return startServer(t, withTOML("[lifecycle]\ntest_min_idle_seconds = 1"))
}

// sleepyBox creates a busybox sandbox that sleeps by action after
// sleepIdle, with more extensions and fields, and resolves its execd
// endpoint as an SDK would.
func sleepyBox(t *testing.T, s *Server, action string, ext map[string]string, fields map[string]any) *execdBox {
	t.Helper()
	all := map[string]string{extSleepAfterIdle: strconv.Itoa(int(sleepIdle.Seconds())), extIdleAction: action}
	for k, v := range ext {
		all[k] = v
	}
	f := map[string]any{"extensions": all}
	for k, v := range fields {
		f[k] = v
	}
	_, box := newIdleBox(t, s, f)
	return box
}

// waitAsleep waits until the API reports the sandbox asleep with reason,
// and checks what Docker says of its container: frozen (paused) or not
// running (stopped). It returns the container's start time.
func waitAsleep(t *testing.T, s *Server, id, reason string) time.Time {
	t.Helper()
	var sb lcSandbox
	waitUntil(t, 30*time.Second, "sandbox "+id+" asleep ("+reason+")", func() bool {
		sb = getSandbox(t, s, "/v1", id)
		return sb.Status.State == "Paused" && sb.Status.Reason == reason
	})
	if sb.Status.Message == "" {
		t.Errorf("asleep %s: no status message", id)
	}
	c := sandboxContainer(t, id)
	switch {
	case strings.HasSuffix(reason, "_PAUSED") && (!c.State.Paused || !c.State.Running):
		t.Fatalf("sandbox %s is %s but its container is %s (paused=%v)", id, reason, c.State.Status, c.State.Paused)
	case strings.HasSuffix(reason, "_STOPPED") && (c.State.Running || c.State.Status != "exited"):
		t.Fatalf("sandbox %s is %s but its container is %s (running=%v)", id, reason, c.State.Status, c.State.Running)
	}
	return parseUTC(t, "StartedAt", c.State.StartedAt)
}

// wantAwake checks that the API and Docker say the sandbox runs, and
// whether its processes are those of before (started at started).
func wantAwake(t *testing.T, s *Server, id string, started time.Time, sameProcesses bool) {
	t.Helper()
	if sb := getSandbox(t, s, "/v1", id); sb.Status.State != "Running" {
		t.Fatalf("after the wake: %s is %s/%s", id, sb.Status.State, sb.Status.Reason)
	}
	c := sandboxContainer(t, id)
	if !c.State.Running || c.State.Paused {
		t.Fatalf("after the wake: container of %s is %s (paused=%v)", id, c.State.Status, c.State.Paused)
	}
	if now := parseUTC(t, "StartedAt", c.State.StartedAt); now.Equal(started) != sameProcesses {
		t.Fatalf("after the wake: container started at %s, before at %s; same processes wanted: %v", now, started, sameProcesses)
	}
}

// TestSleepPauseWakesOnCommand: an idle sandbox is frozen (Docker reports
// it paused); a call with a foreign token does not wake it; a command
// with the endpoint's token wakes it and answers, and the same processes
// go on.
func TestSleepPauseWakesOnCommand(t *testing.T) {
	t.Parallel()
	s := startSleepServer(t)
	b := sleepyBox(t, s, "pause", nil, nil)
	b.run(t, map[string]any{"command": "echo kept > /root/mark"})
	_, other := newIdleBox(t, s, nil)
	started := waitAsleep(t, s, b.ID, "IDLE_PAUSED")
	// Only a caller the sandbox would serve wakes it: a forged token, or
	// another sandbox's, is refused and the sandbox sleeps on.
	for _, tok := range []string{"forged", other.Headers[execdTokenHeader]} {
		status, _, body := b.do(t, http.MethodGet, "/ping", nil, map[string]string{execdTokenHeader: tok})
		wantError(t, "a sleeping sandbox called with a foreign token", status, body, http.StatusUnauthorized, "INVALID_API_KEY")
	}
	if sb := getSandbox(t, s, "/v1", b.ID); sb.Status.Reason != "IDLE_PAUSED" || !sandboxContainer(t, b.ID).State.Paused {
		t.Fatalf("woken by a refused call: %s/%s", sb.Status.State, sb.Status.Reason)
	}
	if out := b.run(t, map[string]any{"command": "cat /root/mark"}); len(out.Stdout) != 1 || out.Stdout[0] != "kept" {
		t.Fatalf("first command after the sleep: stdout %q", out.Stdout)
	}
	wantAwake(t, s, b.ID, started, true)
	// The wake was activity: it sleeps again only once idle again.
	waitAsleep(t, s, b.ID, "IDLE_PAUSED")
}

// TestSleepStopWakesOnDownload: a sandbox stopped when idle keeps its
// files; a download with the same endpoint and token brings it back with
// new processes.
func TestSleepStopWakesOnDownload(t *testing.T) {
	t.Parallel()
	s := startSleepServer(t)
	b := sleepyBox(t, s, "stop", nil, nil)
	b.run(t, map[string]any{"command": "echo files-survive > /root/f"})
	cid := sandboxContainer(t, b.ID).ID
	started := waitAsleep(t, s, b.ID, "IDLE_STOPPED")
	status, _, body := b.do(t, http.MethodGet, "/files/download?path=/root/f", nil, nil)
	if status != http.StatusOK || string(body) != "files-survive\n" {
		t.Fatalf("download after the sleep: status %d, body %q", status, body)
	}
	wantAwake(t, s, b.ID, started, false)
	if c := sandboxContainer(t, b.ID); c.ID != cid {
		t.Fatalf("container changed from %s to %s", cid, c.ID)
	}
	b.echo(t)
}

// TestSleepWakesOnAPICalls: the lifecycle calls that need a sandbox wake
// it (endpoints, renew, resume: the console's Resume button); a sandbox
// that wakes on API calls only answers proxied requests 503 with
// Retry-After while asleep.
func TestSleepWakesOnAPICalls(t *testing.T) {
	t.Parallel()
	s := startSleepServer(t)
	b := sleepyBox(t, s, "pause", map[string]string{extResumeOn: "api"}, nil)
	for _, call := range []struct {
		name, method, path string
		body               any
		status             int
	}{
		{"endpoints", http.MethodGet, sandboxPath(b.ID, "/endpoints/"+execdPort), nil, http.StatusOK},
		{"renew", http.MethodPost, sandboxPath(b.ID, "/renew-expiration"), map[string]any{"expiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, http.StatusOK},
		{"resume", http.MethodPost, sandboxPath(b.ID, "/resume"), nil, http.StatusAccepted},
	} {
		started := waitAsleep(t, s, b.ID, "IDLE_PAUSED")
		status, hdr, body := b.do(t, http.MethodGet, "/ping", nil, nil)
		wantError(t, "proxied request to a sandbox waking on API calls only", status, body, http.StatusServiceUnavailable, "SANDBOX::PAUSED")
		if hdr.Get("Retry-After") != "1" {
			t.Errorf("503 SANDBOX::PAUSED: Retry-After %q, want 1", hdr.Get("Retry-After"))
		}
		if status, _, body := s.do(t, call.method, call.path, call.body, nil); status != call.status {
			t.Fatalf("%s of a sleeping sandbox: status %d; body %s", call.name, status, body)
		}
		wantAwake(t, s, b.ID, started, true)
		b.echo(t)
	}
}

// TestSleepAcrossRestart: sandboxes asleep when sandboxd restarts stay
// asleep (neither reaped as stopped nor started), are listed as such by
// the API and the CLI, and wake on the next call.
func TestSleepAcrossRestart(t *testing.T) {
	t.Parallel()
	s := startSleepServer(t)
	paused := sleepyBox(t, s, "pause", nil, nil)
	stopped := sleepyBox(t, s, "stop", nil, nil)
	stopped.run(t, map[string]any{"command": "echo across > /root/r"})
	waitAsleep(t, s, paused.ID, "IDLE_PAUSED")
	waitAsleep(t, s, stopped.ID, "IDLE_STOPPED")
	s.Restart()
	time.Sleep(3 * time.Second) // a few sweeps of the new process
	pausedAt := waitAsleep(t, s, paused.ID, "IDLE_PAUSED")
	stoppedAt := waitAsleep(t, s, stopped.ID, "IDLE_STOPPED")
	out := cliOK(t, s, "ls", "--state", "Paused")
	for _, want := range []string{paused.ID, stopped.ID, "Paused (IDLE_PAUSED)", "Paused (IDLE_STOPPED)"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandboxd ls --state Paused lacks %q:\n%s", want, out)
		}
	}
	paused.echo(t)
	wantAwake(t, s, paused.ID, pausedAt, true)
	if out := stopped.run(t, map[string]any{"command": "cat /root/r"}); len(out.Stdout) != 1 || out.Stdout[0] != "across" {
		t.Fatalf("after restart and wake: stdout %q", out.Stdout)
	}
	wantAwake(t, s, stopped.ID, stoppedAt, false)
}

// TestSleepExpiryWhileAsleep: a sandbox asleep at its expiry is deleted,
// unless its expire action puts it to sleep (deeper here); then a call
// wakes it with its timeout granted again, at least 5 minutes.
func TestSleepExpiryWhileAsleep(t *testing.T) {
	t.Parallel()
	s := startSleepServer(t)
	gone := sleepyBox(t, s, "pause", nil, map[string]any{"timeout": 60})
	kept := sleepyBox(t, s, "pause", map[string]string{extExpireAction: "stop"}, map[string]any{"timeout": 60})
	kept.run(t, map[string]any{"command": "echo expired-but-kept > /root/e"})
	waitAsleep(t, s, gone.ID, "IDLE_PAUSED")
	waitAsleep(t, s, kept.ID, "IDLE_PAUSED")
	exp := expiresAt(t, s, kept.ID)
	waitUntil(t, time.Until(exp)+reapSlack, "sandbox "+gone.ID+" reaped at its expiry", func() bool {
		status, _, _ := s.do(t, http.MethodGet, sandboxPath(gone.ID), nil, nil)
		return status == http.StatusNotFound
	})
	assertGone(t, s, gone.ID)
	started := waitAsleep(t, s, kept.ID, "EXPIRED_STOPPED")
	if time.Now().Before(exp) {
		t.Fatalf("put to sleep for its expiry before it (%s)", exp)
	}
	if out := kept.run(t, map[string]any{"command": "cat /root/e"}); len(out.Stdout) != 1 || out.Stdout[0] != "expired-but-kept" {
		t.Fatalf("after the wake: stdout %q", out.Stdout)
	}
	wantAwake(t, s, kept.ID, started, false)
	if got := expiresAt(t, s, kept.ID); got.Before(time.Now().Add(4 * time.Minute)) {
		t.Fatalf("after a wake from an expired sleep, expiresAt %s: want about 5 minutes on", got)
	}
}

// TestSleepConcurrentWakes: many first calls to a sleeping sandbox all
// succeed, and share one wake.
func TestSleepConcurrentWakes(t *testing.T) {
	t.Parallel()
	s := startSleepServer(t)
	for _, action := range []string{"stop", "pause"} {
		b := sleepyBox(t, s, action, nil, nil)
		before := metricValue(t, s, "sandboxd_wakes_total")
		waitAsleep(t, s, b.ID, map[string]string{"pause": "IDLE_PAUSED", "stop": "IDLE_STOPPED"}[action])
		var wg sync.WaitGroup
		results := make([]string, 16)
		for i := range results {
			wg.Go(func() {
				status, _, body := b.do(t, http.MethodPost, "/command", map[string]any{"command": "echo " + strconv.Itoa(i)}, nil)
				results[i] = fmt.Sprintf("%d %s", status, body)
			})
		}
		wg.Wait()
		for i, r := range results {
			if !strings.HasPrefix(r, "200 ") || !strings.Contains(r, `"text":"`+strconv.Itoa(i)+`"`) {
				t.Errorf("%s: concurrent call %d: %.300s", action, i, r)
			}
		}
		if got := metricValue(t, s, "sandboxd_wakes_total"); got != before+1 {
			t.Errorf("%s: %v wakes for %d concurrent calls, want 1", action, got-before, len(results))
		}
		execdDelete(t, s, b.ID)
	}
}

// TestSleepCreateRefusesBadPolicy: every bad value of the policy is a 400
// with the error envelope naming its key; the wire's 30 s minimum holds
// on a server without the test knob.
func TestSleepCreateRefusesBadPolicy(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, ext := range []map[string]string{
		{extSleepAfterIdle: "10"},
		{extSleepAfterIdle: "abc"},
		{extSleepAfterIdle: "86401"},
		{extSleepAfterIdle: "60", extIdleAction: "hibernate"},
		{extSleepAfterIdle: "60", extResumeOn: "always"},
		{extSleepAfterIdle: "60", extIdleAction: "delete", extResumeOn: "access"},
		{extExpireAction: "keep"},
	} {
		status, _, body := s.do(t, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"extensions": ext}), nil)
		msg := wantError(t, fmt.Sprintf("create with %v", ext), status, body, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
		named := false
		for k := range ext {
			named = named || strings.Contains(msg, k)
		}
		if !named {
			t.Errorf("create with %v: message %q names none of its keys", ext, msg)
		}
	}
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("refused creates left %d containers", len(left))
	}
}

// metricValue reads one unlabelled counter from /metrics.
func metricValue(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, "/metrics", nil, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", status)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, v)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// TestSleepPolicedSandbox: a sandbox under a networkPolicy may sleep by
// pause, which keeps its network namespace and the firewall in it (after
// the wake it still reaches nothing); a stop, whose start would make the
// namespace anew without the firewall, is refused at create.
func TestSleepPolicedSandbox(t *testing.T) {
	t.Parallel()
	s := startServer(t, withTOML("[lifecycle]\ntest_min_idle_seconds = 1\n[docker]\nnetwork_mode = \"bridge\"\n"))
	removeInstanceHelpersAtEnd(t, s)
	deny := map[string]any{"defaultAction": "deny"}
	for _, key := range []string{extIdleAction, extExpireAction} {
		ext := map[string]string{extSleepAfterIdle: "2", key: "stop"}
		status, _, body := s.do(t, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"networkPolicy": deny, "extensions": ext}), nil)
		wantError(t, "a policed sandbox sleeping by stop", status, body, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
	}
	open := newExecdBox(t, s, busyboxRequest())
	secListen(t, open)
	openIP := secEndpoint(t, sandboxContainer(t, open.ID), "bridge").IPAddress
	closed := sleepyBox(t, s, "pause", nil, map[string]any{"networkPolicy": deny})
	waitAsleep(t, s, closed.ID, "IDLE_PAUSED")
	if out, code := closed.secShell(t, "nc -w 5 "+openIP+" 9999 </dev/null"); code == 0 || out == "hi" {
		t.Errorf("the deny-all sandbox reached another sandbox after its wake: %q", out)
	}
	if sb := getSandbox(t, s, "/v1", closed.ID); sb.Status.State != "Running" {
		t.Fatalf("the command did not wake the sandbox: %s/%s", sb.Status.State, sb.Status.Reason)
	}
	// Control: an unpoliced sandbox does reach it.
	other := newExecdBox(t, s, busyboxRequest())
	if out, code := other.secShell(t, "nc -w 10 "+openIP+" 9999 </dev/null"); code != 0 || out != "hi" {
		t.Fatalf("control: a bridge sandbox cannot reach another (%q, exit %d)", out, code)
	}
}
