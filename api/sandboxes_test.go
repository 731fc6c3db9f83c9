package api

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
)

// nullPaths returns the JSON paths of every null in v.
func nullPaths(v any, at string) []string {
	switch x := v.(type) {
	case nil:
		return []string{at}
	case map[string]any:
		var out []string
		for k, e := range x {
			out = append(out, nullPaths(e, at+"."+k)...)
		}
		return out
	case []any:
		var out []string
		for i, e := range x {
			out = append(out, nullPaths(e, fmt.Sprintf("%s[%d]", at, i))...)
		}
		return out
	}
	return nil
}

// rfc3339Z is a UTC RFC 3339 timestamp with an optional fraction and a Z.
var rfc3339Z = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$`)

func TestCreateResponse(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    []string // keys that must be present
		missing []string // keys that must be absent
	}{
		{"ttl with metadata", createBody,
			[]string{"id", "status", "metadata", "entrypoint", "expiresAt", "createdAt", "image"},
			[]string{"platform", "snapshotId"}},
		{"manual cleanup, explicit nulls in the request", `{"image":{"uri":"busybox"},"entrypoint":["sh"],"timeout":null,"metadata":null,"env":{"A":null},"platform":null,"networkPolicy":null,"volumes":null,"extensions":null}`,
			[]string{"id", "status", "entrypoint", "createdAt"},
			[]string{"expiresAt", "metadata", "platform", "snapshotId"}},
		{"platform", `{"image":{"uri":"busybox"},"entrypoint":["sh"],"platform":{"os":"linux","arch":"arm64"}}`,
			[]string{"platform"}, []string{"expiresAt"}},
	}
	e := newEnv(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/sandboxes", tt.body, nil)
			if r.status != http.StatusAccepted {
				t.Fatalf("create = %d %s", r.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			m := r.json(t)
			if nulls := nullPaths(m, "$"); len(nulls) > 0 {
				t.Errorf("response has nulls at %v: %s", nulls, r.body)
			}
			for _, k := range tt.want {
				if _, ok := m[k]; !ok {
					t.Errorf("key %s missing: %s", k, r.body)
				}
			}
			for _, k := range tt.missing {
				if _, ok := m[k]; ok {
					t.Errorf("key %s present: %s", k, r.body)
				}
			}
			status, _ := m["status"].(map[string]any)
			if status["state"] != "Running" || status["reason"] != "CONTAINER_RUNNING" {
				t.Errorf("status = %v", status)
			}
			for _, k := range []string{"createdAt", "expiresAt"} {
				if v, ok := m[k]; ok && !rfc3339Z.MatchString(fmt.Sprint(v)) {
					t.Errorf("%s = %v, want RFC 3339 UTC with Z", k, v)
				}
			}
			if v := fmt.Sprint(status["lastTransitionAt"]); !rfc3339Z.MatchString(v) {
				t.Errorf("status.lastTransitionAt = %v", v)
			}
			// The same shape comes back from GET and from the list.
			id := fmt.Sprint(m["id"])
			got := e.do(t, "GET", "/v1/sandboxes/"+id, "", nil)
			if nulls := nullPaths(got.json(t), "$"); got.status != 200 || len(nulls) > 0 {
				t.Errorf("GET = %d with nulls at %v", got.status, nulls)
			}
		})
	}
	list := e.do(t, "GET", "/v1/sandboxes", "", nil)
	if nulls := nullPaths(list.json(t), "$"); len(nulls) > 0 {
		t.Errorf("list has nulls at %v", nulls)
	}
}

func TestUnprocessable(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	tests := []struct {
		name, method, path, body string
		loc                      []string // expected start of detail[0].loc
	}{
		{"timeout of the wrong type", "POST", "/v1/sandboxes", `{"timeout":"x"}`, []string{"body", "timeout"}},
		{"nested field of the wrong type", "POST", "/v1/sandboxes", `{"image":{"uri":5}}`, []string{"body", "image", "uri"}},
		{"resource limit as a number", "POST", "/v1/sandboxes", `{"image":{"uri":"a"},"entrypoint":["a"],"resourceLimits":{"cpu":1}}`, []string{"body", "resourceLimits"}},
		{"malformed JSON", "POST", "/v1/sandboxes", `{"image":`, nil},
		{"not an object", "POST", "/v1/sandboxes", `[1,2]`, []string{"body"}},
		{"empty body", "POST", "/v1/sandboxes", "", []string{"body"}},
		{"timeout below 60", "POST", "/v1/sandboxes", `{"image":{"uri":"a"},"entrypoint":["a"],"timeout":10}`, []string{"body", "timeout"}},
		{"no image nor snapshot", "POST", "/v1/sandboxes", `{"entrypoint":["a"]}`, []string{"body"}},
		{"empty entrypoint", "POST", "/v1/sandboxes", `{"image":{"uri":"a"},"entrypoint":[]}`, []string{"body", "entrypoint"}},
		{"pageSize 201", "GET", "/v1/sandboxes?pageSize=201", "", []string{"query", "pageSize"}},
		{"pageSize 0", "GET", "/v1/sandboxes?pageSize=0", "", []string{"query", "pageSize"}},
		{"page 0", "GET", "/v1/sandboxes?page=0", "", []string{"query", "page"}},
		{"page not a number", "GET", "/v1/sandboxes?page=abc", "", []string{"query", "page"}},
		{"snapshot list pageSize", "GET", "/v1/snapshots?pageSize=500", "", []string{"query", "pageSize"}},
		{"endpoint port not a number", "GET", "/v1/sandboxes/" + id + "/endpoints/abc", "", []string{"path", "port"}},
		{"renew without expiresAt", "POST", "/v1/sandboxes/" + id + "/renew-expiration", `{}`, []string{"body", "expiresAt"}},
		{"renew with a bad time", "POST", "/v1/sandboxes/" + id + "/renew-expiration", `{"expiresAt":"tomorrow"}`, []string{"body", "expiresAt"}},
		{"patch with a non-string value", "PATCH", "/v1/sandboxes/" + id + "/metadata", `{"a":1}`, []string{"body"}},
		{"snapshot with an empty name", "POST", "/v1/sandboxes/" + id + "/snapshots", `{"name":""}`, []string{"body", "name"}},
		{"logs tail out of range", "GET", "/v1/sandboxes/" + id + "/diagnostics/logs?tail=0", "", []string{"query", "tail"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, tt.method, tt.path, tt.body, nil)
			wantError(t, r, http.StatusUnprocessableEntity, "SANDBOX::INVALID_PARAMETER")
			details, _ := r.json(t)["detail"].([]any)
			if len(details) == 0 {
				t.Fatalf("422 without a detail array: %s", r.body)
			}
			d, _ := details[0].(map[string]any)
			loc, _ := d["loc"].([]any)
			if d["type"] == "" || d["msg"] == "" || len(loc) == 0 {
				t.Errorf("detail = %v, want type, loc and msg", d)
			}
			if len(loc) < len(tt.loc) || fmt.Sprint(loc[:len(tt.loc)]) != fmt.Sprint(tt.loc) {
				t.Errorf("loc = %v, want it to start with %v", loc, tt.loc)
			}
		})
	}
}

func TestBadRequestHasNoDetail(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Server.MaxSandboxTimeoutSeconds = 86400 })
	id := e.create(t)
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"secureAccess", "POST", "/v1/sandboxes", `{"image":{"uri":"a"},"entrypoint":["a"],"secureAccess":true}`, 400, "SANDBOX::INVALID_PARAMETER"},
		{"timeout over max", "POST", "/v1/sandboxes", `{"image":{"uri":"a"},"entrypoint":["a"],"timeout":999999}`, 400, "SANDBOX::INVALID_PARAMETER"},
		{"reserved metadata on create", "POST", "/v1/sandboxes", `{"image":{"uri":"a"},"entrypoint":["a"],"metadata":{"opensandbox.io/x":"y"}}`, 400, "SANDBOX::INVALID_METADATA_LABEL"},
		{"reserved metadata on patch", "PATCH", "/v1/sandboxes/" + id + "/metadata", `{"opensandbox.io/x":"y"}`, 400, "INVALID_METADATA_LABEL"},
		{"malformed metadata filter", "GET", "/v1/sandboxes?metadata=" + "a%3D1%26b", "", 400, "INVALID_METADATA_FORMAT"},
		{"port 0", "GET", "/v1/sandboxes/" + id + "/endpoints/0", "", 400, "DOCKER::INVALID_PORT"},
		{"signed endpoint", "GET", "/v1/sandboxes/" + id + "/endpoints/44772?expires=99", "", 400, "SANDBOX::API_NOT_SUPPORTED"},
		{"signed endpoint through the proxy", "GET", "/v1/sandboxes/" + id + "/endpoints/44772?expires=99&use_server_proxy=true", "", 400, "SANDBOX::INVALID_PARAMETER"},
		{"renew in the past", "POST", "/v1/sandboxes/" + id + "/renew-expiration", `{"expiresAt":"2020-01-01T00:00:00Z"}`, 400, "DOCKER::INVALID_EXPIRATION"},
		{"unknown sandbox", "GET", "/v1/sandboxes/nope", "", 404, "DOCKER::SANDBOX_NOT_FOUND"},
		{"resume a running sandbox", "POST", "/v1/sandboxes/" + id + "/resume", "", 409, "DOCKER::SANDBOX_NOT_PAUSED"},
		{"logs with an unknown scope", "GET", "/v1/sandboxes/" + id + "/diagnostics/logs?scope=lifecycle", "", 400, "DIAGNOSTICS_SCOPE_UNSUPPORTED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, tt.method, tt.path, tt.body, nil)
			wantError(t, r, tt.status, tt.code)
			if _, ok := r.json(t)["detail"]; ok {
				t.Errorf("a %d carries a detail: %s", tt.status, r.body)
			}
		})
	}
}

func TestEmptyBodies(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	tests := []struct {
		method, path string
		status       int
	}{
		{"POST", "/v1/sandboxes/" + id + "/pause", 202},
		{"POST", "/v1/sandboxes/" + id + "/resume", 202},
		{"DELETE", "/v1/sandboxes/" + id, 204},
	}
	for _, tt := range tests {
		r := e.do(t, tt.method, tt.path, "", nil)
		if r.status != tt.status || len(r.body) != 0 {
			t.Errorf("%s %s = %d with body %q, want %d and no body", tt.method, tt.path, r.status, r.body, tt.status)
		}
	}
	wantError(t, e.do(t, "GET", "/v1/sandboxes/"+id, "", nil), 404, "DOCKER::SANDBOX_NOT_FOUND")
	wantError(t, e.do(t, "DELETE", "/v1/sandboxes/"+id, "", nil), 404, "DOCKER::SANDBOX_NOT_FOUND")
}

func TestPauseStates(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	steps := []struct {
		path   string
		status int
		state  string
	}{
		{"/pause", 202, "Paused"},
		{"/pause", 409, "Paused"},
		{"/resume", 202, "Running"},
		{"/resume", 409, "Running"},
	}
	for i, s := range steps {
		r := e.do(t, "POST", "/v1/sandboxes/"+id+s.path, "", nil)
		if r.status != s.status {
			t.Errorf("step %d %s = %d %s, want %d", i, s.path, r.status, r.body, s.status)
		}
		got := e.do(t, "GET", "/v1/sandboxes/"+id, "", nil).json(t)
		if st, _ := got["status"].(map[string]any); st["state"] != s.state {
			t.Errorf("step %d: state %v, want %s", i, st["state"], s.state)
		}
	}
}

func TestEndpointResponse(t *testing.T) {
	tests := []struct {
		name string
		eip  string
		port string
		host func(e *env) string // expected host part
	}{
		{"request host", "", "44772", func(e *env) string { return strings.TrimPrefix(e.srv.URL, "http://") }},
		{"egress port", "", "18080", func(e *env) string { return strings.TrimPrefix(e.srv.URL, "http://") }},
		{"eip", "http://public.example:9000", "8080", func(*env) string { return "public.example:9000" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) { c.Server.EIP = tt.eip })
			id := e.create(t)
			r := e.do(t, "GET", "/v1/sandboxes/"+id+"/endpoints/"+tt.port+"?use_server_proxy=false", "", nil)
			if r.status != 200 {
				t.Fatalf("endpoint = %d %s", r.status, r.body)
			}
			m := r.json(t)
			if len(m) != 2 {
				t.Errorf("keys = %v, want endpoint and headers", m)
			}
			if want := tt.host(e) + "/sandboxes/" + id + "/proxy/" + tt.port; m["endpoint"] != want {
				t.Errorf("endpoint = %v, want %s", m["endpoint"], want)
			}
			// The egress API's port carries the egress token, not the
			// execd token (which does not open it).
			hdr, tok := "X-EXECD-ACCESS-TOKEN", e.mgr.Sandboxes.Token(id)
			if tt.port == "18080" {
				hdr, tok = "OPENSANDBOX-EGRESS-AUTH", e.mgr.Sandboxes.EgressToken(id)
			}
			headers, _ := m["headers"].(map[string]any)
			if len(headers) != 1 || headers[hdr] != tok || tok == e.mgr.Sandboxes.Token(id) && hdr != "X-EXECD-ACCESS-TOKEN" {
				t.Errorf("headers = %v, want only %s", headers, hdr)
			}
		})
	}
}

func TestRenewResponse(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	at := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	tests := []struct {
		name string
		in   string
	}{
		{"python isoformat with offset", at.In(time.FixedZone("x", 2*3600)).Format("2006-01-02T15:04:05.000000-07:00")},
		{"naive is UTC", at.UTC().Format("2006-01-02T15:04:05")},
		{"Z", at.UTC().Format(time.RFC3339)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/sandboxes/"+id+"/renew-expiration", `{"expiresAt":"`+tt.in+`"}`, nil)
			if r.status != 200 {
				t.Fatalf("renew = %d %s", r.status, r.body)
			}
			m := r.json(t)
			if len(m) != 1 || m["expiresAt"] != at.UTC().Format(time.RFC3339) {
				t.Errorf("renew response = %v, want {expiresAt: %s}", m, at.UTC().Format(time.RFC3339))
			}
			got := e.do(t, "GET", "/v1/sandboxes/"+id, "", nil).json(t)
			if got["expiresAt"] != m["expiresAt"] {
				t.Errorf("GET expiresAt = %v, want %v", got["expiresAt"], m["expiresAt"])
			}
		})
	}
	manual := e.do(t, "POST", "/v1/sandboxes", `{"image":{"uri":"a"},"entrypoint":["a"]}`, nil).json(t)
	r := e.do(t, "POST", fmt.Sprintf("/v1/sandboxes/%v/renew-expiration", manual["id"]), `{"expiresAt":"`+at.Format(time.RFC3339)+`"}`, nil)
	wantError(t, r, http.StatusConflict, "DOCKER::INVALID_EXPIRATION")
}

func TestListQuery(t *testing.T) {
	e := newEnv(t, nil)
	var ids []string
	for _, team := range []string{"a", "b", "a"} {
		body := strings.Replace(createBody, `"team":"a"`, `"team":"`+team+`"`, 1)
		r := e.do(t, "POST", "/v1/sandboxes", body, nil)
		ids = append(ids, fmt.Sprint(r.json(t)["id"]))
	}
	if r := e.do(t, "POST", "/v1/sandboxes/"+ids[1]+"/pause", "", nil); r.status != 202 {
		t.Fatal(r.status)
	}
	tests := []struct {
		query string
		count int
		page  map[string]any
	}{
		{"", 3, map[string]any{"page": 1.0, "pageSize": 20.0, "totalItems": 3.0, "totalPages": 1.0, "hasNextPage": false}},
		{"?state=running", 2, nil},
		{"?state=Running&state=PAUSED", 3, nil},
		{"?state=Terminated", 0, map[string]any{"page": 1.0, "pageSize": 20.0, "totalItems": 0.0, "totalPages": 0.0, "hasNextPage": false}},
		{"?metadata=team%3Da", 2, nil},
		{"?metadata=team%3Da&state=Paused", 0, nil},
		{"?pageSize=2", 2, map[string]any{"page": 1.0, "pageSize": 2.0, "totalItems": 3.0, "totalPages": 2.0, "hasNextPage": true}},
		{"?pageSize=2&page=2", 1, map[string]any{"page": 2.0, "pageSize": 2.0, "totalItems": 3.0, "totalPages": 2.0, "hasNextPage": false}},
		{"?pageSize=2&page=5", 0, map[string]any{"page": 5.0, "pageSize": 2.0, "totalItems": 3.0, "totalPages": 2.0, "hasNextPage": false}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			r := e.do(t, "GET", "/v1/sandboxes"+tt.query, "", nil)
			if r.status != 200 {
				t.Fatalf("list = %d %s", r.status, r.body)
			}
			m := r.json(t)
			items, ok := m["items"].([]any)
			if !ok {
				t.Fatalf("items is not an array: %s", r.body)
			}
			if len(items) != tt.count {
				t.Errorf("%d items, want %d", len(items), tt.count)
			}
			if tt.page != nil && fmt.Sprint(m["pagination"]) != fmt.Sprint(tt.page) {
				t.Errorf("pagination = %v, want %v", m["pagination"], tt.page)
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Server.MaxBodyBytes = 256 })
	big := `{"image":{"uri":"busybox"},"entrypoint":["sh"],"metadata":{"k":"` + strings.Repeat("a", 300) + `"}}`
	wantError(t, e.do(t, "POST", "/v1/sandboxes", big, nil), http.StatusRequestEntityTooLarge, "GENERAL::REQUEST_TOO_LARGE")
	small := `{"image":{"uri":"busybox"},"entrypoint":["sh"]}`
	if r := e.do(t, "POST", "/v1/sandboxes", small, nil); r.status != http.StatusAccepted {
		t.Errorf("small body = %d %s", r.status, r.body)
	}
}

func TestLogs(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	r := e.do(t, "GET", "/v1/sandboxes/"+id+"/diagnostics/logs?tail=10&since=10m", "", nil)
	if r.status != 200 || string(r.body) != "hello from the sandbox\n" || r.header.Get("Deprecation") != "true" ||
		!strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("logs = %d %q %v", r.status, r.body, r.header)
	}
}

func TestParseTime(t *testing.T) {
	want := time.Date(2026, 6, 12, 10, 10, 0, 123456000, time.UTC)
	tests := []struct {
		in string
		ok bool
	}{
		{"2026-06-12T10:10:00.123456Z", true},
		{"2026-06-12T10:10:00.123456+00:00", true},
		{"2026-06-12T12:10:00.123456+02:00", true},
		{"2026-06-12T10:10:00.123456", true},
		{"2026-06-12 10:10:00.123456", true},
		{"2026-06-12 10:10:00.123456Z", true},
		{"2026-06-12", false},
		{"tomorrow", false},
		{"", false},
	}
	for _, tt := range tests {
		got, ok := parseTime(tt.in)
		if ok != tt.ok || (ok && !got.Equal(want)) {
			t.Errorf("parseTime(%q) = %v, %v; want %v, %v", tt.in, got, ok, want, tt.ok)
		}
	}
}
