//go:build e2e

package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// Upstream 1.1.1 (reference upstream-1.1.1.md §1, §3, §4) against the real
// engine: the SDKs' metrics event, the template routes and create fields
// sandboxd does not have, answered as upstream's Docker server answers them.

// TestUpstream111Routes: the metrics event is a 204 with no body (a 401
// without the key, a 404 without /v1); every template route and a create
// naming a template are 501 FSB::API_NOT_SUPPORTED; credentialProxy is
// 422 without a policy and 400 with one; nothing is created.
func TestUpstream111Routes(t *testing.T) {
	s := startServer(t)
	event := `{"eventType":"sandbox.create","createDurationMs":812,"success":true,"sandboxId":"x","image":"busybox"}`
	status, _, body := s.do(t, http.MethodPost, "/v1/metrics/events", event, map[string]string{"User-Agent": "OpenSandbox-Python-SDK/1.1.1"})
	if status != http.StatusNoContent || len(body) != 0 {
		t.Errorf("metrics event: %d %q, want 204 and no body", status, body)
	}
	status, _, body = s.do(t, http.MethodPost, "/v1/metrics/events", event, map[string]string{apiKeyHeader: ""})
	wantError(t, "metrics event without a key", status, body, http.StatusUnauthorized, "MISSING_API_KEY")
	doError(t, s, http.MethodPost, "/metrics/events", event, http.StatusNotFound, "")
	doError(t, s, http.MethodPost, "/v1/metrics/events", `[]`, http.StatusUnprocessableEntity, "")

	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/v1/templates"}, {http.MethodGet, "/v1/templates"}, {http.MethodGet, "/templates/t1"}, {http.MethodDelete, "/v1/templates/t1"},
	} {
		var body any
		if r.method == http.MethodPost {
			body = map[string]any{"name": "t1"}
		}
		msg := doError(t, s, r.method, r.path, body, http.StatusNotImplemented, "FSB::API_NOT_SUPPORTED")
		if msg != "Template management requires the kubernetes runtime." {
			t.Errorf("%s %s: message %q", r.method, r.path, msg)
		}
	}
	doError(t, s, http.MethodGet, "/v1/templates?pageSize=500", nil, http.StatusUnprocessableEntity, "")

	doError(t, s, http.MethodPost, "/v1/sandboxes", map[string]any{"templateId": "x", "timeout": 600}, http.StatusNotImplemented, "FSB::API_NOT_SUPPORTED")
	msg := doError(t, s, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"credentialProxy": map[string]any{"enabled": true}}), http.StatusUnprocessableEntity, "")
	if status, _, body := s.do(t, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"credentialProxy": map[string]any{"enabled": true}}), nil); !strings.Contains(string(body), "credentialProxy.enabled requires networkPolicy") {
		t.Errorf("credentialProxy without a policy: %d %s (%s)", status, body, msg)
	}
	policy := map[string]any{"defaultAction": "deny", "egress": []any{}}
	msg = doError(t, s, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"credentialProxy": map[string]any{"enabled": true}, "networkPolicy": policy}), http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
	if !strings.Contains(msg, "credentialProxy is not supported") {
		t.Errorf("credentialProxy with a policy: message %q", msg)
	}
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("refused creates left %d container(s)", len(left))
	}
	// Disabled, it is accepted and changes nothing.
	createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"credentialProxy": map[string]any{"enabled": false}}))
}

// TestUpstream111SDKMetricsEvent runs e2e/ts/upstream111.test.mjs: the
// TypeScript SDK's create posts its metrics event, and sandboxd answers 204.
func TestUpstream111SDKMetricsEvent(t *testing.T) {
	s := startServer(t)
	s.runNode(t, "upstream111.test.mjs", nil)
}

// TestUpstream111Execd: execd 1.1.1's changes (§6) through the server
// proxy into a real sandbox: a 1.1 SDK's output events keep their line
// endings (others keep the stripped lines); children of a finished
// background command keep running while an interrupted one's die; a
// session run's timeout kills its whole group; a session run leaves no
// script file and no copy of the sandbox's secrets.
func TestUpstream111Execd(t *testing.T) {
	s := startServer(t)
	b := newExecdBox(t, s, busyboxWith(map[string]any{"env": map[string]string{"TOKEN": "s3cr3t-XYZ"}}))
	sdk := map[string]string{"User-Agent": "OpenSandbox-Python-SDK/1.1.1"}
	stdoutOf := func(r execdRun) string { return strings.Join(r.Stdout, "") }
	mustRun := func(command string) string {
		t.Helper()
		r := b.run(t, map[string]any{"command": command})
		if last := r.last(); last.Type != "execution_complete" {
			t.Fatalf("%q: ended with %+v; stderr %q", command, last, r.Stderr)
		}
		return strings.Join(r.Stdout, "\n")
	}

	t.Run("line endings", func(t *testing.T) {
		cmd := map[string]any{"command": `printf 'a\r\nb\n\nc'; printf 'x\r\n' >&2`}
		r := b.runAt(t, "/command", cmd, sdk)
		if got := stdoutOf(r); got != "a\r\nb\n\nc" {
			t.Errorf("1.1 SDK: joined stdout %q (events %q)", got, r.Stdout)
		}
		if got := strings.Join(r.Stderr, ""); got != "x\r\n" {
			t.Errorf("1.1 SDK: joined stderr %q", got)
		}
		r = b.run(t, cmd)
		if got := strings.Join(r.Stdout, "|"); got != "a|b|\n|c" {
			t.Errorf("other clients: stdout events %q, want the stripped lines", r.Stdout)
		}
	})

	t.Run("children of a finished background command", func(t *testing.T) {
		r := b.run(t, map[string]any{"command": "sleep 300 & echo $! > /tmp/bgpid", "background": true})
		id := r.Events[0].Text
		waitUntil(t, 30*time.Second, "the background command to finish", func() bool {
			status, _, body := b.do(t, http.MethodGet, "/command/status/"+id, nil, nil)
			return status == http.StatusOK && strings.Contains(string(body), `"running":false`)
		})
		time.Sleep(200 * time.Millisecond)
		mustRun("kill -0 $(cat /tmp/bgpid)")
		// A running background command interrupted: its child dies.
		r = b.run(t, map[string]any{"command": "sleep 301 & echo $! > /tmp/bgpid2; wait", "background": true})
		id = r.Events[0].Text
		waitUntil(t, 30*time.Second, "the child's pid", func() bool { return mustRun("cat /tmp/bgpid2 2>/dev/null || true") != "" })
		if status, _, body := b.do(t, http.MethodDelete, "/command?id="+id, nil, nil); status != http.StatusOK {
			t.Fatalf("interrupt: %d %s", status, body)
		}
		waitUntil(t, 30*time.Second, "the interrupted command's child to die", func() bool {
			return mustRun("kill -0 $(cat /tmp/bgpid2) 2>/dev/null && echo alive || echo gone") == "gone"
		})
	})

	var session string
	t.Run("session timeout", func(t *testing.T) {
		status, _, body := b.do(t, http.MethodPost, "/session", map[string]any{}, nil)
		if status != http.StatusOK {
			t.Fatalf("POST /session: %d %s", status, body)
		}
		session = decodeJSON[struct {
			ID string `json:"session_id"`
		}](t, body).ID
		start := time.Now()
		r := b.runAt(t, "/session/"+session+"/run", map[string]any{"command": "sleep 30 & echo $!; wait", "timeout": 1000}, nil)
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("the run took %v past its 1 s timeout", took)
		}
		if last := r.last(); last.Type != "error" || last.Error == nil || last.Error.Evalue != "-1" {
			t.Errorf("ended with %+v, want error -1", last)
		}
		if len(r.Stdout) != 1 {
			t.Fatalf("stdout %q, want the child's pid", r.Stdout)
		}
		waitUntil(t, 30*time.Second, "the session's child to die", func() bool {
			return mustRun("kill -0 "+r.Stdout[0]+" 2>/dev/null && echo alive || echo gone") == "gone"
		})
	})

	t.Run("no script file", func(t *testing.T) {
		if session == "" {
			t.Skip("no session")
		}
		r := b.runAt(t, "/session/"+session+"/run", map[string]any{"command": "true"}, nil)
		if last := r.last(); last.Type != "execution_complete" {
			t.Fatalf("session run: %+v", last)
		}
		if got := mustRun(`ls -a /tmp "${TMPDIR:-/tmp}" | grep execd_bash_ || true`); got != "" {
			t.Errorf("script files: %q", got)
		}
		if got := mustRun(`grep -rl s3cr3t-XYZ /tmp "${TMPDIR:-/tmp}" 2>/dev/null || true`); got != "" {
			t.Errorf("files holding the secret: %q", got)
		}
	})
}

// TestUpstream111ProxyFailures: a server in the sandbox that accepts and
// never answers gets 504 BACKEND_TIMEOUT after [server]
// proxy_read_timeout; a closed port 502 BACKEND_CONNECTION_FAILED; one
// that hangs up after reading the request 502 BACKEND_RESPONSE_FAILED; an
// answer slower than the timeout once its headers are out still arrives.
func TestUpstream111ProxyFailures(t *testing.T) {
	s := startServer(t, withTOML("[server]\nproxy_read_timeout = \"2s\"\n"))
	b := newExecdBox(t, s, busyboxWith(nil))
	for _, cmd := range []string{
		"nc -ll -p 8000 -e sleep 60",
		"nc -ll -p 8002 -e head -c 1",
		`nc -ll -p 8003 -e sh -c 'printf "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n"; sleep 3; printf late'`,
	} {
		if r := b.run(t, map[string]any{"command": cmd, "background": true}); r.last().Type != "execution_complete" {
			t.Fatalf("start %q: %s", cmd, r.Raw)
		}
	}
	waitUntil(t, 30*time.Second, "the servers to listen", func() bool {
		r := b.run(t, map[string]any{"command": "netstat -ltn"})
		out := strings.Join(r.Stdout, "\n")
		return strings.Contains(out, ":8000 ") && strings.Contains(out, ":8002 ") && strings.Contains(out, ":8003 ")
	})
	get := func(port string) (int, []byte, time.Duration) {
		start := time.Now()
		status, _, body := s.do(t, http.MethodGet, "/sandboxes/"+b.ID+"/proxy/"+port+"/", nil, nil)
		return status, body, time.Since(start)
	}
	status, body, took := get("8000")
	wantError(t, "a server that never answers", status, body, http.StatusGatewayTimeout, "BACKEND_TIMEOUT")
	if took < 2*time.Second || took > 30*time.Second {
		t.Errorf("the 504 came after %v, want about the 2 s read timeout", took)
	}
	status, body, _ = get("8001")
	wantError(t, "a closed port", status, body, http.StatusBadGateway, "BACKEND_CONNECTION_FAILED")
	status, body, _ = get("8002")
	wantError(t, "a server that hangs up", status, body, http.StatusBadGateway, "BACKEND_RESPONSE_FAILED")
	if status, body, _ := get("8003"); status != http.StatusOK || string(body) != "late" {
		t.Errorf("a slow body after prompt headers: %d %q", status, body)
	}
}
