//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dockerdWait bounds how long the Docker engine may take to stop (it stops
// every container first) or to start.
const dockerdWait = 2 * time.Minute

// TestReliabilityDockerdRestart restarts the Docker engine under a running
// sandboxd. While Docker is down, requests fail at once with a 503 and the
// error envelope and /health says so; once it is back, sandboxd works
// again by itself, and reports the sandbox that the restart stopped as
// stopped.
//
// It stops every container on the machine, so it is not parallel (Go runs
// it while no parallel test of the package runs). Set
// SANDBOXD_E2E_SKIP_DOCKERD_RESTART=1 where others share the engine.
func TestReliabilityDockerdRestart(t *testing.T) {
	if os.Getenv("SANDBOXD_E2E_SKIP_DOCKERD_RESTART") != "" {
		t.Skip("SANDBOXD_E2E_SKIP_DOCKERD_RESTART is set")
	}
	lockDockerdRestarts(t)
	d := findDockerd(t)
	s := startServer(t)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	runCommand(t, s, sb.ID, "true") // the agent runs
	pid := s.cmd.Process.Pid

	d.stop(t)
	// Registered after the server, so it runs before the server's
	// clean-up, which needs Docker.
	t.Cleanup(func() { d.ensureUp(t) })

	const bound = 20 * time.Second // a hang, not a slow answer
	status, body, err := doWithin(t, s, bound, http.MethodGet, "/health", nil)
	if err != nil || status != http.StatusServiceUnavailable {
		t.Errorf("GET /health with Docker down: %d %s %v, want 503", status, body, err)
	} else if h := decodeJSON[map[string]string](t, body); h["status"] != "unhealthy" || h["docker"] != "unreachable" {
		t.Errorf("GET /health with Docker down: %s, want unhealthy and docker unreachable", body)
	}
	for _, r := range []struct {
		method, path string
		body         any
		code         string // "" = any code
	}{
		{http.MethodPost, "/v1/sandboxes", busyboxRequest(), "DOCKER::INITIALIZATION_ERROR"},
		{http.MethodGet, "/v1/sandboxes", nil, "DOCKER::INITIALIZATION_ERROR"},
		{http.MethodGet, sandboxPath(sb.ID), nil, "DOCKER::INITIALIZATION_ERROR"},
		{http.MethodPost, sandboxPath(sb.ID, "/pause"), nil, "DOCKER::INITIALIZATION_ERROR"},
		{http.MethodDelete, sandboxPath(sb.ID), nil, "DOCKER::INITIALIZATION_ERROR"},
		{http.MethodPost, proxyPath(sb.ID, "/command"), map[string]any{"command": "true"}, ""},
		{http.MethodGet, proxyPath(sb.ID, "/files/download?path=/etc/hostname"), nil, ""},
	} {
		what := r.method + " " + r.path + " with Docker down"
		status, body, err := doWithin(t, s, bound, r.method, r.path, r.body)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		wantError(t, what, status, body, http.StatusServiceUnavailable, r.code)
	}
	// What an operator watches must stay visible.
	if status, body, err := doWithin(t, s, bound, http.MethodGet, "/metrics", nil); err != nil || status != http.StatusOK {
		t.Errorf("GET /metrics with Docker down: %d %s %v, want 200", status, body, err)
	}

	d.start(t)
	waitUntil(t, stateWait, "sandboxd to be healthy again", s.healthy)
	if !s.running() || s.cmd.Process.Pid != pid {
		t.Fatal("sandboxd did not survive the Docker restart")
	}
	// The engine stopped the container; nothing restarts it.
	got := getSandbox(t, s, "/v1", sb.ID)
	if got.Status.State != "Failed" && got.Status.State != "Terminated" {
		t.Errorf("sandbox stopped by the Docker restart is %+v, want Failed or Terminated", got.Status)
	}
	doError(t, s, http.MethodPost, proxyPath(sb.ID, "/command"), map[string]any{"command": "true"}, http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
	fresh := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	if out := runCommand(t, s, fresh.ID, "echo after"); out != "after" {
		t.Errorf("command in a sandbox created after the Docker restart: %q", out)
	}
	l := listSandboxes(t, s, "/v1", "")
	states := map[string]string{}
	for _, it := range l.Items {
		states[it.ID] = it.Status.State
	}
	if states[fresh.ID] != "Running" || states[sb.ID] != got.Status.State {
		t.Errorf("list after the Docker restart: %v, want %s Running and %s %s", states, fresh.ID, sb.ID, got.Status.State)
	}
	wantEmpty(t, s, http.MethodDelete, sandboxPath(sb.ID), http.StatusNoContent)
}

// dockerd is the Docker engine of this machine, restarted the way
// e2e/setup.sh starts it: with systemd where it runs, else by hand in the
// background with the same command line and log.
type dockerd struct {
	systemd bool
	pid     int      // a dockerd started by hand
	args    []string // its command line
	log     string   // where its output goes
}

// findDockerd finds out how the running engine was started.
func findDockerd(t *testing.T) *dockerd {
	t.Helper()
	if _, err := os.Stat("/run/systemd/system"); err == nil && exec.Command("systemctl", "is-active", "--quiet", "docker").Run() == nil {
		return &dockerd{systemd: true}
	}
	data, err := os.ReadFile("/var/run/docker.pid")
	if err != nil {
		t.Fatalf("the Docker engine runs neither under systemd nor with a pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("/var/run/docker.pid: %q", data)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatalf("dockerd %d: %v", pid, err)
	}
	d := &dockerd{pid: pid, args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")}
	if d.log = os.Getenv("SANDBOXD_DOCKERD_LOG"); d.log == "" {
		d.log = "/var/log/sandboxd-dockerd.log" // e2e/setup.sh's default
	}
	// Keep writing where it wrote, if that is a file.
	if out, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/2", pid)); err == nil {
		if st, err := os.Stat(out); err == nil && st.Mode().IsRegular() {
			d.log = out
		}
	}
	return d
}

// up reports whether the engine answers.
func (d *dockerd) up(t *testing.T) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := dockerClient(t).Ping(ctx)
	return err == nil
}

// stop stops the engine and waits until it is gone.
func (d *dockerd) stop(t *testing.T) {
	t.Helper()
	if d.systemd {
		if out, err := exec.Command("systemctl", "stop", "docker.socket", "docker.service").CombinedOutput(); err != nil {
			t.Fatalf("systemctl stop docker: %v\n%s", err, out)
		}
	} else {
		if err := syscall.Kill(d.pid, syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM dockerd %d: %v", d.pid, err)
		}
		waitUntil(t, dockerdWait, "dockerd to exit", func() bool { return exited(d.pid) })
	}
	waitUntil(t, dockerdWait, "the Docker engine to stop answering", func() bool { return !d.up(t) })
}

// start starts the engine again and waits until it answers.
func (d *dockerd) start(t *testing.T) {
	t.Helper()
	if d.systemd {
		if out, err := exec.Command("systemctl", "start", "docker.service").CombinedOutput(); err != nil {
			t.Fatalf("systemctl start docker: %v\n%s", err, out)
		}
	} else {
		log, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close() // dockerd has its own descriptor
		cmd := exec.Command(d.args[0], d.args[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives the test, like setup.sh's
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %v: %v", d.args, err)
		}
		d.pid = cmd.Process.Pid
		go cmd.Wait() // reaps it if it ends before the tests do
	}
	waitUntil(t, dockerdWait, "the Docker engine to answer", func() bool { return d.up(t) })
}

// ensureUp starts the engine if a failed test left it stopped.
func (d *dockerd) ensureUp(t *testing.T) {
	if !d.up(t) {
		t.Log("the Docker engine is down; starting it again")
		d.start(t)
	}
}

// exited reports whether a process has ended: it is gone, or a zombie
// that its parent (perhaps another test process) has not reaped yet.
func exited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return err == nil && i >= 0 && strings.HasPrefix(string(stat[i+1:]), " Z")
}

// lockDockerdRestarts keeps two test runs on one machine from restarting
// the engine at the same time; the lock goes with the test.
func lockDockerdRestarts(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sandboxd-e2e-dockerd-restart.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock %s: %v", f.Name(), err)
	}
}
