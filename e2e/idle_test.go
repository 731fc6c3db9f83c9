//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// Idle timeout and renew on access (README "Expiry, idle timeout and
// renewal"). Each test runs its own server with a short [lifecycle]
// idle_timeout and in parallel, so the waits overlap. Reaping is only
// checked one way: a sandbox seen gone before its deadline (or before its
// work could have ended) fails the test; how late after it the reaper
// comes is bounded by reapSlack only.

// idleTimeout is the server's idle timeout in most tests here.
const idleTimeout = 8 * time.Second

// startIdleServer starts a server with the given [lifecycle] idle_timeout.
func startIdleServer(t *testing.T, idle time.Duration) *Server {
	t.Helper()
	return startServer(t, withTOML(fmt.Sprintf("[lifecycle]\nidle_timeout = %q", idle.String())))
}

// newIdleBox creates a busybox sandbox (fields as in busyboxWith) and
// resolves its execd endpoint; the box's requests carry the endpoint's
// token, as an SDK's would. The sandbox is left to the reaper.
func newIdleBox(t *testing.T, s *Server, fields map[string]any) (lcSandbox, *execdBox) {
	t.Helper()
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(fields))
	var ep lcEndpoint
	s.doJSON(t, http.MethodGet, sandboxPath(sb.ID, "/endpoints/"+execdPort), nil, http.StatusOK, &ep)
	if ep.Headers[execdTokenHeader] == "" {
		t.Fatalf("execd endpoint of %s has no %s header: %v", sb.ID, execdTokenHeader, ep.Headers)
	}
	return sb, &execdBox{s: s, ID: sb.ID, Headers: ep.Headers}
}

// expiresAt GETs a sandbox and returns its expiresAt, which it must have.
func expiresAt(t *testing.T, s *Server, id string) time.Time {
	t.Helper()
	sb := getSandbox(t, s, "/v1", id)
	if sb.ExpiresAt == "" {
		t.Fatalf("sandbox %s has no expiresAt", id)
	}
	return parseUTC(t, "expiresAt of "+id, sb.ExpiresAt)
}

// waitIdleReaped polls until the sandbox is gone, checking on every poll
// that expiresAt stays at want (and GETting the housekeeping paths, none of
// which may move it). A sandbox seen gone before want was reaped early.
// Docker must have lost its container too.
func waitIdleReaped(t *testing.T, s *Server, id string, want time.Time, housekeeping ...string) {
	t.Helper()
	waitUntil(t, time.Until(want)+reapSlack, "sandbox "+id+" to be reaped", func() bool {
		status, _, body := s.do(t, http.MethodGet, sandboxPath(id), nil, nil)
		switch status {
		case http.StatusNotFound:
			return true
		case http.StatusOK:
		default:
			t.Fatalf("GET sandbox %s: status %d; body %s", id, status, body)
		}
		if got := parseUTC(t, "expiresAt", decodeJSON[lcSandbox](t, body).ExpiresAt); !got.Equal(want) {
			t.Fatalf("sandbox %s: expiresAt moved from %s to %s with no activity", id, want, got)
		}
		for _, p := range housekeeping {
			if status, _, body := s.do(t, http.MethodGet, p, nil, nil); status != http.StatusOK && status != http.StatusNotFound {
				t.Fatalf("GET %s: status %d; body %s", p, status, body)
			}
		}
		return false
	})
	if now := time.Now(); now.Before(want) {
		t.Errorf("sandbox %s reaped before its expiresAt %s (seen gone at %s)", id, want.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	assertGone(t, s, id)
}

// echo runs a short command in the sandbox through its execd endpoint.
func (b *execdBox) echo(t *testing.T) {
	t.Helper()
	if out := b.run(t, map[string]any{"command": "echo alive"}); len(out.Stdout) != 1 || out.Stdout[0] != "alive" {
		t.Fatalf("echo in %s: stdout %q, want [alive]", b.ID, out.Stdout)
	}
}

// TestIdleReapsUnusedSandbox: a sandbox nobody uses is reaped at createdAt
// + idle_timeout, long before its TTL, and housekeeping requests (GET,
// list, endpoint, health, metrics) do not keep it alive.
func TestIdleReapsUnusedSandbox(t *testing.T) {
	t.Parallel()
	s := startIdleServer(t, idleTimeout)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest()) // timeout 600 s
	created := parseUTC(t, "createdAt", sb.CreatedAt)
	want := created.Add(idleTimeout)
	if got := parseUTC(t, "expiresAt", sb.ExpiresAt); !got.Equal(want) {
		t.Fatalf("create: expiresAt %s, want createdAt+%s = %s", got, idleTimeout, want)
	}
	waitIdleReaped(t, s, sb.ID, want,
		"/v1/sandboxes",
		sandboxPath(sb.ID, "/endpoints/"+execdPort),
		"/health",
		"/metrics",
	)
}

// TestIdleActiveSandboxOutlivesTimeout: commands every two seconds keep a
// sandbox alive well past its idle timeout, each moving expiresAt forward;
// so does a renewal. Once left alone it is reaped.
func TestIdleActiveSandboxOutlivesTimeout(t *testing.T) {
	t.Parallel()
	s := startIdleServer(t, idleTimeout)
	sb, box := newIdleBox(t, s, nil)
	created := parseUTC(t, "createdAt", sb.CreatedAt)
	last := parseUTC(t, "expiresAt", sb.ExpiresAt)
	for i := 0; time.Since(created) < 3*idleTimeout; i++ {
		time.Sleep(2 * time.Second)
		var got time.Time
		if i == 5 {
			var renewed struct {
				ExpiresAt string `json:"expiresAt"`
			}
			s.doJSON(t, http.MethodPost, sandboxPath(sb.ID, "/renew-expiration"),
				map[string]string{"expiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)}, http.StatusOK, &renewed)
			got = expiresAt(t, s, sb.ID)
			// The idle timeout still applies: the answer is the deadline
			// GET reports, not the hour asked for.
			if r := parseUTC(t, "renewed expiresAt", renewed.ExpiresAt); !r.Equal(got) {
				t.Errorf("renew answered expiresAt %s, GET reports %s", r, got)
			}
		} else {
			box.echo(t)
			got = expiresAt(t, s, sb.ID)
		}
		if !got.After(last) {
			t.Fatalf("step %d: expiresAt %s did not move forward from %s", i, got, last)
		}
		if limit := time.Now().Add(idleTimeout); got.After(limit) {
			t.Fatalf("step %d: expiresAt %s is beyond now + idle timeout (%s)", i, got, limit)
		}
		last = got
	}
	waitIdleReaped(t, s, sb.ID, last)
}

// TestIdleBackgroundCommandOutlivesTimeout: a sandbox whose only sign of
// life is a background `sleep 30` is not idle. While it sleeps, the reaper
// finds it busy and moves expiresAt forward; it is reaped once the command
// has ended and the idle timeout has passed again.
func TestIdleBackgroundCommandOutlivesTimeout(t *testing.T) {
	t.Parallel()
	const sleep = 30 * time.Second
	s := startIdleServer(t, idleTimeout)
	sb, box := newIdleBox(t, s, nil)
	started := time.Now()
	status, _, body := box.do(t, http.MethodPost, "/command",
		map[string]any{"command": fmt.Sprintf("sleep %d", int(sleep.Seconds())), "background": true}, nil)
	if status != http.StatusOK {
		t.Fatalf("background command: status %d; body %s", status, body)
	}
	ended := started.Add(sleep) // the command cannot end earlier

	// Only GETs from here on: the reaper must renew the deadline itself.
	first := expiresAt(t, s, sb.ID)
	waitUntil(t, time.Until(first)+reapSlack, "the reaper to find the sandbox busy", func() bool {
		return expiresAt(t, s, sb.ID).After(first)
	})
	for time.Since(started) < 2*idleTimeout {
		getSandbox(t, s, "/v1", sb.ID) // fails the test on 404
		time.Sleep(time.Second)
	}
	var last time.Time
	waitUntil(t, time.Until(ended)+idleTimeout+reapSlack, "sandbox to be reaped after its command", func() bool {
		status, _, body := s.do(t, http.MethodGet, sandboxPath(sb.ID), nil, nil)
		switch status {
		case http.StatusNotFound:
			return true
		case http.StatusOK:
			last = parseUTC(t, "expiresAt", decodeJSON[lcSandbox](t, body).ExpiresAt)
			return false
		}
		t.Fatalf("GET sandbox: status %d; body %s", status, body)
		return false
	})
	if now := time.Now(); now.Before(ended) {
		t.Errorf("reaped at %s while its background command was still running (until %s at least)", now, ended)
	}
	if now := time.Now(); now.Before(last) {
		t.Errorf("reaped at %s, before the last expiresAt it reported, %s", now, last)
	}
	assertGone(t, s, sb.ID)
}

// TestIdleTTLCapsActiveSandbox: the TTL is absolute under an idle timeout:
// a sandbox in constant use is reaped at createdAt + timeout.
func TestIdleTTLCapsActiveSandbox(t *testing.T) {
	t.Parallel()
	s := startIdleServer(t, idleTimeout)
	sb, box := newIdleBox(t, s, map[string]any{"timeout": 60})
	ttl := parseUTC(t, "createdAt", sb.CreatedAt).Add(60 * time.Second)
	// Stop using it a little before the TTL, so no command races the reaper.
	for time.Until(ttl) > 4*time.Second {
		box.echo(t)
		if got := expiresAt(t, s, sb.ID); got.After(ttl) {
			t.Fatalf("expiresAt %s is past the TTL %s", got, ttl)
		}
		time.Sleep(2 * time.Second)
	}
	// The last command came at most about 6 s, less than the idle timeout,
	// before the TTL.
	if got := expiresAt(t, s, sb.ID); !got.Equal(ttl) {
		t.Fatalf("near the TTL: expiresAt %s, want the TTL %s", got, ttl)
	}
	waitIdleReaped(t, s, sb.ID, ttl)
}

// TestIdleRestartKeepsDeadlines: after a kill -9 and a restart, expiresAt
// is what it was (activity is persisted every reaper interval, 1 s here)
// for both rules, and the reaper still reaps on time.
func TestIdleRestartKeepsDeadlines(t *testing.T) {
	t.Parallel()
	const idle = 15 * time.Second // room for the restart
	s := startIdleServer(t, idle)
	idleSB, idleBox := newIdleBox(t, s, nil)
	renewSB, renewBox := newIdleBox(t, s, map[string]any{
		"timeout":    60,
		"extensions": map[string]string{"access.renew.extend.seconds": "300"},
	})
	time.Sleep(time.Second) // so that activity moves the deadlines
	idleBox.echo(t)
	renewBox.echo(t)
	time.Sleep(3 * time.Second) // several reaper sweeps persist the activity
	before := map[string]time.Time{idleSB.ID: expiresAt(t, s, idleSB.ID), renewSB.ID: expiresAt(t, s, renewSB.ID)}
	for id, created := range map[string]string{idleSB.ID: idleSB.ExpiresAt, renewSB.ID: renewSB.ExpiresAt} {
		if !before[id].After(parseUTC(t, "expiresAt", created)) {
			t.Fatalf("sandbox %s: a command did not move expiresAt (%s at create, %s after)", id, created, before[id])
		}
	}

	s.Kill9()
	s.Restart()
	for id, want := range before {
		if got := expiresAt(t, s, id); !got.Equal(want) {
			t.Errorf("sandbox %s: expiresAt %s after kill -9 and restart, %s before", id, got, want)
		}
	}
	waitIdleReaped(t, s, idleSB.ID, before[idleSB.ID])
	// Renew on access is this sandbox's idle timeout, in place of the
	// server's: it outlives the other one and keeps its deadline.
	if got := expiresAt(t, s, renewSB.ID); !got.Equal(before[renewSB.ID]) {
		t.Errorf("renew-on-access sandbox: expiresAt %s, want %s", got, before[renewSB.ID])
	}
}

// TestIdleRenewOnAccess covers upstream's access.renew.extend.seconds (E):
// the same validation as upstream, expiresAt at max(TTL, last activity +
// E) moving forward on activity and not on GET, a sandbox without TTL
// expiring E after its last activity, and E replacing the server's idle
// timeout.
func TestIdleRenewOnAccess(t *testing.T) {
	t.Parallel()
	s := startIdleServer(t, idleTimeout)
	for _, v := range []string{"299", "86401", "abc", "", "300.5"} {
		req := busyboxWith(map[string]any{"extensions": map[string]string{"access.renew.extend.seconds": v}})
		doError(t, s, http.MethodPost, "/v1/sandboxes", req, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
	}
	const extend = 300 * time.Second
	ext := map[string]string{"access.renew.extend.seconds": "300"}

	withTTL, box := newIdleBox(t, s, map[string]any{"timeout": 60, "extensions": ext})
	first := parseUTC(t, "expiresAt", withTTL.ExpiresAt)
	if want := parseUTC(t, "createdAt", withTTL.CreatedAt).Add(extend); !first.Equal(want) {
		t.Fatalf("TTL 60 s, E 300 s: expiresAt %s at create, want createdAt+E = %s", first, want)
	}
	manual := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"timeout": nil, "extensions": ext}))
	manualExp := parseUTC(t, "expiresAt", manual.ExpiresAt)
	if want := parseUTC(t, "createdAt", manual.CreatedAt).Add(extend); !manualExp.Equal(want) {
		t.Fatalf("no TTL, E 300 s: expiresAt %s at create, want createdAt+E = %s", manualExp, want)
	}

	time.Sleep(1100 * time.Millisecond)
	if got := expiresAt(t, s, withTTL.ID); !got.Equal(first) {
		t.Fatalf("GET moved expiresAt from %s to %s", first, got)
	}
	sent := time.Now()
	box.echo(t)
	got := expiresAt(t, s, withTTL.ID)
	if !got.After(first) {
		t.Fatalf("a command did not move expiresAt forward: %s, was %s", got, first)
	}
	if lo, hi := sent.Add(extend).Add(-time.Millisecond), time.Now().Add(extend); got.Before(lo) || got.After(hi) {
		t.Errorf("after a command expiresAt is %s, want the command's time + E (between %s and %s)", got, lo, hi)
	}

	// Well past the server's idle timeout, both are still there with the
	// deadlines E gave them.
	time.Sleep(idleTimeout + 4*time.Second)
	for id, want := range map[string]time.Time{withTTL.ID: got, manual.ID: manualExp} {
		if exp := expiresAt(t, s, id); !exp.Equal(want) {
			t.Errorf("sandbox %s: expiresAt %s, want %s", id, exp, want)
		}
	}
}
