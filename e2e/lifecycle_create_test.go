//go:build e2e

package e2e

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// maxTimeout is the max_sandbox_timeout_seconds of the create tests' server.
const maxTimeout = 3600

// TestLifecycleCreateRejects sends create requests that must fail and then
// checks that none of them left a container or a record behind.
func TestLifecycleCreateRejects(t *testing.T) {
	s := startServer(t, withTOML("[server]\nmax_sandbox_timeout_seconds = 3600\n"))
	missingImage := "sandboxd-test/does-not-exist-" + randomHex(t, 4) + ":latest"
	tests := []struct {
		name       string
		body       any
		wantStatus int
		wantCode   string
		// wantInMessage are substrings the message must contain.
		wantInMessage []string
	}{
		{
			name:       "timeout below 60",
			body:       busyboxWith(map[string]any{"timeout": 59}),
			wantStatus: http.StatusUnprocessableEntity,
		},
		{
			name:       "timeout as a string",
			body:       busyboxWith(map[string]any{"timeout": "600"}),
			wantStatus: http.StatusUnprocessableEntity,
		},
		{
			name:       "malformed JSON",
			body:       `{"image":{"uri":"` + imageBusybox + `"},"entrypoint":["tail"`,
			wantStatus: http.StatusUnprocessableEntity,
		},
		{
			name:       "image without entrypoint",
			body:       busyboxWith(map[string]any{"entrypoint": nil}),
			wantStatus: http.StatusUnprocessableEntity,
		},
		{
			name:       "empty entrypoint",
			body:       busyboxWith(map[string]any{"entrypoint": []string{}}),
			wantStatus: http.StatusUnprocessableEntity,
		},
		{
			name:       "neither image nor snapshotId",
			body:       busyboxWith(map[string]any{"image": nil}),
			wantStatus: http.StatusUnprocessableEntity,
		},
		{
			name:          "reserved metadata prefix",
			body:          busyboxWith(map[string]any{"metadata": map[string]string{"opensandbox.io/id": "mine"}}),
			wantStatus:    http.StatusBadRequest,
			wantCode:      "SANDBOX::INVALID_METADATA_LABEL",
			wantInMessage: []string{"opensandbox.io/"},
		},
		{
			name:       "metadata value that is not a label value",
			body:       busyboxWith(map[string]any{"metadata": map[string]string{"team": "has spaces"}}),
			wantStatus: http.StatusBadRequest,
			wantCode:   "SANDBOX::INVALID_METADATA_LABEL",
		},
		{
			name:          "bad cpu limit",
			body:          busyboxWith(map[string]any{"resourceLimits": map[string]string{"cpu": "lots", "memory": "512Mi"}}),
			wantStatus:    http.StatusBadRequest,
			wantCode:      "SANDBOX::INVALID_PARAMETER",
			wantInMessage: []string{"cpu", "lots"},
		},
		{
			name:          "bad memory limit",
			body:          busyboxWith(map[string]any{"resourceLimits": map[string]string{"cpu": "1", "memory": "plenty"}}),
			wantStatus:    http.StatusBadRequest,
			wantCode:      "SANDBOX::INVALID_PARAMETER",
			wantInMessage: []string{"memory", "plenty"},
		},
		{
			name:          "timeout over max_sandbox_timeout_seconds",
			body:          busyboxWith(map[string]any{"timeout": maxTimeout + 1}),
			wantStatus:    http.StatusBadRequest,
			wantCode:      "SANDBOX::INVALID_PARAMETER",
			wantInMessage: []string{"3601", "3600"},
		},
		{
			name:          "image neither local nor pullable",
			body:          busyboxWith(map[string]any{"image": map[string]string{"uri": missingImage}}),
			wantStatus:    http.StatusInternalServerError,
			wantCode:      "DOCKER::SANDBOX_IMAGE_PULL_FAILED",
			wantInMessage: []string{missingImage},
		},
	}
	for _, tt := range tests {
		for _, prefix := range []string{"/v1", ""} {
			t.Run(tt.name+" at "+prefix+"/sandboxes", func(t *testing.T) {
				msg := doError(t, s, http.MethodPost, prefix+"/sandboxes", tt.body, tt.wantStatus, tt.wantCode)
				for _, want := range tt.wantInMessage {
					if !strings.Contains(msg, want) {
						t.Errorf("message %q does not mention %q", msg, want)
					}
				}
			})
		}
	}

	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("rejected creates left %d container(s) behind", len(left))
	}
	if l := listSandboxes(t, s, "/v1", ""); l.Pagination.TotalItems != 0 || len(l.Items) != 0 {
		t.Errorf("rejected creates left records behind: %+v", l)
	}
}

// TestLifecycleCreate checks the 202 body of a create with a TTL and of a
// manual-cleanup create, that GET agrees at / and /v1, and the lifecycle of
// a sandbox whose image has no shell.
func TestLifecycleCreate(t *testing.T) {
	s := startServer(t, withTOML("[server]\nmax_sandbox_timeout_seconds = 3600\n"))

	t.Run("with timeout", func(t *testing.T) {
		entrypoint := []string{"sh", "-c", "exec tail -f /dev/null"}
		metadata := map[string]string{"team": "core", "example.com/owner": "e2e-" + randomHex(t, 3)}
		sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
			"entrypoint": entrypoint,
			"metadata":   metadata,
			"timeout":    maxTimeout,
			"env":        map[string]any{"GREETING": "hi", "DROPPED": nil},
		}))
		if sb.Status.State != "Running" {
			t.Errorf("state %q, want Running", sb.Status.State)
		}
		if !slices.Equal(sb.Entrypoint, entrypoint) {
			t.Errorf("entrypoint %q, want %q", sb.Entrypoint, entrypoint)
		}
		if !maps.Equal(sb.Metadata, metadata) {
			t.Errorf("metadata %v, want %v", sb.Metadata, metadata)
		}
		created := parseUTC(t, "createdAt", sb.CreatedAt)
		expires := parseUTC(t, "expiresAt", sb.ExpiresAt)
		if got := expires.Sub(created); got != maxTimeout*time.Second {
			t.Errorf("expiresAt - createdAt = %s, want %ds", got, maxTimeout)
		}
		parseUTC(t, "status.lastTransitionAt", sb.Status.LastTransitionAt)

		for _, prefix := range []string{"/v1", ""} {
			got := getSandbox(t, s, prefix, sb.ID)
			if got.ID != sb.ID || got.Status.State != "Running" || got.ExpiresAt != sb.ExpiresAt || got.CreatedAt != sb.CreatedAt {
				t.Errorf("GET %s/sandboxes/%s = %+v, want the created sandbox Running", prefix, sb.ID, got)
			}
			if !slices.Equal(got.Entrypoint, entrypoint) || !maps.Equal(got.Metadata, metadata) {
				t.Errorf("GET %s/sandboxes/%s: entrypoint %q metadata %v, want %q %v", prefix, sb.ID, got.Entrypoint, got.Metadata, entrypoint, metadata)
			}
		}

		q := "metadata=" + url.QueryEscape("example.com/owner="+metadata["example.com/owner"])
		if l := listSandboxes(t, s, "/v1", q); !slices.Equal(ids(l.Items), []string{sb.ID}) {
			t.Errorf("list %s: ids %v, want [%s]", q, ids(l.Items), sb.ID)
		}

		ctr := sandboxContainer(t, sb.ID)
		if !ctr.State.Running {
			t.Errorf("container is %s, want running", ctr.State.Status)
		}
		if !slices.Contains(ctr.Config.Env, "GREETING=hi") || slices.ContainsFunc(ctr.Config.Env, func(e string) bool { return strings.HasPrefix(e, "DROPPED=") }) {
			t.Errorf("container env %q: want GREETING=hi and no DROPPED", ctr.Config.Env)
		}
		if got := runCommand(t, s, sb.ID, "echo $GREETING"); got != "hi" {
			t.Errorf("echo $GREETING in the sandbox printed %q, want hi", got)
		}
	})

	t.Run("manual cleanup at the root path", func(t *testing.T) {
		// "timeout": null asks for a sandbox without expiry.
		sb := createSandbox(t, s, "/sandboxes", busyboxWith(map[string]any{"timeout": nil}))
		raw := decodeJSON[map[string]any](t, getBody(t, s, "/sandboxes/"+sb.ID))
		if _, ok := raw["expiresAt"]; ok || sb.ExpiresAt != "" {
			t.Errorf("manual-cleanup sandbox has expiresAt %v, want the key omitted", raw["expiresAt"])
		}
		parseUTC(t, "createdAt", sb.CreatedAt)
		if got := getSandbox(t, s, "/v1", sb.ID); got.ID != sb.ID || got.Status.State != "Running" {
			t.Errorf("GET = %+v, want %s Running", got, sb.ID)
		}
		ctr := sandboxContainer(t, sb.ID)
		if ctr.Config.Labels["opensandbox.io/manual-cleanup"] != "true" {
			t.Errorf("container labels %v: want opensandbox.io/manual-cleanup=true", ctr.Config.Labels)
		}
	})

	t.Run("image without a shell", func(t *testing.T) {
		sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
			"image":      map[string]string{"uri": imageNoShell},
			"entrypoint": []string{"/pause"},
		}))
		if got := getSandbox(t, s, "/v1", sb.ID); got.Status.State != "Running" || !slices.Equal(got.Entrypoint, []string{"/pause"}) {
			t.Errorf("GET = %+v, want Running with entrypoint [/pause]", got)
		}
		wantEmpty(t, s, http.MethodPost, sandboxPath(sb.ID, "/pause"), http.StatusAccepted)
		wantEmpty(t, s, http.MethodPost, sandboxPath(sb.ID, "/resume"), http.StatusAccepted)
		wantEmpty(t, s, http.MethodDelete, sandboxPath(sb.ID), http.StatusNoContent)
		assertGone(t, s, sb.ID)
	})
}
