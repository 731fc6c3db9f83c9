package api

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/lifecycle"
)

const (
	nativePool = `{"name":"py","template":{"image":{"uri":"busybox:latest"},"entrypoint":["sleep","infinity"],"resourceLimits":{"memory":"256Mi"}},` +
		`"capacitySpec":{"bufferMax":2,"bufferMin":1,"poolMax":4,"poolMin":0}}`
	k8sPool = `{"name":"k8s","template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"main","image":"busybox:latest",` +
		`"command":["sleep"],"args":["1000"],"env":[{"name":"A","value":"1"}],"resources":{"limits":{"cpu":1,"memory":"256Mi"}}}]}},` +
		`"capacitySpec":{"bufferMax":1,"bufferMin":1,"poolMax":1,"poolMin":1}}`
)

func TestPoolRoutes(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, http.MethodPost, "/v1/pools", nativePool, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create pool: %d %s", r.status, r.body)
	}
	p := r.json(t)
	capSpec, _ := p["capacitySpec"].(map[string]any)
	status, _ := p["status"].(map[string]any)
	if p["name"] != "py" || capSpec["bufferMax"] != 2.0 || capSpec["poolMin"] != 0.0 || status["revision"] == "" || p["createdAt"] == nil {
		t.Errorf("created pool = %s", r.body)
	}
	if status["available"] != 0.0 || status["total"] != 0.0 {
		t.Errorf("a pool nobody fills reports %v", status)
	}
	if r := e.do(t, http.MethodPost, "/pools", k8sPool, nil); r.status != http.StatusCreated {
		t.Fatalf("create pool from a pod template: %d %s", r.status, r.body)
	}

	r = e.do(t, http.MethodGet, "/pools", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var names []string
	items, _ := r.json(t)["items"].([]any)
	for _, it := range items {
		names = append(names, it.(map[string]any)["name"].(string))
	}
	if !slices.Equal(names, []string{"k8s", "py"}) {
		t.Errorf("list = %v", names)
	}

	r = e.do(t, http.MethodPut, "/v1/pools/py", `{"capacitySpec":{"bufferMax":3,"bufferMin":0,"poolMax":3,"poolMin":0}}`, nil)
	if r.status != http.StatusOK || r.json(t)["capacitySpec"].(map[string]any)["bufferMax"] != 3.0 {
		t.Errorf("update: %d %s", r.status, r.body)
	}
	if r := e.do(t, http.MethodGet, "/v1/pools/py", "", nil); r.status != http.StatusOK {
		t.Errorf("get: %d %s", r.status, r.body)
	}

	// An empty pool serves a poolRef create cold, with the pool's spec.
	r = e.do(t, http.MethodPost, "/v1/sandboxes", `{"extensions":{"poolRef":"k8s"},"metadata":{"team":"a"},"timeout":600}`, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("create from pool: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	sb := e.do(t, http.MethodGet, "/v1/sandboxes/"+id, "", nil).json(t)
	ep, _ := sb["entrypoint"].([]any)
	if sb["image"].(map[string]any)["uri"] != "busybox:latest" || len(ep) != 2 || ep[0] != "sleep" || ep[1] != "1000" {
		t.Errorf("sandbox from pod template pool = %v", sb)
	}

	if r := e.do(t, http.MethodDelete, "/v1/pools/py", "", nil); r.status != http.StatusNoContent {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
	wantError(t, e.do(t, http.MethodGet, "/v1/pools/py", "", nil), http.StatusNotFound, lifecycle.CodePoolNotFound)
}

func TestPoolRouteErrors(t *testing.T) {
	e := newEnv(t, nil)
	if r := e.do(t, http.MethodPost, "/v1/pools", nativePool, nil); r.status != http.StatusCreated {
		t.Fatalf("create pool: %d %s", r.status, r.body)
	}
	const capacity = `"capacitySpec":{"bufferMax":1,"bufferMin":0,"poolMax":1,"poolMin":0}`
	tests := []struct {
		name         string
		method, path string
		body         string
		headers      map[string]string
		status       int
		code         string
	}{
		{"no API key", "GET", "/v1/pools", "", map[string]string{headerAPIKey: ""}, 401, "MISSING_API_KEY"},
		{"exists", "POST", "/v1/pools", nativePool, nil, 409, lifecycle.CodePoolExists},
		{"no name", "POST", "/v1/pools", `{"template":{"image":{"uri":"x"}},` + capacity + `}`, nil, 422, lifecycle.CodeInvalidParameter},
		{"bad name", "POST", "/v1/pools", `{"name":"Bad_Name","template":{"image":{"uri":"x"}},` + capacity + `}`, nil, 400, lifecycle.CodePoolInvalid},
		{"no template", "POST", "/v1/pools", `{"name":"a",` + capacity + `}`, nil, 422, lifecycle.CodeInvalidParameter},
		{"no capacity", "POST", "/v1/pools", `{"name":"a","template":{"image":{"uri":"x"}}}`, nil, 422, lifecycle.CodeInvalidParameter},
		{"capacity field missing", "POST", "/v1/pools", `{"name":"a","template":{"image":{"uri":"x"}},"capacitySpec":{"bufferMax":1,"bufferMin":0,"poolMax":1}}`, nil, 422, lifecycle.CodeInvalidParameter},
		{"negative capacity", "POST", "/v1/pools", `{"name":"a","template":{"image":{"uri":"x"}},"capacitySpec":{"bufferMax":-1,"bufferMin":0,"poolMax":1,"poolMin":0}}`, nil, 422, lifecycle.CodeInvalidParameter},
		{"bufferMin above bufferMax", "POST", "/v1/pools", `{"name":"a","template":{"image":{"uri":"x"}},"capacitySpec":{"bufferMax":1,"bufferMin":2,"poolMax":1,"poolMin":0}}`, nil, 400, lifecycle.CodePoolInvalid},
		{"template without image", "POST", "/v1/pools", `{"name":"a","template":{"entrypoint":["sh"]},` + capacity + `}`, nil, 400, lifecycle.CodePoolInvalid},
		{"two containers", "POST", "/v1/pools", `{"name":"a","template":{"spec":{"containers":[{"image":"x"},{"image":"y"}]}},` + capacity + `}`, nil, 400, lifecycle.CodePoolInvalid},
		{"args without command", "POST", "/v1/pools", `{"name":"a","template":{"spec":{"containers":[{"image":"x","args":["1"]}]}},` + capacity + `}`, nil, 400, lifecycle.CodePoolInvalid},
		{"bad limit", "POST", "/v1/pools", `{"name":"a","template":{"spec":{"containers":[{"image":"x","resources":{"limits":{"cpu":true}}}]}},` + capacity + `}`, nil, 400, lifecycle.CodePoolInvalid},
		{"bad cpu", "POST", "/v1/pools", `{"name":"a","template":{"image":{"uri":"x"},"resourceLimits":{"cpu":"fast"}},` + capacity + `}`, nil, 400, lifecycle.CodePoolInvalid},
		{"update unknown", "PUT", "/v1/pools/nope", `{` + capacity + `}`, nil, 404, lifecycle.CodePoolNotFound},
		{"update without capacity", "PUT", "/v1/pools/py", `{}`, nil, 422, lifecycle.CodeInvalidParameter},
		{"delete unknown", "DELETE", "/v1/pools/nope", "", nil, 404, lifecycle.CodePoolNotFound},
		{"unknown poolRef", "POST", "/v1/sandboxes", `{"extensions":{"poolRef":"nope"},"timeout":600}`, nil, 400, lifecycle.CodeUnsupportedPoolRef},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do(t, tt.method, tt.path, tt.body, tt.headers), tt.status, tt.code)
		})
	}
}

// TestPoolPolicyRoutes: a pool's networkPolicy beside its capacitySpec,
// checked as a create's (this runtime enforces deny-all only), shown by
// GET, kept by an update without it and removed by null.
func TestPoolPolicyRoutes(t *testing.T) {
	e := newEnv(t, nil)
	const capacity = `"capacitySpec":{"bufferMax":1,"bufferMin":0,"poolMax":1,"poolMin":0}`
	const template = `"template":{"image":{"uri":"busybox:latest"}},`
	r := e.do(t, http.MethodPost, "/v1/pools", `{"name":"pol",`+template+capacity+`,"networkPolicy":{"defaultAction":"deny"}}`, nil)
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), `"networkPolicy":{"egress":[],"defaultAction":"deny"}`) {
		t.Fatalf("create pool with a policy: %d %s", r.status, r.body)
	}
	if r := e.do(t, http.MethodGet, "/v1/pools/pol", "", nil); !strings.Contains(string(r.body), `"defaultAction":"deny"`) {
		t.Errorf("GET does not show the policy: %s", r.body)
	}
	if r := e.do(t, http.MethodPut, "/v1/pools/pol", `{`+capacity+`}`, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"networkPolicy"`) {
		t.Errorf("an update without networkPolicy dropped it: %d %s", r.status, r.body)
	}
	if r := e.do(t, http.MethodPut, "/v1/pools/pol", `{`+capacity+`,"networkPolicy":null}`, nil); r.status != http.StatusOK || strings.Contains(string(r.body), `"networkPolicy"`) {
		t.Errorf("networkPolicy null kept it: %d %s", r.status, r.body)
	}

	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		code                     string
		loc                      string
	}{
		{"rule without action", "POST", "/v1/pools", `{"name":"a",` + template + capacity + `,"networkPolicy":{"egress":[{"target":"a.com"}]}}`, 422, lifecycle.CodeInvalidParameter, `["body","networkPolicy","egress","0"]`},
		{"bad action", "POST", "/v1/pools", `{"name":"a",` + template + capacity + `,"networkPolicy":{"egress":[{"action":"block","target":"a.com"}]}}`, 400, lifecycle.CodeInvalidParameter, ""},
		{"rules not an array", "PUT", "/v1/pools/pol", `{` + capacity + `,"networkPolicy":{"egress":"a.com"}}`, 422, lifecycle.CodeInvalidParameter, `["body","networkPolicy","egress"]`},
		{"not enforceable here", "PUT", "/v1/pools/pol", `{` + capacity + `,"networkPolicy":{"defaultAction":"allow"}}`, 400, lifecycle.CodePoolInvalid, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, tt.method, tt.path, tt.body, nil)
			wantError(t, r, tt.status, tt.code)
			if tt.loc != "" && !strings.Contains(string(r.body), `"loc":`+tt.loc) {
				t.Errorf("422 located elsewhere than %s: %s", tt.loc, r.body)
			}
		})
	}
	if r := e.do(t, http.MethodGet, "/v1/pools/pol", "", nil); strings.Contains(string(r.body), `"networkPolicy"`) {
		t.Errorf("a refused update changed the policy: %s", r.body)
	}
}
