//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
)

// TestReliabilityCrashRestart kills sandboxd with SIGKILL while it holds
// 20 sandboxes in every situation (renewed, paused, patched metadata,
// about to expire, running a background command, no expiry) and while a
// burst of creates is in flight, then starts it again on the same store:
// every survivor comes back as it was, the sandbox caught half-created is
// removed, the expired ones are reaped, no container of the instance is
// left without a sandbox, and the TypeScript SDK reconnects to the
// survivors.
func TestReliabilityCrashRestart(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	suite := "crash-" + randomHex(t, 4)

	// Roles by index; the rest are plain running sandboxes.
	role := func(i int) string {
		switch {
		case i < 4:
			return "renewed"
		case i < 7:
			return "paused"
		case i < 10:
			return "patched"
		case i == 10:
			return "background"
		case i < 13:
			return "expiring"
		case i == 13:
			return "manual"
		}
		return "plain"
	}
	const total = 20
	var reqs []map[string]any
	for i := range total {
		fields := map[string]any{"metadata": map[string]string{"suite": suite, "role": role(i), "n": fmt.Sprint(i)}}
		if role(i) == "manual" {
			fields["timeout"] = nil
		}
		reqs = append(reqs, busyboxWith(fields))
	}
	all := createMany(t, s, reqs)
	byRole := map[string][]string{}
	for i, sb := range all {
		byRole[role(i)] = append(byRole[role(i)], sb.ID)
	}

	for i, id := range byRole["renewed"] {
		at := time.Now().Add(time.Duration(40+i) * time.Minute).UTC().Format(time.RFC3339Nano)
		s.doJSON(t, http.MethodPost, sandboxPath(id, "/renew-expiration"), map[string]string{"expiresAt": at}, http.StatusOK, nil)
	}
	for i, id := range byRole["patched"] {
		s.doJSON(t, http.MethodPatch, sandboxPath(id, "/metadata"), map[string]any{"patched": fmt.Sprint(i), "n": nil}, http.StatusOK, nil)
	}
	for _, id := range byRole["paused"] {
		s.doJSON(t, http.MethodPost, sandboxPath(id, "/pause"), nil, http.StatusAccepted, nil)
	}
	bg := byRole["background"][0]
	bgCmd := startCommand(t, s, bg, map[string]any{"command": "sleep 300", "background": true}).until(t, "init").Text
	waitUntil(t, stateWait, "the background command to run", func() bool { return hasProcess(t, bg, "sleep 300") })

	before := map[string]lcSandbox{}
	for i, sb := range all {
		switch role(i) {
		case "expiring":
		case "paused":
			before[sb.ID] = waitState(t, s, sb.ID, "Paused")
		default:
			before[sb.ID] = waitState(t, s, sb.ID, "Running")
		}
	}
	// Two sandboxes expire while sandboxd is down: they are renewed to
	// expire shortly after each burst of creates starts (a burst takes
	// seconds, more on a loaded machine), so after the crash and before
	// the restart.
	var expireAt time.Time
	renewExpiring := func() {
		expireAt = time.Now().Add(30 * time.Second).UTC()
		for _, id := range byRole["expiring"] {
			s.doJSON(t, http.MethodPost, sandboxPath(id, "/renew-expiration"), map[string]string{"expiresAt": expireAt.Format(time.RFC3339Nano)}, http.StatusOK, nil)
		}
	}

	half, acked := crashMidCreate(t, s, suite, renewExpiring)
	t.Logf("killed sandboxd with sandbox %s half-created; %d creates of the burst had been answered", half, len(acked))
	if !time.Now().Before(expireAt) {
		t.Fatalf("the crash came after %s, when the old server could already reap: the burst took too long", expireAt.Format(time.RFC3339Nano))
	}
	time.Sleep(time.Until(expireAt) + time.Second)
	s.Restart()

	// Reconciling runs after the server answers /health.
	for what, id := range map[string]string{
		"the half-created sandbox": half,
		"an expired sandbox":       byRole["expiring"][0],
		"another expired sandbox":  byRole["expiring"][1],
	} {
		waitUntil(t, reapSlack, what+" ("+id+") to be removed", func() bool {
			status, _, _ := s.do(t, http.MethodGet, sandboxPath(id), nil, nil)
			return status == http.StatusNotFound && len(containersByLabel(t, labelID, id)) == 0
		})
		assertGone(t, s, id)
	}
	if n := metric(t, scrapeMetrics(t, s), `sandboxd_reaped_total{reason="expired"}`); n < 2 {
		t.Errorf("the restarted server counts %v sandboxes reaped for expiry, want at least the 2 that expired while it was down", n)
	}

	for id, want := range before {
		got := getSandbox(t, s, "/v1", id)
		if got.Status.State != want.Status.State || got.ExpiresAt != want.ExpiresAt || got.CreatedAt != want.CreatedAt ||
			!maps.Equal(got.Metadata, want.Metadata) || !slices.Equal(got.Entrypoint, want.Entrypoint) {
			t.Errorf("sandbox %s (%s) after the restart:\n got %+v\nwant %+v", id, want.Metadata["role"], got, want)
		}
	}

	// Once reconciled, no sandbox is half-created any more, every
	// container of the instance belongs to a listed sandbox, and every
	// create that was answered before the crash is still there.
	var listed map[string]string
	waitUntil(t, reapSlack, "no sandbox to be half-created", func() bool {
		listed = map[string]string{}
		for page := 1; ; page++ {
			l := listSandboxes(t, s, "/v1", fmt.Sprintf("pageSize=200&page=%d", page))
			for _, sb := range l.Items {
				listed[sb.ID] = sb.Status.State
			}
			if !l.Pagination.HasNextPage {
				break
			}
		}
		return !slices.Contains(slices.Collect(maps.Values(listed)), "Pending")
	})
	for _, c := range containersByLabel(t, labelInstance, s.InstanceID) {
		if id := c.Labels[labelID]; listed[id] == "" {
			t.Errorf("container %s (sandbox %s, %s) of the instance has no listed sandbox", c.ID[:12], id, c.State)
		}
	}
	for _, id := range acked {
		if listed[id] != "Running" {
			t.Errorf("sandbox %s, created before the crash, is %q after it, want Running", id, listed[id])
		}
	}

	// The background command outlives sandboxd, and the agent, whose
	// state lives in a daemon in the sandbox, still reports it.
	if !hasProcess(t, bg, "sleep 300") {
		t.Errorf("the background command died with sandboxd")
	}
	var st struct {
		Running bool `json:"running"`
	}
	s.doJSON(t, http.MethodGet, proxyPath(bg, "/command/status/"+bgCmd), nil, http.StatusOK, &st)
	if !st.Running {
		t.Errorf("the background command is not reported running after the restart")
	}
	runCommand(t, s, bg, "true")

	// One running survivor of each kind is enough for the SDK.
	connect := []string{byRole["renewed"][0], byRole["patched"][0], byRole["manual"][0], byRole["background"][0], byRole["plain"][0]}
	s.runNode(t, "lifecycle_connect.test.mjs", map[string]string{"SANDBOXD_SANDBOX_IDS": strings.Join(connect, ",")})

	paused := byRole["paused"][0]
	s.doJSON(t, http.MethodPost, sandboxPath(paused, "/resume"), nil, http.StatusAccepted, nil)
	if got := runCommand(t, s, paused, "echo resumed"); got != "resumed" {
		t.Errorf("command in the resumed sandbox: %q", got)
	}
}

// crashMidCreate sends bursts of concurrent creates, each after a call of
// before, until it sees a sandbox container that Docker has created but
// not yet started; it then stops sandboxd (SIGSTOP), checks that the
// container is still not started, so that sandboxd cannot have recorded
// it as ready, and kills it (SIGKILL). It returns that sandbox's id and
// the ids of the creates that had been answered.
func crashMidCreate(t *testing.T, s *Server, suite string, before func()) (half string, acked []string) {
	t.Helper()
	const burst, bursts = 6, 10
	for range bursts {
		before()
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			done = make(chan struct{})
		)
		ctx, cancel := context.WithCancel(context.Background())
		for range burst {
			wg.Go(func() {
				sb, err := tryCreate(ctx, s.client, s, busyboxWith(map[string]any{"metadata": map[string]string{"suite": suite, "role": "burst"}}))
				if err != nil {
					return // the crash cut it off
				}
				mu.Lock()
				acked = append(acked, sb.ID)
				mu.Unlock()
			})
		}
		go func() { wg.Wait(); close(done) }()
		half = catchCreated(t, s, done)
		if half != "" {
			s.Kill9()
		}
		<-done
		cancel()
		if half != "" {
			return half, acked
		}
	}
	t.Fatalf("no container seen between create and start in %d bursts of %d creates", bursts, burst)
	return "", nil
}

// catchCreated polls Docker until a container of the instance is in state
// "created" and leaves sandboxd stopped (SIGSTOP) if that is still so once
// it is stopped; it returns that sandbox's id, or "" when done closes.
func catchCreated(t *testing.T, s *Server, done <-chan struct{}) string {
	t.Helper()
	for {
		select {
		case <-done:
			return ""
		default:
		}
		for _, c := range containersByLabel(t, labelInstance, s.InstanceID) {
			if c.State != "created" {
				continue
			}
			if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatalf("SIGSTOP sandboxd: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
			info, err := dockerClient(t).ContainerInspect(ctx, c.ID)
			cancel()
			if err == nil && info.State.Status == "created" {
				return c.Labels[labelID]
			}
			if err != nil && !cerrdefs.IsNotFound(err) { // a failed create removes its container
				t.Fatalf("inspect container %s: %v", c.ID, err)
			}
			if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatalf("SIGCONT sandboxd: %v", err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}
