package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// The networkpolicy routes answer as upstream 1.1.1's relay: the body is
// validated first (422 with detail), the key holder's write reaches the
// policy, the sidecar's errors pass as text, the server's own as the
// envelope.
func TestNetworkPolicyWire(t *testing.T) {
	errOf := func(k lifecycle.Kind, code, msg string) error {
		return &lifecycle.Error{Kind: k, Code: code, Message: msg}
	}
	ok := func([]byte) (lifecycle.PolicyChange, error) { return lifecycle.PolicyChange{Changed: true}, nil }
	for _, c := range []struct {
		name, method, ctype, body string
		f                         fakeEgress
		status                    int
		want                      string // in the answer
		op                        lifecycle.PolicyOp
	}{
		{name: "get", method: "GET", status: 200, want: `"defaultAction":"deny"},"status":"ok"`},
		{name: "get unknown", method: "GET", f: fakeEgress{pol: errOf(lifecycle.KindNotFound, lifecycle.CodeSandboxNotFound, "sandbox not found")}, status: 404, want: `"code":"DOCKER::SANDBOX_NOT_FOUND"`},
		{name: "put", method: "PUT", body: `{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}`, status: 200, want: `"status":"ok"`, op: lifecycle.PolicyReplace},
		{name: "put without egress", method: "PUT", body: `{"defaultAction":"allow"}`, status: 200, op: lifecycle.PolicyReplace},
		{name: "put a list", method: "PUT", body: `[]`, status: 422, want: `"detail":[{"type":"model_attributes_type"`},
		{name: "put bad action", method: "PUT", body: `{"defaultAction":"open"}`, status: 422, want: `"loc":["body","defaultAction"]`},
		{name: "put empty target", method: "PUT", body: `{"egress":[{"action":"allow","target":""}]}`, status: 422, want: `"string_too_short"`},
		{name: "put empty", method: "PUT", status: 422, want: `"missing"`},
		{name: "put text/plain", method: "PUT", ctype: "text/plain", body: `{"defaultAction":"allow"}`, status: 415, want: codeUnsupportedMedia},
		{name: "patch", method: "PATCH", body: `[{"action":"deny","target":"pypi.org"},{"action":"allow","target":"a.com"}]`, status: 200, op: lifecycle.PolicyPatch},
		{name: "patch object", method: "PATCH", body: `{}`, status: 422, want: `"list_type"`},
		{name: "patch missing target", method: "PATCH", body: `[{"action":"allow"}]`, status: 422, want: `"loc":["body","0","target"]`},
		{name: "patch bad action", method: "PATCH", body: `[{"action":"maybe","target":"x"}]`, status: 422, want: `"literal_error"`},
		{name: "patch refused by the sidecar", method: "PATCH", body: `[{"action":"allow","target":"10.0.0.0/99"}]`, f: fakeEgress{change: func([]byte) (lifecycle.PolicyChange, error) {
			return lifecycle.PolicyChange{}, errOf(lifecycle.KindInvalid, lifecycle.CodeInvalidParameter, "invalid patch rules: bad CIDR")
		}}, status: 400, want: "invalid patch rules: bad CIDR\n", op: lifecycle.PolicyPatch},
		{name: "delete", method: "DELETE", body: `["a.com","nope"]`, status: 200, op: lifecycle.PolicyRemove},
		{name: "delete numbers", method: "DELETE", body: `[1]`, status: 422, want: `"string_type"`},
		{name: "no policy", method: "PATCH", body: `[{"action":"allow","target":"a.com"}]`, f: fakeEgress{change: func([]byte) (lifecycle.PolicyChange, error) {
			return lifecycle.PolicyChange{}, errOf(lifecycle.KindConflict, lifecycle.CodeNoEgressPolicy, "sandbox sb has no egress policy to change")
		}}, status: 502, want: `"code":"BACKEND_CONNECTION_FAILED"`, op: lifecycle.PolicyPatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := c.f
			if f.change == nil {
				f.change = ok
			}
			s := &Server{egress: &f, engine: "docker"}
			req := httptest.NewRequest(c.method, "/v1/sandboxes/sb/networkpolicy", strings.NewReader(c.body))
			if c.ctype == "" {
				c.ctype = "application/json"
			}
			req.Header.Set("Content-Type", c.ctype)
			req = mux.SetURLVars(req, map[string]string{"id": "sb"})
			w := httptest.NewRecorder()
			s.handleNetworkPolicy(w, req)
			if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
				t.Fatalf("%d %q, want %d with %q", w.Code, w.Body.String(), c.status, c.want)
			}
			wrote := f.read != nil
			if wantWrite := c.method != "GET" && c.status != 422 && c.status != 415; wrote != wantWrite {
				t.Fatalf("policy written: %v, want %v", wrote, wantWrite)
			}
			if wrote && (f.op != c.op || string(f.read) != c.body) {
				t.Errorf("write op %v body %q, want %v %q", f.op, f.read, c.op, c.body)
			}
		})
	}
}

// The routes are the key holder's: without the key they are 401, with a
// sandbox's execd or egress token too.
func TestNetworkPolicyNeedsKey(t *testing.T) {
	e := newEnv(t, nil)
	for _, prefix := range []string{"", "/v1"} {
		for _, h := range []map[string]string{nil, {lifecycle.TokenHeader: "x"}, {lifecycle.EgressAuthHeader: "x"}} {
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+prefix+"/sandboxes/sb/networkpolicy", nil)
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s/sandboxes/sb/networkpolicy with %v = %d, want 401", prefix, h, resp.StatusCode)
			}
		}
	}
}
