package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestDiagnosticScopes checks upstream's descriptors for scoped logs and
// events, the 400 for scopes the Docker runtime does not have, and the
// plain text without a scope.
func TestDiagnosticScopes(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	e.rt.SetLogs("one\ntwo\nthree\n")
	base := "/v1/sandboxes/" + id + "/diagnostics/"
	descriptor := func(path string) diagnostic {
		t.Helper()
		r := e.do(t, http.MethodGet, base+path, "", nil)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %q %s", path, r.status, r.header.Get("Content-Type"), r.body)
		}
		var d diagnostic
		if err := json.Unmarshal(r.body, &d); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"sandboxId", "kind", "scope", "delivery", "contentType", "content", "truncated"} {
			if _, ok := r.json(t)[k]; !ok {
				t.Errorf("%s: no %s in %s", path, k, r.body)
			}
		}
		if d.SandboxID != id || d.Delivery != "inline" || d.ContentType != "text/plain; charset=utf-8" || d.ContentLength != len(d.Content) {
			t.Errorf("%s: descriptor %+v", path, d)
		}
		return d
	}

	d := descriptor("logs?scope=container")
	if d.Kind != "logs" || d.Scope != "container" || d.Content != "one\ntwo\nthree\n" || d.Truncated || d.Warnings != nil {
		t.Errorf("logs?scope=container: %+v", d)
	}
	d = descriptor("logs?scope=%20ALL%20&tail=2")
	if d.Scope != "all" || d.Content != "two\nthree\n" || !d.Truncated || len(d.Warnings) != 1 {
		t.Errorf("logs?scope=ALL&tail=2: %+v", d)
	}
	if d := descriptor("logs?scope=container&tail=3"); d.Truncated {
		t.Errorf("logs?tail=3 of 3 lines: truncated")
	}
	d = descriptor("events?scope=runtime")
	if d.Kind != "events" || d.Scope != "runtime" || !strings.Contains(d.Content, "Status:     running") || !strings.Contains(d.Content, "Started:    ") || d.Warnings != nil {
		t.Errorf("events?scope=runtime: %+v", d)
	}
	if d := descriptor("events?scope=all&limit=1"); !d.Truncated || strings.Contains(d.Content, "\n") || len(d.Warnings) != 1 {
		t.Errorf("events?scope=all&limit=1: %+v", d)
	}

	for _, path := range []string{"logs?scope=lifecycle", "logs?scope=", "events?scope=lifecycle", "events?scope=network"} {
		wantError(t, e.do(t, http.MethodGet, base+path, "", nil), http.StatusBadRequest, codeScopeUnsupported)
	}
	wantError(t, e.do(t, http.MethodGet, "/v1/sandboxes/nope/diagnostics/events?scope=runtime", "", nil), http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	if r := e.do(t, http.MethodGet, base+"events?limit=0", "", nil); r.status != http.StatusUnprocessableEntity {
		t.Errorf("events?limit=0: %d %s", r.status, r.body)
	}

	r := e.do(t, http.MethodGet, base+"events", "", nil)
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") || r.header.Get("Deprecation") != "true" || !strings.Contains(string(r.body), "Container:  ") {
		t.Errorf("events without scope: %d %v %q", r.status, r.header, r.body)
	}
}
