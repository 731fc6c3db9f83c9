//go:build linux

package agent

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func (a *testAgent) newSession(t *testing.T, body any) string {
	t.Helper()
	resp := a.do(t, http.MethodPost, "/session", body)
	id := decode[map[string]string](t, resp, http.StatusOK)["session_id"]
	if id == "" {
		t.Fatal("no session_id")
	}
	return id
}

func TestSessionState(t *testing.T) {
	t.Setenv("SHLVL", "0") // so that a growing SHLVL would show
	for _, name := range []string{"bash", "sh"} {
		t.Run(name, func(t *testing.T) {
			a := newTestAgent(t)
			sh, err := new(shellFinder).find()
			if err != nil {
				t.Fatal(err)
			}
			if name == "sh" {
				sh = shell{path: "/bin/sh"}
			}
			a.findShell = func() (shell, error) { return sh, nil }
			testSessionState(t, a, name == "bash")
		})
	}
}

func testSessionState(t *testing.T, a *testAgent, bash bool) {
	work := filepath.Join(a.dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	id := a.newSession(t, nil) // an empty body is allowed
	type step struct {
		command string
		extra   map[string]any
		exit    string
		stdout  []string
	}
	steps := []step{
		{"cd " + work + "; export FOO=\"it's a b\"; export MULTI='x\ny'; LOCAL=1; set -u", nil, "0", nil},
		{"pwd; echo \"$FOO\"; echo \"$MULTI\"; echo ${LOCAL:-unset}", nil, "0", []string{work, "it's a b", "x", "y", "unset"}},
		{"unset FOO; cd ..; exit 3", nil, "3", nil},
		{"echo ${FOO:-gone}; pwd", nil, "0", []string{"gone", a.dir}},
		{"pwd", map[string]any{"cwd": work}, "0", []string{work}},
		{"echo out; echo err >&2; false", nil, "1", []string{"out"}},
		{"export BIG=1; x='" + strings.Repeat("y", 200<<10) + "'; echo ${#x}", nil, "0", []string{"204800"}},
		{"echo $BIG", nil, "0", []string{"1"}},
	}
	if bash {
		steps = append(steps, step{"echo $SHLVL", nil, "0", []string{"1"}})
	}
	for _, st := range steps {
		body := map[string]any{"command": st.command}
		for k, v := range st.extra {
			body[k] = v
		}
		res := a.run(t, "/session/"+id+"/run", body)
		if res.events[0].Text != id {
			t.Fatalf("init text %q, want the session id", res.events[0].Text)
		}
		if code := res.exitCode(t); code != st.exit {
			t.Fatalf("%q: exit %s, want %s (stderr %q)", st.command, code, st.exit, res.stderr)
		}
		if !slices.Equal(res.stdout, st.stdout) {
			t.Fatalf("%q: stdout %q, want %q (stderr %q)", st.command, res.stdout, st.stdout, res.stderr)
		}
	}

	wantError(t, a.post(t, "/session/"+id+"/run", map[string]any{"command": "true", "cwd": filepath.Join(a.dir, "nope")}), http.StatusBadRequest, codeInvalidRequest)
	wantError(t, a.post(t, "/session/"+id+"/run", map[string]any{}), http.StatusBadRequest, codeInvalidRequest)
	if resp := a.do(t, http.MethodDelete, "/session/"+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %s", resp.Status)
	}
	wantError(t, a.do(t, http.MethodDelete, "/session/"+id, nil), http.StatusNotFound, codeContextNotFound)
	wantError(t, a.post(t, "/session/"+id+"/run", map[string]any{"command": "true"}), http.StatusNotFound, codeContextNotFound)
}

func TestSessionCreateCwd(t *testing.T) {
	a := newTestAgent(t)
	dir := filepath.Join(a.dir, "new", "dir")
	id := a.newSession(t, map[string]string{"cwd": dir})
	res := a.run(t, "/session/"+id+"/run", map[string]any{"command": "pwd"})
	if !slices.Equal(res.stdout, []string{dir}) {
		t.Fatalf("stdout %q, want %q", res.stdout, dir)
	}
}

func TestSessionTimeoutAndInterrupt(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	id := a.newSession(t, nil)
	res := a.run(t, "/session/"+id+"/run", map[string]any{"command": "sleep 300", "timeout": 200})
	if code := res.exitCode(t); code != "-1" {
		t.Fatalf("timeout: exit %s, want -1", code)
	}

	_, stream, _ := a.startStream(t, context.Background(), "/session/"+id+"/run", map[string]any{"command": "sleep 300 & echo $!; wait"})
	pidOf(t, stream)
	if n := decode[map[string]int](t, a.do(t, http.MethodGet, "/_sandboxd/activity", nil), http.StatusOK)["running"]; n != 1 {
		t.Fatalf("activity %d, want 1", n)
	}
	if resp := a.do(t, http.MethodDelete, "/command?id="+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("interrupt: %s", resp.Status)
	}
	// bash may report "Terminated" on stderr first.
	if ev := finalEvent(t, stream); ev.Type != evError || ev.Error.EValue != "-1" {
		t.Fatalf("got %+v, want error -1", ev)
	}
	// The session survives an interrupt.
	if res := a.run(t, "/session/"+id+"/run", map[string]any{"command": "echo still"}); !slices.Equal(res.stdout, []string{"still"}) {
		t.Fatalf("stdout %q", res.stdout)
	}
}

func TestParseState(t *testing.T) {
	tests := []struct {
		name string
		in   string
		bash bool
		ok   bool
		dir  string
		env  []string
	}{
		{"nothing (killed)", "", true, false, "", nil},
		{"bash", "/w\x00A=1\x00SHLVL=2\x00_=/bin/x\x00B=x\ny\x00", true, true, "/w", []string{"A=1", "B=x\ny"}},
		{"dash and busybox", "/w\x00export A='it'\"'\"'s'\nexport B='l1\nl2'\nexport C=''\nexport E\nexport SHLVL='1'\n", false, true, "/w",
			[]string{"A=it's", "B=l1\nl2", "C="}},
		{"backslash quote", "/w\x00export A='a'\\''b'\nexport N=plain\n", false, true, "/w", []string{"A=a'b", "N=plain"}},
		{"cut short", "/w\x00export A='unterminated", false, true, "/w", nil},
		{"directory only", "/w\x00", false, true, "/w", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, env, ok := parseState([]byte(tt.in), tt.bash)
			if ok != tt.ok || dir != tt.dir || !slices.Equal(env, tt.env) {
				t.Fatalf("got %q %q %v, want %q %q %v", dir, env, ok, tt.dir, tt.env, tt.ok)
			}
		})
	}
}
