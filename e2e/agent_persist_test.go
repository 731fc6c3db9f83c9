//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// agentDaemonMarker is on the command line of the agent daemon, not on that
// of the `sandboxd agent` that bridges an exec to it.
const agentDaemonMarker = "sandboxd agent --daemon"

// TestAgentStateSurvivesCrash kills sandboxd with SIGKILL while a sandbox
// runs a background command, holds a shell session and runs a foreground
// command, then starts it again: the agent daemon in the sandbox kept its
// state, so the background command is still reported running and counted
// as activity, and the session kept its variables; the foreground command
// died with the connection that carried it. Killing the daemon from inside
// the sandbox loses that state, and the next request starts a new one.
func TestAgentStateSurvivesCrash(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	box := newExecdBox(t, s, busyboxRequest())
	waitState(t, s, box.ID, "Running")

	bg := box.run(t, map[string]any{"command": "sleep 300", "background": true}).Events[0].Text
	var sess struct {
		ID string `json:"session_id"`
	}
	s.doJSON(t, http.MethodPost, proxyPath(box.ID, "/session"), map[string]any{}, http.StatusOK, &sess)
	sessionRun(t, s, box.ID, sess.ID, "export KEPT=yes")
	startCommand(t, s, box.ID, map[string]any{"command": "sleep 301"}).until(t, "init")
	waitUntil(t, stateWait, "the commands to run", func() bool {
		return hasProcess(t, box.ID, "sleep 300") && hasProcess(t, box.ID, "sleep 301")
	})

	s.Kill9()
	s.Restart()

	waitUntil(t, stateWait, "the foreground command to die with its connection", func() bool {
		return !hasProcess(t, box.ID, "sleep 301")
	})
	var st struct {
		Running bool `json:"running"`
	}
	s.doJSON(t, http.MethodGet, proxyPath(box.ID, "/command/status/"+bg), nil, http.StatusOK, &st)
	if !st.Running {
		t.Errorf("background command after the restart: not running")
	}
	if n := agentActivity(t, s, box.ID); n != 1 {
		t.Errorf("activity after the restart: %d running, want 1 (the background command)", n)
	}
	if got := sessionRun(t, s, box.ID, sess.ID, "echo $KEPT"); got != "yes" {
		t.Errorf("session variable after the restart: %q, want yes", got)
	}
	if n := countProcesses(t, box.ID, agentDaemonMarker); n != 1 {
		t.Errorf("%d agent daemons in the sandbox, want 1", n)
	}

	// A daemon killed from inside (here with the whole agent) is replaced
	// on the next request, without the state of the old one.
	// The pattern does not match the killing shell's own command line.
	kill := `for p in /proc/[0-9]*; do case "$(tr '\0' ' ' <$p/cmdline 2>/dev/null)" in *"sandboxd agen"[t]*) kill -9 ${p#/proc/};; esac; done`
	status, _, err := doWithin(t, s, stateWait, http.MethodPost, proxyPath(box.ID, "/command"), map[string]any{"command": kill})
	t.Logf("the command that killed the agent: status %d, error %v", status, err)
	waitUntil(t, stateWait, "a new agent to answer", func() bool {
		status, _, err := doWithin(t, s, stateWait, http.MethodGet, proxyPath(box.ID, "/ping"), nil)
		return err == nil && status == http.StatusOK
	})
	if got := runCommand(t, s, box.ID, "echo again"); got != "again" {
		t.Errorf("command after the agent was killed: %q", got)
	}
	if status, _, body := s.do(t, http.MethodGet, proxyPath(box.ID, "/command/status/"+bg), nil, nil); status != http.StatusNotFound {
		t.Errorf("status of the old daemon's command from the new one: %d %s, want 404", status, body)
	}
	if n := countProcesses(t, box.ID, agentDaemonMarker); n != 1 {
		t.Errorf("%d agent daemons in the sandbox after the kill, want 1", n)
	}
}

// TestAgentDaemonRefusesOtherUsers: a command running as another user
// cannot reach the agent daemon (which runs as root and can act as anyone);
// `sandboxd agent` run as that user says why and serves its own stdio.
func TestAgentDaemonRefusesOtherUsers(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	box := newExecdBox(t, s, busyboxRequest())
	waitState(t, s, box.ID, "Running")
	runCommand(t, s, box.ID, "true") // the daemon is up

	res := box.run(t, map[string]any{"command": "/opt/sandboxd/sandboxd agent </dev/null", "uid": 65534, "gid": 65534})
	if !strings.Contains(strings.Join(res.Stderr, "\n"), "runs as uid 0, not 65534") {
		t.Errorf("sandboxd agent as uid 65534: stderr %q, want the refusal", res.Stderr)
	}
	if last := res.last(); last.Type != "execution_complete" {
		t.Errorf("sandboxd agent as uid 65534 ended with %+v, want success (serving its own stdio)", last)
	}
	if n := countProcesses(t, box.ID, agentDaemonMarker); n != 1 {
		t.Errorf("%d agent daemons in the sandbox, want 1", n)
	}
}

// sessionRun runs a command in a shell session and returns its stdout lines
// joined by "\n".
func sessionRun(t *testing.T, s *Server, id, session, command string) string {
	t.Helper()
	status, _, body := s.do(t, http.MethodPost, proxyPath(id, "/session/"+session+"/run"), map[string]any{"command": command}, nil)
	if status != http.StatusOK {
		t.Fatalf("session run %q: status %d; body %s", command, status, body)
	}
	var stdout []string
	last := ""
	for _, chunk := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		var ev execdEvent
		if err := json.Unmarshal([]byte(chunk), &ev); err != nil {
			t.Fatalf("session run %q: event %q: %v", command, chunk, err)
		}
		if ev.Type == "stdout" {
			stdout = append(stdout, ev.Text)
		}
		last = ev.Type
	}
	if last != "execution_complete" {
		t.Fatalf("session run %q: stream ends with %q; body %s", command, last, body)
	}
	return strings.Join(stdout, "\n")
}

// agentActivity returns the agent's count of running work.
func agentActivity(t *testing.T, s *Server, id string) int {
	t.Helper()
	var a struct {
		Running int `json:"running"`
	}
	s.doJSON(t, http.MethodGet, proxyPath(id, "/_sandboxd/activity"), nil, http.StatusOK, &a)
	return a.Running
}

// countProcesses counts the processes of a sandbox whose command line
// contains marker.
func countProcesses(t *testing.T, id, marker string) int {
	t.Helper()
	n := 0
	for _, p := range containerProcesses(t, id) {
		if strings.Contains(p, marker) {
			n++
		}
	}
	return n
}
