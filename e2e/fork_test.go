//go:build e2e

package e2e

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// forkOp is a fork task as GET /v1/forks/{id} shows it.
type forkOp struct {
	ID              string `json:"id"`
	SourceSandboxID string `json:"sourceSandboxId"`
	Status          struct {
		State   string `json:"state"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"status"`
	SnapshotID     string   `json:"snapshotId"`
	SandboxID      string   `json:"sandboxId"`
	SandboxIDs     []string `json:"sandboxIds"`
	Count          int      `json:"count"`
	CreatedAt      string   `json:"createdAt"`
	UpdatedAt      string   `json:"updatedAt"`
	CleanupPending bool     `json:"cleanupPending"`
}

// postFork asks for a fork of src and expects a 202.
func postFork(t testing.TB, s *Server, src string, body any, headers map[string]string) forkOp {
	t.Helper()
	status, hdr, data := s.do(t, http.MethodPost, sandboxPath(src, "/fork"), body, headers)
	if status != http.StatusAccepted {
		t.Fatalf("fork %s: status %d, want 202; body %s", src, status, data)
	}
	assertNoNulls(t, "fork", data)
	op := decodeJSON[forkOp](t, data)
	if loc := hdr.Get("Location"); loc != "/v1/forks/"+op.ID {
		t.Errorf("fork: Location %q, want /v1/forks/%s", loc, op.ID)
	}
	return op
}

// waitFork polls a fork task until it has settled (and cleaned up), and
// returns it with the states it was seen in.
func waitFork(t testing.TB, s *Server, id string) (forkOp, []string) {
	t.Helper()
	var op forkOp
	var seen []string
	waitUntil(t, 2*stateWait, "fork "+id+" to settle", func() bool {
		op = decodeJSON[forkOp](t, getBody(t, s, "/v1/forks/"+id))
		if len(seen) == 0 || seen[len(seen)-1] != op.Status.State {
			seen = append(seen, op.Status.State)
		}
		return (op.Status.State == "Succeeded" || op.Status.State == "Failed") && !op.CleanupPending
	})
	if op.SnapshotID != "" {
		removeImageAtEnd(t, "opensandbox-snapshots:"+op.SnapshotID)
	}
	return op, seen
}

// TestFork forks a sandbox that has files and a running process into three:
// each has the files and the request's overrides, works on its own (a
// write in one is seen in no other, nor in the source), and the source runs
// on, its process alive. The same idempotency key gives the same task; a
// fork without overrides inherits the source's metadata and limits but
// never its create-time env.
func TestFork(t *testing.T) {
	s := startServer(t)
	src := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
		"env":            map[string]string{"SECRET": "source-secret"},
		"metadata":       map[string]string{"team": "source"},
		"resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"},
	}))
	uploadFile(t, s, src.ID, "/data/base.txt", "prepared state")
	runCommand(t, s, src.ID, "mkdir -p /data; dd if=/dev/urandom of=/data/blob bs=1M count=8 2>/dev/null; md5sum /data/blob > /data/blob.md5")
	s.doJSON(t, http.MethodPost, proxyPath(src.ID, "/command"), map[string]any{
		"command": "while true; do date +%s%N >> /tmp/ticks; sleep 0.05; done", "background": true,
	}, http.StatusOK, nil)

	body := map[string]any{"timeout": 600, "overrides": map[string]any{
		"env":            map[string]string{"ROLE": "fork"},
		"metadata":       map[string]string{"team": "forks"},
		"resourceLimits": map[string]string{"cpu": "500m", "memory": "256Mi"},
	}}
	headers := map[string]string{"Idempotency-Key": "fork-" + src.ID, "Sandboxd-Fork-Count": "3"}
	op := postFork(t, s, src.ID, body, headers)
	if op.SourceSandboxID != src.ID || op.Count != 3 || op.SandboxID != "" || len(op.SandboxIDs) != 0 || op.CleanupPending {
		t.Errorf("202 body %+v, want source %s, count 3, no sandboxId yet", op, src.ID)
	}
	parseUTC(t, "fork createdAt", op.CreatedAt)

	t.Run("idempotency", func(t *testing.T) {
		if again := postFork(t, s, src.ID, body, headers); again.ID != op.ID {
			t.Errorf("same key and body: task %s, want %s", again.ID, op.ID)
		}
		other := map[string]any{"timeout": 700}
		doErrorH(t, s, sandboxPath(src.ID, "/fork"), other, headers, http.StatusConflict, "FORK::IDEMPOTENCY_CONFLICT")
		doErrorH(t, s, sandboxPath(src.ID, "/fork"), body, map[string]string{"Idempotency-Key": headers["Idempotency-Key"]}, http.StatusConflict, "FORK::IDEMPOTENCY_CONFLICT")
	})

	op, seen := waitFork(t, s, op.ID)
	if op.Status.State != "Succeeded" {
		t.Fatalf("fork settled %+v (states seen %v), want Succeeded", op, seen)
	}
	if len(op.SandboxIDs) != 3 || op.SandboxID != op.SandboxIDs[0] || op.SnapshotID == "" {
		t.Fatalf("succeeded fork %+v: want 3 sandboxIds, sandboxId the first, a snapshotId", op)
	}
	for _, st := range seen {
		if !slices.Contains([]string{"Pending", "Snapshotting", "Provisioning", "Succeeded"}, st) {
			t.Errorf("fork went through state %q (seen %v)", st, seen)
		}
	}
	snap := decodeJSON[lcSnapshot](t, getBody(t, s, "/v1/snapshots/"+op.SnapshotID))
	if snap.Status.State != "Ready" || snap.SandboxID != src.ID {
		t.Errorf("the fork's snapshot %+v, want Ready, of %s", snap, src.ID)
	}

	wantMD5 := runCommand(t, s, src.ID, "cat /data/blob.md5")
	for _, id := range op.SandboxIDs {
		sb := getSandbox(t, s, "/v1", id)
		if sb.Status.State != "Running" || sb.Metadata["team"] != "forks" || sb.SnapshotID != op.SnapshotID {
			t.Errorf("fork %s: %+v, want Running, metadata team=forks, snapshotId %s", id, sb, op.SnapshotID)
		}
		exp := parseUTC(t, "fork expiresAt", sb.ExpiresAt)
		if d := time.Until(exp); d < 500*time.Second || d > 610*time.Second {
			t.Errorf("fork %s expires in %s, want about 600 s", id, d)
		}
		if got := runCommand(t, s, id, "cat /data/base.txt; echo; md5sum -c /data/blob.md5 >/dev/null && echo intact; echo ${ROLE}-${SECRET:-none}"); got != "prepared state\nintact\nfork-none" {
			t.Errorf("fork %s: files and env %q, want the source's files, ROLE=fork, no SECRET", id, got)
		}
		if got := runCommand(t, s, id, "cat /data/blob.md5"); got != wantMD5 {
			t.Errorf("fork %s: blob.md5 %q, want %q", id, got, wantMD5)
		}
		hc := sandboxContainer(t, id).HostConfig
		if hc.NanoCPUs != 5e8 || hc.Memory != 256<<20 {
			t.Errorf("fork %s: cpu %d memory %d, want the overrides 0.5 CPU and 256Mi", id, hc.NanoCPUs, hc.Memory)
		}
		runCommand(t, s, id, "echo "+id+" > /data/own.txt")
	}
	for _, id := range append([]string{src.ID}, op.SandboxIDs...) {
		got := runCommand(t, s, id, "cat /data/own.txt 2>/dev/null || echo none")
		if want := "none"; id != src.ID && slices.Contains(op.SandboxIDs, id) {
			want = id
			if got != want {
				t.Errorf("%s: own.txt %q, want only its own write %q", id, got, want)
			}
		} else if got != want {
			t.Errorf("source: own.txt %q, want none (forks' writes stay in the forks)", got)
		}
	}

	t.Run("source runs on", func(t *testing.T) {
		if st := getSandbox(t, s, "/v1", src.ID).Status.State; st != "Running" {
			t.Fatalf("source is %s after the fork, want Running", st)
		}
		before := runCommand(t, s, src.ID, "wc -l < /tmp/ticks")
		time.Sleep(300 * time.Millisecond)
		after := runCommand(t, s, src.ID, "wc -l < /tmp/ticks")
		b, _ := strconv.Atoi(strings.TrimSpace(before))
		a, _ := strconv.Atoi(strings.TrimSpace(after))
		if a <= b {
			t.Errorf("the source's process stopped: %d ticks, then %d", b, a)
		}
		for _, id := range op.SandboxIDs {
			if got := runCommand(t, s, id, "ps | grep -c '[d]ate +%s' || true"); got != "0" {
				t.Errorf("fork %s runs the source's process (%s): a fork copies files, not processes", id, got)
			}
		}
	})

	t.Run("list", func(t *testing.T) {
		for _, id := range []string{src.ID, op.SandboxIDs[1]} {
			l := decodeJSON[struct {
				Items []forkOp `json:"items"`
			}](t, getBody(t, s, "/v1/forks?sandboxId="+id))
			if len(l.Items) != 1 || l.Items[0].ID != op.ID {
				t.Errorf("forks of %s: %+v, want just %s", id, l.Items, op.ID)
			}
		}
	})

	t.Run("inherits", func(t *testing.T) {
		plain := postFork(t, s, src.ID, map[string]any{"timeout": 600}, nil)
		plain, seen := waitFork(t, s, plain.ID)
		if plain.Status.State != "Succeeded" || len(plain.SandboxIDs) != 1 {
			t.Fatalf("fork without overrides: %+v (seen %v), want Succeeded with one sandbox", plain, seen)
		}
		id := plain.SandboxID
		if md := getSandbox(t, s, "/v1", id).Metadata; !maps.Equal(md, map[string]string{"team": "source"}) {
			t.Errorf("inherited metadata %v, want the source's", md)
		}
		if hc := sandboxContainer(t, id).HostConfig; hc.NanoCPUs != 1e9 || hc.Memory != 512<<20 {
			t.Errorf("inherited limits: cpu %d memory %d, want the source's 1 CPU and 512Mi", hc.NanoCPUs, hc.Memory)
		}
		if got := runCommand(t, s, id, "echo ${SECRET:-none}"); got != "none" {
			t.Errorf("a fork without env overrides has SECRET=%q: the source's create-time env must stay with it", got)
		}
	})
}

// doErrorH is doError with request headers.
func doErrorH(t testing.TB, s *Server, path string, body any, headers map[string]string, wantStatus int, code string) {
	t.Helper()
	status, _, data := s.do(t, http.MethodPost, path, body, headers)
	if status != wantStatus {
		t.Fatalf("POST %s: status %d, want %d; body %s", path, status, wantStatus, data)
	}
	e := decodeJSON[struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}](t, data)
	if (code != "" && e.Code != code) || e.Message == "" {
		t.Errorf("POST %s: error %s, want code %q and a message", path, data, code)
	}
}

// TestForkErrors: what upstream refuses before a task exists is refused
// with its status and code, and sandboxd's caps hold.
func TestForkErrors(t *testing.T) {
	s := startServer(t)
	src := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	path := sandboxPath(src.ID, "/fork")
	ok := map[string]any{"timeout": 600}
	unknown := "00000000-0000-4000-8000-000000000000"
	for _, tc := range []struct {
		name    string
		path    string
		body    any
		headers map[string]string
		status  int
		code    string
	}{
		{"unknown source", sandboxPath(unknown, "/fork"), ok, nil, 404, "DOCKER::SANDBOX_NOT_FOUND"},
		{"no body", path, nil, nil, 422, ""},
		{"no timeout", path, map[string]any{}, nil, 422, ""},
		{"null timeout", path, map[string]any{"timeout": nil}, nil, 422, ""},
		{"short timeout", path, map[string]any{"timeout": 59}, nil, 422, ""},
		{"timeout not a number", path, map[string]any{"timeout": "soon"}, nil, 422, ""},
		{"count in the body", path, map[string]any{"timeout": 600, "count": 3}, nil, 422, ""},
		{"null overrides", path, map[string]any{"timeout": 600, "overrides": nil}, nil, 422, ""},
		{"null override", path, map[string]any{"timeout": 600, "overrides": map[string]any{"env": nil}}, nil, 422, ""},
		{"unknown override", path, map[string]any{"timeout": 600, "overrides": map[string]any{"image": "x"}}, nil, 422, ""},
		{"empty entrypoint", path, map[string]any{"timeout": 600, "overrides": map[string]any{"entrypoint": []string{}}}, nil, 422, ""},
		{"bad cpu", path, map[string]any{"timeout": 600, "overrides": map[string]any{"resourceLimits": map[string]string{"cpu": "lots"}}}, nil, 400, "FORK::INVALID_REQUEST"},
		{"bad metadata", path, map[string]any{"timeout": 600, "overrides": map[string]any{"metadata": map[string]string{"bad key!": "x"}}}, nil, 400, "FORK::INVALID_REQUEST"},
		{"bad env", path, map[string]any{"timeout": 600, "overrides": map[string]any{"env": map[string]string{"A=B": "x"}}}, nil, 400, "FORK::INVALID_REQUEST"},
		{"blank key", path, ok, map[string]string{"Idempotency-Key": " "}, 400, "FORK::INVALID_REQUEST"},
		{"long key", path, ok, map[string]string{"Idempotency-Key": strings.Repeat("k", 257)}, 400, "FORK::INVALID_REQUEST"},
		{"count 0", path, ok, map[string]string{"Sandboxd-Fork-Count": "0"}, 400, "FORK::INVALID_REQUEST"},
		{"count over the cap", path, ok, map[string]string{"Sandboxd-Fork-Count": "11"}, 400, "FORK::INVALID_REQUEST"},
		{"count not a number", path, ok, map[string]string{"Sandboxd-Fork-Count": "many"}, 400, "FORK::INVALID_REQUEST"},
	} {
		t.Run(tc.name, func(t *testing.T) { doErrorH(t, s, tc.path, tc.body, tc.headers, tc.status, tc.code) })
	}
	doError(t, s, http.MethodGet, "/v1/forks/"+unknown, nil, http.StatusNotFound, "FORK::NOT_FOUND")
	doError(t, s, http.MethodGet, "/forks/"+unknown, nil, http.StatusNotFound, "FORK::NOT_FOUND")
	if l := getBody(t, s, "/v1/forks"); !strings.Contains(string(l), `"items":[]`) {
		t.Errorf("no fork was made, yet the list is %s", l)
	}

	t.Run("paused source", func(t *testing.T) {
		wantEmpty(t, s, http.MethodPost, sandboxPath(src.ID, "/pause"), http.StatusAccepted)
		doErrorH(t, s, path, ok, nil, http.StatusConflict, "FORK::INVALID_SOURCE_STATE")
		wantEmpty(t, s, http.MethodPost, sandboxPath(src.ID, "/resume"), http.StatusAccepted)
	})
	t.Run("volumes", func(t *testing.T) {
		claim := "fork-" + randomHex(t, 4)
		withVol := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"volumes": []any{
			map[string]any{"name": "v", "pvc": map[string]any{"claimName": claim, "deleteOnSandboxTermination": true}, "mountPath": "/mnt/v"},
		}}))
		doErrorH(t, s, sandboxPath(withVol.ID, "/fork"), ok, nil, http.StatusConflict, "FORK::VOLUMES_UNSUPPORTED")
		wantEmpty(t, s, http.MethodDelete, sandboxPath(withVol.ID), http.StatusNoContent)
	})
}

// TestForkRestart kills sandboxd (SIGKILL) while a fork of three is in
// progress, once while it snapshots and once while it makes the
// sandboxes: after the restart the task is resumed from where it was and
// succeeds, its snapshot and sandboxes made once, none left half-made.
func TestForkRestart(t *testing.T) {
	for _, at := range []string{"Snapshotting", "Provisioning"} {
		t.Run(at, func(t *testing.T) { forkRestart(t, at) })
	}
}

func forkRestart(t *testing.T, killAt string) {
	s := startServer(t)
	src := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	runCommand(t, s, src.ID, "mkdir -p /data; dd if=/dev/urandom of=/data/blob bs=1M count=100 2>/dev/null; md5sum /data/blob > /data/blob.md5")
	op := postFork(t, s, src.ID, map[string]any{"timeout": 600}, map[string]string{"Sandboxd-Fork-Count": "3"})
	var at forkOp
	waitUntil(t, stateWait, "the fork to reach "+killAt, func() bool {
		at = decodeJSON[forkOp](t, getBody(t, s, "/v1/forks/"+op.ID))
		if at.Status.State == "Succeeded" || at.Status.State == "Failed" {
			t.Fatalf("the fork settled before it could be interrupted at %s: %+v", killAt, at)
		}
		return at.Status.State == killAt
	})
	s.Kill9()
	t.Logf("killed sandboxd with the fork %s, %d of 3 made", at.Status.State, len(at.SandboxIDs))
	s.Restart()

	op, seen := waitFork(t, s, op.ID)
	if op.Status.State != "Succeeded" || len(op.SandboxIDs) != 3 {
		t.Fatalf("after the restart the fork settled %+v (seen %v), want Succeeded with 3 sandboxes", op, seen)
	}
	for _, id := range at.SandboxIDs {
		if !slices.Contains(op.SandboxIDs, id) {
			t.Errorf("sandbox %s, made before the kill, was replaced: now %v", id, op.SandboxIDs)
		}
	}
	want := runCommand(t, s, src.ID, "cat /data/blob.md5")
	for _, id := range op.SandboxIDs {
		if got := runCommand(t, s, id, "md5sum -c /data/blob.md5 >/dev/null && cat /data/blob.md5"); got != want {
			t.Errorf("fork %s: blob %q, want %q", id, got, want)
		}
	}
	// Made once: the instance has the source and the three forks, no more.
	waitUntil(t, stateWait, "half-made containers to be removed", func() bool {
		n := 0
		for _, c := range containersByLabel(t, labelInstance, s.InstanceID) {
			if !strings.HasSuffix(c.Names[0], "-egress") {
				n++
			}
		}
		return n == 4
	})
	if l := listSandboxes(t, s, "/v1", "pageSize=50"); len(l.Items) != 4 {
		t.Errorf("%d sandboxes listed, want 4 (the source and 3 forks)", len(l.Items))
	}
}
