//go:build e2e

package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// Upstream 1.1 parity (reference execd-1.1.md): what released SDKs call
// beyond server 0.1.14, against the real engine.

// TestParitySDK runs e2e/ts/parity.test.mjs: the directory listing, file
// types, per-file replace counts, isolation capabilities, renewals that
// shorten, and a create whose entrypoint is missing, all through the
// official TypeScript SDK.
func TestParitySDK(t *testing.T) {
	s := startServer(t, withTOML("[server]\nmax_sandbox_timeout_seconds = 3600\n"))
	s.runNode(t, "parity.test.mjs", nil)
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("parity.test.mjs left %d container(s) behind", len(left))
	}
}

// TestParityEntrypointExitsAtOnce: a sandbox whose entrypoint is missing or
// ends at once fails the create with 500 DOCKER::SANDBOX_START_FAILED
// naming the entrypoint, its exit code and its last output, instead of
// answering 202 Running; nothing is left behind.
func TestParityEntrypointExitsAtOnce(t *testing.T) {
	s := startServer(t)
	tests := []struct {
		name, image string
		entrypoint  []string
		want        []string // in the message
	}{
		{"missing binary", imageBusybox, []string{"/no/such/binary", "arg"}, []string{`["/no/such/binary", "arg"]`, "exited with code 127", "not found in the image", "exec /no/such/binary failed: No such file or directory"}},
		{"shell in an image without one", imageNoShell, []string{"/bin/sh", "-c", "sleep 100"}, []string{`["/bin/sh", "-c", "sleep 100"]`, "exited with code 127"}},
		{"exits with an error", imageBusybox, []string{"sh", "-c", "echo boom-on-stderr >&2; exit 3"}, []string{"exited with code 3", "boom-on-stderr"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := busyboxWith(map[string]any{"image": map[string]string{"uri": tt.image}, "entrypoint": tt.entrypoint})
			msg := doError(t, s, http.MethodPost, "/v1/sandboxes", req, http.StatusInternalServerError, "DOCKER::SANDBOX_START_FAILED")
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
				t.Errorf("the failed create left %d container(s)", len(left))
			}
			if l := listSandboxes(t, s, "/v1", ""); len(l.Items) != 0 {
				t.Errorf("the failed create left sandboxes %v", ids(l.Items))
			}
		})
	}
}

// TestParityDiagnostics checks upstream's diagnostics descriptors (the
// Python SDK's get_diagnostic_logs/get_diagnostic_events parse them) and
// the plain-text answers without a scope.
func TestParityDiagnostics(t *testing.T) {
	s := startServer(t)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
		"entrypoint": []string{"sh", "-c", "echo first; echo second; exec tail -f /dev/null"},
	}))
	type descriptor struct {
		SandboxID     string   `json:"sandboxId"`
		Kind          string   `json:"kind"`
		Scope         string   `json:"scope"`
		Delivery      string   `json:"delivery"`
		ContentType   string   `json:"contentType"`
		Content       *string  `json:"content"`
		ContentLength int      `json:"contentLength"`
		Truncated     *bool    `json:"truncated"`
		Warnings      []string `json:"warnings"`
	}
	get := func(rest string) descriptor {
		t.Helper()
		d := decodeJSON[descriptor](t, getBody(t, s, sandboxPath(sb.ID, "/diagnostics/"+rest)))
		if d.SandboxID != sb.ID || d.Delivery != "inline" || d.ContentType != "text/plain; charset=utf-8" || d.Content == nil || d.Truncated == nil || d.ContentLength != len(*d.Content) {
			t.Fatalf("%s: descriptor %+v", rest, d)
		}
		return d
	}
	var d descriptor
	waitUntil(t, stateWait, "both lines in the logs", func() bool {
		d = get("logs?scope=container")
		return strings.Contains(*d.Content, "second")
	})
	if d.Kind != "logs" || d.Scope != "container" || *d.Content != "first\nsecond\n" || *d.Truncated || d.Warnings != nil {
		t.Errorf("logs?scope=container: %+v (content %q)", d, *d.Content)
	}
	if d := get("logs?scope=all&tail=1"); d.Scope != "all" || *d.Content != "second\n" || !*d.Truncated || len(d.Warnings) != 1 {
		t.Errorf("logs?scope=all&tail=1: %+v (content %q)", d, *d.Content)
	}
	d = get("events?scope=runtime")
	if d.Kind != "events" || !strings.Contains(*d.Content, "Status:     running") || !strings.Contains(*d.Content, "Started:    ") {
		t.Errorf("events?scope=runtime: %+v (content %q)", d, *d.Content)
	}
	if d := get("events?scope=all"); len(d.Warnings) != 1 {
		t.Errorf("events?scope=all: warnings %v", d.Warnings)
	}
	for _, rest := range []string{"logs?scope=lifecycle", "events?scope=lifecycle", "events?scope=network"} {
		msg := doError(t, s, http.MethodGet, sandboxPath(sb.ID, "/diagnostics/"+rest), nil, http.StatusBadRequest, "DIAGNOSTICS_SCOPE_UNSUPPORTED")
		if !strings.Contains(msg, "Supported scopes: ") {
			t.Errorf("%s: message %q does not list the supported scopes", rest, msg)
		}
	}
	if text := string(wantText(t, s, sandboxPath(sb.ID, "/diagnostics/events"))); !strings.Contains(text, "Status:     running") {
		t.Errorf("events without scope: %q", text)
	}
	if text := string(wantText(t, s, sandboxPath(sb.ID, "/diagnostics/logs"))); text != "first\nsecond\n" {
		t.Errorf("logs without scope: %q", text)
	}
}

// TestParityPTYCommand: a PTY session created with a command runs that
// command instead of an interactive shell, in a cwd made at create time,
// and reports its exit code.
func TestParityPTYCommand(t *testing.T) {
	s := startServer(t)
	b := newExecdBox(t, s, codeInterpreterRequest())
	const cwd = "/tmp/pty/made/at/create"
	status, _, body := b.do(t, http.MethodPost, "/pty", map[string]any{"cwd": cwd, "command": "echo \"from-$((6*7)) in $(pwd) $0\"; exit 7"}, nil)
	if status != http.StatusCreated {
		t.Fatalf("POST /pty: status %d; body %s", status, body)
	}
	sid := decodeJSON[struct {
		SessionID string `json:"session_id"`
	}](t, body).SessionID
	if out := runCommand(t, s, b.ID, "test -d "+cwd+" && echo made"); out != "made" {
		t.Errorf("cwd before the terminal attached: %q, want it made", out)
	}

	p := dialPTY(t, b, sid)
	p.read("the exit frame", func() bool { return p.frame("exit") != nil })
	exit := p.frame("exit")
	if want := "from-42 in " + cwd + " bash"; !strings.Contains(p.output.String(), want) {
		t.Errorf("output %q lacks %q (the command, run by bash, in cwd)", p.output.String(), want)
	}
	if code, _ := exit["exit_code"].(float64); code != 7 {
		t.Errorf("exit frame %v, want exit_code 7", exit)
	}
}

// TestParityCommandArgv: POST /command with argv (SDK 1.1) runs the program
// directly, even in an image without a shell, and reports the argv as the
// command's content.
func TestParityCommandArgv(t *testing.T) {
	s := startServer(t)
	b := newExecdBox(t, s, busyboxWith(nil))
	run := b.run(t, map[string]any{"argv": []string{"printf", "%s|", "a b", "$HOME", "'q'; echo no"}})
	if last := run.last(); last.Type != "execution_complete" || strings.Join(run.Stdout, "\n") != "a b|$HOME|'q'; echo no|" {
		t.Errorf("printf through argv: stdout %q, last event %+v", run.Stdout, last)
	}
	run = b.run(t, map[string]any{"argv": []string{"sh", "-c", "exit 4"}, "background": true})
	id := run.Events[0].Text
	type commandStatus struct {
		Content  string `json:"content"`
		Running  bool   `json:"running"`
		ExitCode *int   `json:"exit_code"`
	}
	var st commandStatus
	waitUntil(t, stateWait, "the background argv to finish", func() bool {
		status, _, body := b.do(t, http.MethodGet, "/command/status/"+id, nil, nil)
		st = decodeJSON[commandStatus](t, body)
		return status == http.StatusOK && !st.Running
	})
	if st.Content != `["sh","-c","exit 4"]` || st.ExitCode == nil || *st.ExitCode != 4 {
		t.Errorf("status %+v, want the JSON argv and exit code 4", st)
	}
	status, _, body := b.do(t, http.MethodPost, "/command", map[string]any{"argv": []any{"echo", nil}}, nil)
	wantError(t, "argv with a null", status, body, http.StatusBadRequest, "INVALID_REQUEST_BODY")

	noshell := newExecdBox(t, s, busyboxWith(map[string]any{"image": map[string]string{"uri": imageNoShell}, "entrypoint": []string{"/pause"}}))
	run = noshell.run(t, map[string]any{"argv": []string{"/opt/sandboxd/sandboxd", "version"}})
	if last := run.last(); last.Type != "execution_complete" || len(run.Stdout) != 1 {
		t.Errorf("argv in an image without a shell: stdout %q, last event %+v", run.Stdout, last)
	}
}

// TestParityCreateFields: resourceRequests (sent by the SDKs when given)
// become the container's CPU weight and memory reservation, a request above
// its limit is refused, and so are lifecycle hooks (as upstream's Docker
// provider does).
func TestParityCreateFields(t *testing.T) {
	s := startServer(t)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
		"resourceLimits":   map[string]string{"cpu": "1", "memory": "512Mi"},
		"resourceRequests": map[string]string{"cpu": "250m", "memory": "128Mi"},
	}))
	hc := sandboxContainer(t, sb.ID).HostConfig
	if hc.CPUShares != 256 || hc.MemoryReservation != 128<<20 || hc.NanoCPUs != 1e9 || hc.Memory != 512<<20 {
		t.Errorf("HostConfig: shares %d, reservation %d, nano CPUs %d, memory %d; want 256, 128Mi, 1e9, 512Mi", hc.CPUShares, hc.MemoryReservation, hc.NanoCPUs, hc.Memory)
	}
	msg := doError(t, s, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{
		"resourceLimits":   map[string]string{"cpu": "1", "memory": "512Mi"},
		"resourceRequests": map[string]string{"memory": "1Gi"},
	}), http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
	if !strings.Contains(msg, "resourceRequests.memory") {
		t.Errorf("message %q does not name resourceRequests.memory", msg)
	}
	doError(t, s, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{
		"lifecycle": map[string]any{"preStart": map[string]any{"command": []string{"true"}}},
	}), http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 1 {
		t.Errorf("%d containers, want only the first sandbox's", len(left))
	}
}

// TestParitySetEnv: what the SDKs' commands.setEnv (1.1.1) appends to
// $EXECD_ENVS reaches every later command, in the default file and in one
// the create's env names.
func TestParitySetEnv(t *testing.T) {
	s := startServer(t)
	for _, tt := range []struct {
		name, file string
		env        map[string]any
	}{
		{"default file", "", nil},
		{"file named at create", "/tmp/custom/envs", map[string]any{"EXECD_ENVS": "/tmp/custom/envs"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newExecdBox(t, s, busyboxWith(map[string]any{"env": tt.env}))
			// The SDK's command for set_env("MULTI", "a $HOME\nb") and set_env("Q", "it's").
			for _, entry := range []string{`MULTI='a $HOME` + "\n" + `b'`, `Q="it's"`} {
				quoted := "'" + strings.ReplaceAll(entry, "'", `'\''`) + "'"
				cmd := `if [ -z "${EXECD_ENVS:-}" ]; then exit 1; fi; mkdir -p "$(dirname "$EXECD_ENVS")"; printf '%s\n' ` + quoted + ` >> "$EXECD_ENVS"`
				if run := b.run(t, map[string]any{"command": cmd}); run.last().Type != "execution_complete" {
					t.Fatalf("setEnv %s: %s", entry, run.Raw)
				}
			}
			run := b.run(t, map[string]any{"command": `echo "$EXECD_ENVS"; printf '%s|%s\n' "$MULTI" "$Q"`})
			want := []string{tt.file, "a $HOME", "b|it's"}
			if tt.file == "" {
				want[0] = "/tmp/.opensandbox/.env"
			}
			if strings.Join(run.Stdout, "\n") != strings.Join(want, "\n") {
				t.Errorf("stdout %q, want %q", run.Stdout, want)
			}
		})
	}
}
