//go:build e2e

package e2e

import (
	"bufio"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReliabilityGracefulShutdown sends SIGTERM while a command streams:
// the stream completes, sandboxd exits 0, the sandbox keeps running, and a
// restart adopts it as it was.
func TestReliabilityGracefulShutdown(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	runCommand(t, s, sb.ID, "true")
	before := getSandbox(t, s, "/v1", sb.ID)

	cs := startCommand(t, s, sb.ID, map[string]any{"command": "sleep 3; echo done"})
	cs.until(t, "init")
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM sandboxd: %v", err)
	}
	run := drain(t, cs)
	if !slices.Equal(run.Stdout, []string{"done"}) || run.last().Type != "execution_complete" {
		t.Errorf("the in-flight command after SIGTERM: stdout %q, last event %q; want [done] and execution_complete", run.Stdout, run.last().Type)
	}
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		t.Fatalf("sandboxd still runs %s after SIGTERM", stopTimeout)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("sandboxd exited with %d after SIGTERM, want 0", code)
	}
	if !sandboxContainer(t, sb.ID).State.Running {
		t.Error("the sandbox's container stopped with sandboxd")
	}

	s.Restart()
	after := getSandbox(t, s, "/v1", sb.ID)
	if after.Status.State != "Running" || after.ExpiresAt != before.ExpiresAt || after.CreatedAt != before.CreatedAt {
		t.Errorf("after the restart: %+v, want it as before: %+v", after, before)
	}
	if got := runCommand(t, s, sb.ID, "echo again"); got != "again" {
		t.Errorf("command after the restart: %q", got)
	}
}

// TestReliabilityOperability checks what an operator watches: /health,
// the Prometheus metrics and their counts, and log lines that name the
// sandbox and the request they are about.
func TestReliabilityOperability(t *testing.T) {
	t.Parallel()
	s := startServer(t)

	status, _, body := s.do(t, http.MethodGet, "/health", nil, map[string]string{apiKeyHeader: ""})
	if status != http.StatusOK || decodeJSON[map[string]string](t, body)["status"] != "healthy" {
		t.Errorf("GET /health: %d %s, want 200 healthy", status, body)
	}
	status, _, body = s.do(t, http.MethodGet, "/metrics", nil, map[string]string{apiKeyHeader: ""})
	wantError(t, "GET /metrics without a key", status, body, http.StatusUnauthorized, "MISSING_API_KEY")
	status, _, body = s.do(t, http.MethodGet, "/metrics", nil, map[string]string{apiKeyHeader: "", "Authorization": "Bearer " + s.APIKey})
	if status != http.StatusOK {
		t.Errorf("GET /metrics with a bearer token: %d %s", status, body)
	}

	m0 := scrapeMetrics(t, s)
	for _, name := range []string{
		"sandboxd_creates_total", "sandboxd_create_failures_total", "sandboxd_deletes_total",
		`sandboxd_reaped_total{reason="expired"}`, `sandboxd_reaped_total{reason="idle"}`, "sandboxd_reaper_runs_total",
		`sandboxd_create_seconds_bucket{le="+Inf"}`, "sandboxd_create_seconds_sum", "sandboxd_create_seconds_count",
		`sandboxd_command_seconds_bucket{le="+Inf"}`, "sandboxd_command_seconds_sum", "sandboxd_command_seconds_count",
		"go_goroutines", "process_open_fds", "process_resident_memory_bytes",
	} {
		metric(t, m0, name)
	}

	// Requests with ids of our own, to find their log lines.
	reqID := func(what string) string { return "e2e-" + what + "-" + randomHex(t, 4) }
	createID, renewID, deleteID := reqID("create"), reqID("renew"), reqID("delete")
	status, _, body = s.do(t, http.MethodPost, "/v1/sandboxes", busyboxRequest(), map[string]string{"X-Request-ID": createID})
	if status != http.StatusAccepted {
		t.Fatalf("create: %d %s", status, body)
	}
	sb := decodeJSON[lcSandbox](t, body)
	kept := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	missing := busyboxWith(map[string]any{"image": map[string]string{"uri": "sandboxd-test/does-not-exist-" + randomHex(t, 4) + ":latest"}})
	doError(t, s, http.MethodPost, "/v1/sandboxes", missing, http.StatusInternalServerError, "DOCKER::SANDBOX_IMAGE_PULL_FAILED")
	runCommand(t, s, sb.ID, "true")
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	if status, _, body := s.do(t, http.MethodPost, sandboxPath(sb.ID, "/renew-expiration"), map[string]string{"expiresAt": at}, map[string]string{"X-Request-ID": renewID}); status != http.StatusOK {
		t.Fatalf("renew: %d %s", status, body)
	}
	if status, _, body := s.do(t, http.MethodDelete, sandboxPath(sb.ID), nil, map[string]string{"X-Request-ID": deleteID}); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}

	m1 := scrapeMetrics(t, s)
	for name, want := range map[string]float64{
		"sandboxd_creates_total":         2,
		"sandboxd_create_seconds_count":  2,
		"sandboxd_create_failures_total": 1,
		"sandboxd_deletes_total":         1,
		"sandboxd_command_seconds_count": 1,
	} {
		if got := metric(t, m1, name) - metric(t, m0, name); got != want {
			t.Errorf("%s went up by %v, want %v", name, got, want)
		}
	}
	if got := m1[`sandboxd_sandboxes{state="Running"}`]; got != 1 {
		t.Errorf(`sandboxd_sandboxes{state="Running"} = %v, want 1 (%s)`, got, kept.ID)
	}
	runs := metric(t, m1, "sandboxd_reaper_runs_total")
	waitUntil(t, stateWait, "the reaper to run", func() bool {
		return metric(t, scrapeMetrics(t, s), "sandboxd_reaper_runs_total") > runs
	})

	// Every line about the sandbox names it; those written while serving
	// a request name that request.
	lines := logLines(t, s, sb.ID)
	for _, l := range lines {
		if !strings.Contains(l, "sandbox_id="+sb.ID) {
			t.Errorf("log line about %s without sandbox_id: %s", sb.ID, l)
		}
	}
	for msg, id := range map[string]string{`msg="sandbox created"`: createID, `msg="sandbox renewed"`: renewID, `msg="sandbox deleted"`: deleteID} {
		found := false
		for _, l := range lines {
			if strings.Contains(l, msg) {
				found = true
				if !strings.Contains(l, "request_id="+id) {
					t.Errorf("log line without the id of its request (%s): %s", id, l)
				}
			}
		}
		if !found {
			t.Errorf("no log line %s for sandbox %s", msg, sb.ID)
		}
	}
}

// logLines returns the lines of a server's log that mention s.
func logLines(t *testing.T, s *Server, sub string) []string {
	t.Helper()
	f, err := os.Open(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			out = append(out, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
