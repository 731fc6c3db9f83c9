package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// Upstream 1.1.1's routes and create fields (reference upstream-1.1.1.md
// §1, §3, §4).

func TestMetricsEvent(t *testing.T) {
	e := newEnv(t, nil)
	sdk := map[string]string{"User-Agent": "OpenSandbox-JS-SDK/0.1.11"}
	for _, body := range []string{
		`{"eventType":"sandbox.create","createDurationMs":1234,"success":true,"sandboxId":"abc","image":"busybox"}`,
		`{"eventType":"sandbox.create","createDurationMs":0,"success":false}`,
		`{"eventType":"sandbox.kill","durationMs":5,"success":true,"sdkLanguage":"python","sdkVersion":"1.1.0"}`,
		`{}`,
	} {
		r := e.do(t, http.MethodPost, "/v1/metrics/events", body, sdk)
		if r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Errorf("%s: %d %q, want 204 and no body", body, r.status, r.body)
		}
	}
	for _, tt := range []struct{ name, body string }{
		{"not JSON", `{"eventType":`},
		{"an array", `[1,2]`},
		{"null", `null`},
		{"a string for the duration", `{"createDurationMs":"12"}`},
		{"a negative duration", `{"durationMs":-1}`},
		{"a number for the type", `{"eventType":7}`},
		{"a string for success", `{"success":"yes"}`},
	} {
		wantError(t, e.do(t, http.MethodPost, "/v1/metrics/events", tt.body, sdk), http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter)
	}
	wantError(t, e.do(t, http.MethodPost, "/v1/metrics/events", "", nil), http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter)
	big := `{"image":"` + strings.Repeat("a", maxEventBytes) + `"}`
	wantError(t, e.do(t, http.MethodPost, "/v1/metrics/events", big, nil), http.StatusRequestEntityTooLarge, "GENERAL::REQUEST_TOO_LARGE")
	wantError(t, e.do(t, http.MethodPost, "/v1/metrics/events", `{}`, map[string]string{"Content-Type": "text/plain"}), http.StatusUnsupportedMediaType, codeUnsupportedMedia)
	// Not exempt from authentication, and only under /v1, as upstream.
	wantError(t, e.do(t, http.MethodPost, "/v1/metrics/events", `{}`, map[string]string{headerAPIKey: ""}), http.StatusUnauthorized, "MISSING_API_KEY")
	wantError(t, e.do(t, http.MethodPost, "/metrics/events", `{}`, nil), http.StatusNotFound, "GENERAL::NOT_FOUND")
	wantError(t, e.do(t, http.MethodGet, "/v1/metrics/events", "", nil), http.StatusMethodNotAllowed, "GENERAL::METHOD_NOT_ALLOWED")
}

func TestTemplateRoutes(t *testing.T) {
	e := newEnv(t, nil)
	for _, prefix := range []string{"", "/v1"} {
		for _, tt := range []struct{ method, path, body string }{
			{http.MethodPost, "/templates", `{"name":"t","image":{"uri":"busybox"}}`},
			{http.MethodGet, "/templates", ""},
			{http.MethodGet, "/templates?page=2&pageSize=200&metadata=a%3Db", ""},
			{http.MethodGet, "/templates/t-1", ""},
			{http.MethodDelete, "/templates/t-1", ""},
		} {
			r := e.do(t, tt.method, prefix+tt.path, tt.body, nil)
			wantError(t, r, http.StatusNotImplemented, lifecycle.CodeTemplateUnsupported)
			if msg := r.json(t)["message"]; msg != "Template management requires the kubernetes runtime." {
				t.Errorf("%s %s: message %q", tt.method, tt.path, msg)
			}
		}
	}
	// Authentication first, then the request's validation, then 501.
	wantError(t, e.do(t, http.MethodGet, "/v1/templates", "", map[string]string{headerAPIKey: ""}), http.StatusUnauthorized, "MISSING_API_KEY")
	wantError(t, e.do(t, http.MethodDelete, "/v1/templates/x", "", map[string]string{headerAPIKey: "wrong"}), http.StatusUnauthorized, "INVALID_API_KEY")
	wantError(t, e.do(t, http.MethodGet, "/v1/templates?pageSize=201", "", nil), http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter)
	wantError(t, e.do(t, http.MethodGet, "/v1/templates?page=x", "", nil), http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter)
	wantError(t, e.do(t, http.MethodPost, "/v1/templates", `{"name":`, nil), http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter)
	wantError(t, e.do(t, http.MethodPost, "/v1/templates", `[]`, nil), http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter)
	wantError(t, e.do(t, http.MethodPost, "/v1/templates", "", nil), http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter)
}

func TestCreateUpstreamOnlyFields(t *testing.T) {
	e := newEnv(t, nil)
	const policy = `"networkPolicy":{"defaultAction":"deny","egress":[]}`
	tests := []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"template without an image", `{"templateId":"x","timeout":600}`, http.StatusNotImplemented, lifecycle.CodeTemplateUnsupported, "requires the kubernetes runtime"},
		{"template beside an image", `{"templateId":"x","image":{"uri":"busybox"},"entrypoint":["sh"]}`, http.StatusNotImplemented, lifecycle.CodeTemplateUnsupported, "requires the kubernetes runtime"},
		{"credential proxy without a policy", `{"credentialProxy":{"enabled":true},"image":{"uri":"busybox"},"entrypoint":["sh"]}`, http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter, "requires networkPolicy"},
		{"credential proxy with a pool", `{"credentialProxy":{"enabled":true},` + policy + `,"extensions":{"poolRef":"p"}}`, http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter, "poolRef"},
		{"credential proxy before a template", `{"credentialProxy":{"enabled":true},"templateId":"x"}`, http.StatusUnprocessableEntity, lifecycle.CodeInvalidParameter, "requires networkPolicy"},
		{"credential proxy with a policy", `{"credentialProxy":{"enabled":true},` + policy + `,"image":{"uri":"busybox"},"entrypoint":["sh"]}`, http.StatusBadRequest, lifecycle.CodeInvalidParameter, "credentialProxy is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, http.MethodPost, "/v1/sandboxes", tt.body, nil)
			wantError(t, r, tt.status, tt.code)
			if msg, _ := r.json(t)["message"].(string); !strings.Contains(msg, tt.msg) {
				t.Errorf("message %q lacks %q", msg, tt.msg)
			}
		})
	}
	if l, _ := e.rt.List(t.Context(), nil); len(l) != 0 {
		t.Errorf("refused creates left %d containers", len(l))
	}
	// Blank or disabled fields change nothing.
	for _, body := range []string{
		`{"templateId":"  ","image":{"uri":"busybox"},"entrypoint":["sh"]}`,
		`{"credentialProxy":{"enabled":false},"image":{"uri":"busybox"},"entrypoint":["sh"]}`,
		`{"credentialProxy":null,"image":{"uri":"busybox"},"entrypoint":["sh"]}`,
	} {
		if r := e.do(t, http.MethodPost, "/v1/sandboxes", body, nil); r.status != http.StatusAccepted {
			t.Errorf("%s: %d %s", body, r.status, r.body)
		}
	}
}
