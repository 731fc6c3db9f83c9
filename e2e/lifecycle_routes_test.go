//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLifecycleRoutes exercises every route on existing sandboxes, with
// success and error cases, on one server. The subtests run in order and
// share three sandboxes:
//
//	a: TTL, prints three lines at start (logs, renew, delete)
//	b: TTL (list, patch, pause/resume, delete while paused)
//	c: manual cleanup, created at the root path
func TestLifecycleRoutes(t *testing.T) {
	s := startServer(t)
	suite := "routes-" + randomHex(t, 4)
	md := func(idx string) map[string]string { return map[string]string{"suite": suite, "idx": idx} }
	a := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
		"entrypoint": []string{"sh", "-c", "echo line-1; echo line-2; echo hello-log; exec tail -f /dev/null"},
		"metadata":   md("0"),
	}))
	b := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"metadata": md("1")}))
	c := createSandbox(t, s, "/sandboxes", busyboxWith(map[string]any{"metadata": md("2"), "timeout": nil}))
	unknown := "00000000-0000-4000-8000-000000000000"

	t.Run("get", func(t *testing.T) {
		for _, prefix := range []string{"/v1", ""} {
			for _, want := range []lcSandbox{a, b, c} {
				got := getSandbox(t, s, prefix, want.ID)
				if got.ID != want.ID || got.Status.State != "Running" || !maps.Equal(got.Metadata, want.Metadata) {
					t.Errorf("GET %s/sandboxes/%s = %+v, want it Running with metadata %v", prefix, want.ID, got, want.Metadata)
				}
			}
			doError(t, s, http.MethodGet, prefix+"/sandboxes/"+unknown, nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
		}
	})

	t.Run("list", func(t *testing.T) {
		filter := func(kv ...string) string { // the nested, URL-encoded metadata filter
			return "metadata=" + url.QueryEscape(strings.Join(kv, "&"))
		}
		newestFirst := []string{c.ID, b.ID, a.ID}
		// A list item is the same Sandbox object as GET returns.
		for _, item := range listSandboxes(t, s, "/v1", filter("suite="+suite)).Items {
			if got := getSandbox(t, s, "/v1", item.ID); !reflect.DeepEqual(item, got) {
				l, _ := json.Marshal(item)
				g, _ := json.Marshal(got)
				t.Errorf("list item and GET of %s differ:\nlist %s\n GET %s", item.ID, l, g)
			}
		}
		for _, prefix := range []string{"/v1", ""} {
			l := listSandboxes(t, s, prefix, filter("suite="+suite))
			if got := ids(l.Items); !slices.Equal(got, newestFirst) {
				t.Errorf("%s list by suite: ids %v, want newest first %v", prefix, got, newestFirst)
			}
			if want := (lcPage{Page: 1, PageSize: 20, TotalItems: 3, TotalPages: 1}); l.Pagination != want {
				t.Errorf("%s list by suite: pagination %+v, want %+v", prefix, l.Pagination, want)
			}
		}
		for _, state := range []string{"Running", "running", "RUNNING"} {
			l := listSandboxes(t, s, "/v1", "state="+state+"&"+filter("suite="+suite))
			if len(l.Items) != 3 {
				t.Errorf("list state=%s: %d items, want 3", state, len(l.Items))
			}
		}
		if l := listSandboxes(t, s, "/v1", "state=Paused&"+filter("suite="+suite)); len(l.Items) != 0 {
			t.Errorf("list state=Paused: ids %v, want none", ids(l.Items))
		}
		if l := listSandboxes(t, s, "/v1", "state=Paused&state=running&"+filter("suite="+suite)); len(l.Items) != 3 {
			t.Errorf("list state=Paused&state=running (OR): %d items, want 3", len(l.Items))
		}
		if l := listSandboxes(t, s, "/v1", filter("suite="+suite, "idx=1")); !slices.Equal(ids(l.Items), []string{b.ID}) {
			t.Errorf("list suite and idx=1: ids %v, want [%s]", ids(l.Items), b.ID)
		}
		if l := listSandboxes(t, s, "/v1", filter("suite="+suite, "idx=7")); len(l.Items) != 0 || l.Pagination.TotalPages != 0 {
			t.Errorf("list idx=7: %+v, want no items and 0 pages", l)
		}

		p1 := listSandboxes(t, s, "/v1", filter("suite="+suite)+"&page=1&pageSize=2")
		if want := (lcPage{Page: 1, PageSize: 2, TotalItems: 3, TotalPages: 2, HasNextPage: true}); p1.Pagination != want {
			t.Errorf("page 1: pagination %+v, want %+v", p1.Pagination, want)
		}
		p2 := listSandboxes(t, s, "/v1", filter("suite="+suite)+"&page=2&pageSize=2")
		if want := (lcPage{Page: 2, PageSize: 2, TotalItems: 3, TotalPages: 2}); p2.Pagination != want {
			t.Errorf("page 2: pagination %+v, want %+v", p2.Pagination, want)
		}
		if got := append(ids(p1.Items), ids(p2.Items)...); !slices.Equal(got, newestFirst) {
			t.Errorf("pages 1 and 2: ids %v, want %v", got, newestFirst)
		}
		if p3 := listSandboxes(t, s, "/v1", filter("suite="+suite)+"&page=3&pageSize=2"); len(p3.Items) != 0 || p3.Pagination.HasNextPage {
			t.Errorf("page 3 (past the end): %+v, want no items", p3)
		}

		doError(t, s, http.MethodGet, "/v1/sandboxes?pageSize=201", nil, http.StatusUnprocessableEntity, "")
		doError(t, s, http.MethodGet, "/v1/sandboxes?page=0", nil, http.StatusUnprocessableEntity, "")
		doError(t, s, http.MethodGet, "/v1/sandboxes?pageSize=ten", nil, http.StatusUnprocessableEntity, "")
		for _, bad := range []string{"suite", "=x", "suite=" + suite + "&&idx=1"} {
			doError(t, s, http.MethodGet, "/v1/sandboxes?metadata="+url.QueryEscape(bad), nil, http.StatusBadRequest, "INVALID_METADATA_FORMAT")
		}
	})

	t.Run("patch metadata", func(t *testing.T) {
		path := sandboxPath(b.ID, "/metadata")
		patch := func(prefix string, body any, want map[string]string) {
			t.Helper()
			p := prefix + "/sandboxes/" + b.ID + "/metadata"
			status, _, data := s.do(t, http.MethodPatch, p, body, nil)
			if status != http.StatusOK {
				t.Fatalf("PATCH %s %v: status %d, want 200; body %s", p, body, status, data)
			}
			assertNoNulls(t, "PATCH "+p, data)
			if got := decodeJSON[lcSandbox](t, data); got.ID != b.ID || !maps.Equal(got.Metadata, want) {
				t.Errorf("PATCH %s %v: id %s metadata %v, want %s %v", p, body, got.ID, got.Metadata, b.ID, want)
			}
			if got := getSandbox(t, s, "/v1", b.ID); !maps.Equal(got.Metadata, want) {
				t.Errorf("GET after PATCH %v: metadata %v, want %v", body, got.Metadata, want)
			}
		}
		want := md("1")
		want["team"] = "blue"
		patch("/v1", map[string]any{"team": "blue"}, want)
		want["team"] = "green"
		patch("", map[string]any{"team": "green"}, want)
		if l := listSandboxes(t, s, "/v1", "metadata="+url.QueryEscape("team=green&suite="+suite)); !slices.Equal(ids(l.Items), []string{b.ID}) {
			t.Errorf("list by patched metadata: ids %v, want [%s]", ids(l.Items), b.ID)
		}
		delete(want, "team")
		patch("/v1", map[string]any{"team": nil, "never-set": nil}, want)
		patch("/v1", map[string]any{}, want)

		doError(t, s, http.MethodPatch, path, map[string]any{"opensandbox.io/expires-at": "never"}, http.StatusBadRequest, "INVALID_METADATA_LABEL")
		doError(t, s, http.MethodPatch, path, map[string]any{"team": "not a label"}, http.StatusBadRequest, "SANDBOX::INVALID_METADATA_LABEL")
		for _, bad := range []string{`{"team":`, `["team"]`, `{"team":1}`} {
			doError(t, s, http.MethodPatch, path, bad, http.StatusUnprocessableEntity, "")
		}
		doError(t, s, http.MethodPatch, sandboxPath(unknown, "/metadata"), map[string]any{"team": "x"}, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
		if got := getSandbox(t, s, "/v1", b.ID); !maps.Equal(got.Metadata, want) {
			t.Errorf("rejected patches changed the metadata to %v, want %v", got.Metadata, want)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		for _, prefix := range []string{"/v1", ""} {
			base := prefix + "/sandboxes/" + b.ID
			wantEmpty(t, s, http.MethodPost, base+"/pause", http.StatusAccepted)
			if got := getSandbox(t, s, prefix, b.ID); got.Status.State != "Paused" {
				t.Errorf("after pause: state %q, want Paused", got.Status.State)
			}
			if ctr := sandboxContainer(t, b.ID); !ctr.State.Paused {
				t.Errorf("after pause: Docker says the container is %s, not paused", ctr.State.Status)
			}
			doError(t, s, http.MethodPost, base+"/pause", nil, http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")

			wantEmpty(t, s, http.MethodPost, base+"/resume", http.StatusAccepted)
			if got := getSandbox(t, s, prefix, b.ID); got.Status.State != "Running" {
				t.Errorf("after resume: state %q, want Running", got.Status.State)
			}
			doError(t, s, http.MethodPost, base+"/resume", nil, http.StatusConflict, "DOCKER::SANDBOX_NOT_PAUSED")
		}
		if got := runCommand(t, s, b.ID, "echo resumed-ok"); got != "resumed-ok" {
			t.Errorf("command after resume printed %q, want resumed-ok", got)
		}
		doError(t, s, http.MethodPost, sandboxPath(unknown, "/pause"), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
		doError(t, s, http.MethodPost, sandboxPath(unknown, "/resume"), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	})

	t.Run("renew expiration", func(t *testing.T) {
		for i, prefix := range []string{"/v1", ""} {
			// The Python SDK's isoformat(): microseconds and +00:00.
			at := time.Now().Add(time.Duration(45+i) * time.Minute).UTC().Truncate(time.Microsecond)
			p := prefix + "/sandboxes/" + a.ID + "/renew-expiration"
			status, _, body := s.do(t, http.MethodPost, p, map[string]string{"expiresAt": at.Format("2006-01-02T15:04:05.000000-07:00")}, nil)
			if status != http.StatusOK {
				t.Fatalf("POST %s: status %d, want 200; body %s", p, status, body)
			}
			assertNoNulls(t, "POST "+p, body)
			got := decodeJSON[struct {
				ExpiresAt string `json:"expiresAt"`
			}](t, body)
			if ts := parseUTC(t, "renew response expiresAt", got.ExpiresAt); !ts.Equal(at) {
				t.Errorf("renew response expiresAt %s, want %s", got.ExpiresAt, at.Format(time.RFC3339Nano))
			}
			if sb := getSandbox(t, s, "/v1", a.ID); sb.ExpiresAt != got.ExpiresAt {
				t.Errorf("GET after renew: expiresAt %q, want %q", sb.ExpiresAt, got.ExpiresAt)
			}
		}
		renew := func(at time.Time) map[string]string {
			return map[string]string{"expiresAt": at.UTC().Format(time.RFC3339Nano)}
		}
		before := getSandbox(t, s, "/v1", a.ID).ExpiresAt
		doError(t, s, http.MethodPost, sandboxPath(a.ID, "/renew-expiration"), renew(time.Now().Add(-time.Minute)), http.StatusBadRequest, "DOCKER::INVALID_EXPIRATION")
		doError(t, s, http.MethodPost, sandboxPath(a.ID, "/renew-expiration"), map[string]string{"expiresAt": "tomorrow"}, http.StatusUnprocessableEntity, "")
		doError(t, s, http.MethodPost, sandboxPath(a.ID, "/renew-expiration"), map[string]string{}, http.StatusUnprocessableEntity, "")
		if after := getSandbox(t, s, "/v1", a.ID).ExpiresAt; after != before {
			t.Errorf("rejected renewals moved expiresAt from %s to %s", before, after)
		}
		doError(t, s, http.MethodPost, sandboxPath(c.ID, "/renew-expiration"), renew(time.Now().Add(time.Hour)), http.StatusConflict, "DOCKER::INVALID_EXPIRATION")
		if sb := getSandbox(t, s, "/v1", c.ID); sb.ExpiresAt != "" {
			t.Errorf("manual-cleanup sandbox got expiresAt %s from a refused renewal", sb.ExpiresAt)
		}
		doError(t, s, http.MethodPost, sandboxPath(unknown, "/renew-expiration"), renew(time.Now().Add(time.Hour)), http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	})

	t.Run("endpoints", func(t *testing.T) {
		for _, prefix := range []string{"/v1", ""} {
			for _, port := range []int{44772, 18080, 8080} {
				for _, proxy := range []string{"", "?use_server_proxy=false", "?use_server_proxy=true"} {
					ep := getEndpoint(t, s, s.Addr, fmt.Sprintf("%s/sandboxes/%s/endpoints/%d%s", prefix, a.ID, port, proxy))
					if want := fmt.Sprintf("%s/sandboxes/%s/proxy/%d", s.Addr, a.ID, port); ep.Endpoint != want {
						t.Errorf("endpoint %d%s at %q: %q, want %q", port, proxy, prefix, ep.Endpoint, want)
					}
				}
			}
		}
		// The host is the one the client used.
		ep := getEndpoint(t, s, "sandboxd.example:9999", sandboxPath(a.ID, "/endpoints/44772?use_server_proxy=true"))
		if want := "sandboxd.example:9999/sandboxes/" + a.ID + "/proxy/44772"; ep.Endpoint != want {
			t.Errorf("endpoint with Host sandboxd.example:9999: %q, want %q", ep.Endpoint, want)
		}

		// The endpoint works with its headers alone, for its own sandbox only.
		epA := getEndpoint(t, s, s.Addr, sandboxPath(a.ID, "/endpoints/44772"))
		epB := getEndpoint(t, s, s.Addr, sandboxPath(b.ID, "/endpoints/44772"))
		if status := pingEndpoint(t, epA.Endpoint, epA.Headers); status != http.StatusOK {
			t.Errorf("GET %s/ping with the endpoint's headers: status %d, want 200", epA.Endpoint, status)
		}
		if status := pingEndpoint(t, epA.Endpoint, nil); status != http.StatusUnauthorized {
			t.Errorf("GET %s/ping without credentials: status %d, want 401", epA.Endpoint, status)
		}
		if status := pingEndpoint(t, epB.Endpoint, epA.Headers); status != http.StatusUnauthorized {
			t.Errorf("GET %s/ping with sandbox a's headers: status %d, want 401", epB.Endpoint, status)
		}

		for _, port := range []string{"0", "70000"} {
			doError(t, s, http.MethodGet, sandboxPath(a.ID, "/endpoints/"+port), nil, http.StatusBadRequest, "DOCKER::INVALID_PORT")
		}
		doError(t, s, http.MethodGet, sandboxPath(a.ID, "/endpoints/http"), nil, http.StatusUnprocessableEntity, "")
		doError(t, s, http.MethodGet, sandboxPath(unknown, "/endpoints/44772"), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
		doError(t, s, http.MethodGet, "/sandboxes/"+unknown+"/endpoints/44772?use_server_proxy=true", nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	})

	t.Run("diagnostics logs", func(t *testing.T) {
		var all string
		waitUntil(t, stateWait, "hello-log in the logs of "+a.ID, func() bool {
			all = string(wantText(t, s, sandboxPath(a.ID, "/diagnostics/logs")))
			return strings.Contains(all, "hello-log")
		})
		if want := "line-1\nline-2\nhello-log\n"; all != want {
			t.Errorf("logs: %q, want %q", all, want)
		}
		for _, prefix := range []string{"/v1", ""} {
			if got := string(wantText(t, s, prefix+"/sandboxes/"+a.ID+"/diagnostics/logs?tail=1")); got != "hello-log\n" {
				t.Errorf("%s logs?tail=1: %q, want %q", prefix, got, "hello-log\n")
			}
		}
		doError(t, s, http.MethodGet, sandboxPath(a.ID, "/diagnostics/logs?scope=lifecycle"), nil, http.StatusBadRequest, "DIAGNOSTICS_SCOPE_UNSUPPORTED")
		doError(t, s, http.MethodGet, sandboxPath(a.ID, "/diagnostics/logs?tail=0"), nil, http.StatusUnprocessableEntity, "")
		doError(t, s, http.MethodGet, sandboxPath(unknown, "/diagnostics/logs"), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	})

	t.Run("delete", func(t *testing.T) {
		wantEmpty(t, s, http.MethodDelete, sandboxPath(a.ID), http.StatusNoContent)
		assertGone(t, s, a.ID)
		doError(t, s, http.MethodDelete, sandboxPath(a.ID), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")

		wantEmpty(t, s, http.MethodDelete, "/sandboxes/"+c.ID, http.StatusNoContent)
		assertGone(t, s, c.ID)
		doError(t, s, http.MethodDelete, "/sandboxes/"+c.ID, nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")

		wantEmpty(t, s, http.MethodPost, sandboxPath(b.ID, "/pause"), http.StatusAccepted)
		wantEmpty(t, s, http.MethodDelete, sandboxPath(b.ID), http.StatusNoContent)
		assertGone(t, s, b.ID)

		if l := listSandboxes(t, s, "/v1", "metadata="+url.QueryEscape("suite="+suite)); len(l.Items) != 0 {
			t.Errorf("list after deleting all: ids %v, want none", ids(l.Items))
		}
	})
}

// TestLifecycleAuth checks the API key and X-Request-ID on the lifecycle
// API, and that /health needs no key.
func TestLifecycleAuth(t *testing.T) {
	s := startServer(t)
	anonymous := map[string]string{apiKeyHeader: ""}
	generatedID := regexp.MustCompile(`^[0-9a-f]{32}$`)

	for _, key := range []string{"", "wrong-" + s.APIKey} {
		status, hdr, body := s.do(t, http.MethodGet, "/health", nil, map[string]string{apiKeyHeader: key})
		if status != http.StatusOK || decodeJSON[map[string]string](t, body)["status"] != "healthy" {
			t.Errorf("GET /health with key %q: status %d body %s, want 200 healthy", key, status, body)
		}
		if hdr.Get("X-Request-ID") == "" {
			t.Error("GET /health: no X-Request-ID")
		}
	}

	tests := []struct {
		name    string
		method  string
		path    string
		headers map[string]string
		code    string
	}{
		{"no key, list", http.MethodGet, "/v1/sandboxes", anonymous, "MISSING_API_KEY"},
		{"no key, root list", http.MethodGet, "/sandboxes", anonymous, "MISSING_API_KEY"},
		{"no key, create", http.MethodPost, "/v1/sandboxes", anonymous, "MISSING_API_KEY"},
		{"no key, get", http.MethodGet, "/v1/sandboxes/x", anonymous, "MISSING_API_KEY"},
		{"no key, snapshots", http.MethodGet, "/v1/snapshots", anonymous, "MISSING_API_KEY"},
		{"wrong key, list", http.MethodGet, "/v1/sandboxes", map[string]string{apiKeyHeader: "nope"}, "INVALID_API_KEY"},
		{"wrong key, create", http.MethodPost, "/sandboxes", map[string]string{apiKeyHeader: s.APIKey + "x"}, "INVALID_API_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body any
			if tt.method == http.MethodPost {
				body = busyboxRequest()
			}
			status, hdr, data := s.do(t, tt.method, tt.path, body, tt.headers)
			wantError(t, tt.method+" "+tt.path, status, data, http.StatusUnauthorized, tt.code)
			if id := hdr.Get("X-Request-ID"); !generatedID.MatchString(id) {
				t.Errorf("X-Request-ID %q on a 401, want 32 hex digits", id)
			}
		})
	}
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("unauthenticated creates made %d container(s)", len(left))
	}

	t.Run("supplied X-Request-ID is echoed", func(t *testing.T) {
		for _, tc := range []struct {
			path       string
			headers    map[string]string
			wantStatus int
		}{
			{"/v1/sandboxes", map[string]string{apiKeyHeader: ""}, http.StatusUnauthorized},
			{"/v1/sandboxes/unknown", nil, http.StatusNotFound},
			{"/sandboxes", nil, http.StatusOK},
		} {
			reqID := "e2e-" + randomHex(t, 8)
			headers := map[string]string{"X-Request-ID": reqID}
			maps.Copy(headers, tc.headers)
			status, hdr, body := s.do(t, http.MethodGet, tc.path, nil, headers)
			if status != tc.wantStatus {
				t.Errorf("GET %s: status %d, want %d; body %s", tc.path, status, tc.wantStatus, body)
			}
			if got := hdr.Get("X-Request-ID"); got != reqID {
				t.Errorf("GET %s (%d): X-Request-ID %q, want %q", tc.path, status, got, reqID)
			}
		}
	})
}

// TestLifecycleEndpointEIP checks that [server] eip replaces the host of
// returned endpoints, whatever host the client used.
func TestLifecycleEndpointEIP(t *testing.T) {
	const eip = "sandboxes.example.com:9443"
	s := startServer(t, withTOML("[server]\neip = \""+eip+"\"\n"))
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	for _, port := range []int{44772, 18080} {
		for _, proxy := range []string{"false", "true"} {
			ep := getEndpoint(t, s, s.Addr, sandboxPath(sb.ID, fmt.Sprintf("/endpoints/%d?use_server_proxy=%s", port, proxy)))
			if want := fmt.Sprintf("%s/sandboxes/%s/proxy/%d", eip, sb.ID, port); ep.Endpoint != want {
				t.Errorf("endpoint %d use_server_proxy=%s: %q, want %q", port, proxy, ep.Endpoint, want)
			}
		}
	}
}

// getEndpoint GETs an endpoint route with the given Host header, expects
// 200 and checks that the endpoint has no scheme and carries a token header.
func getEndpoint(t testing.TB, s *Server, host, path string) lcEndpoint {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set(apiKeyHeader, s.APIKey)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s (Host %s): status %d, want 200; body %s", path, host, resp.StatusCode, body)
	}
	assertNoNulls(t, "GET "+path, body)
	ep := decodeJSON[lcEndpoint](t, body)
	if strings.Contains(ep.Endpoint, "://") {
		t.Errorf("GET %s: endpoint %q has a scheme", path, ep.Endpoint)
	}
	if len(ep.Headers) == 0 {
		t.Errorf("GET %s: no headers (the sandbox's access token) in %s", path, body)
	}
	for k, v := range ep.Headers {
		if k == "" || v == "" {
			t.Errorf("GET %s: empty header %q: %q", path, k, v)
		}
	}
	return ep
}

// pingEndpoint sends GET http://<endpoint>/ping with only the given headers
// (no API key) and returns the status.
func pingEndpoint(t testing.TB, endpoint string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+endpoint+"/ping", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", req.URL, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// wantEmpty sends a request without a body and expects the given status
// and an empty response body.
func wantEmpty(t testing.TB, s *Server, method, path string, wantStatus int) {
	t.Helper()
	status, _, body := s.do(t, method, path, nil, nil)
	if status != wantStatus || len(body) != 0 {
		t.Fatalf("%s %s: status %d body %q, want %d with an empty body", method, path, status, body, wantStatus)
	}
}

// wantText GETs a text/plain route, expects 200 and returns the body.
func wantText(t testing.TB, s *Server, path string) []byte {
	t.Helper()
	status, hdr, body := s.do(t, http.MethodGet, path, nil, nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d, want 200; body %s", path, status, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET %s: Content-Type %q, want text/plain", path, ct)
	}
	return body
}
