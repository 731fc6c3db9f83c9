package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime/egress"
)

// fakeEgress answers the egress API's calls with fixed outcomes, and
// records the body a write read.
type fakeEgress struct {
	pol    error
	change func(body []byte) (lifecycle.PolicyChange, error)
	op     lifecycle.PolicyOp
	read   []byte
}

func (f *fakeEgress) Policy(string) (egress.Policy, error) {
	return egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{{Action: egress.Allow, Target: "pypi.org"}}}, f.pol
}

func (f *fakeEgress) ChangePolicy(_ context.Context, _ string, op lifecycle.PolicyOp, body func() ([]byte, error)) (lifecycle.PolicyChange, error) {
	f.op = op
	if f.pol != nil {
		return lifecycle.PolicyChange{}, f.pol // the sandbox is checked first, as lifecycle's
	}
	b, err := body()
	if err != nil {
		return lifecycle.PolicyChange{}, &lifecycle.Error{Kind: lifecycle.KindTooLarge, Message: "request body too large"}
	}
	f.read = b
	return f.change(b)
}

func (f *fakeEgress) EgressStats(context.Context) map[string]egress.Stats { return nil }

// The egress API answers as upstream's sidecar: text errors with their
// statuses, JSON successes, enforcementMode but on a reset.
func TestServeEgressWire(t *testing.T) {
	errOf := func(k lifecycle.Kind, msg string) error { return &lifecycle.Error{Kind: k, Message: msg} }
	changed := func(c lifecycle.PolicyChange, err error) func([]byte) (lifecycle.PolicyChange, error) {
		return func([]byte) (lifecycle.PolicyChange, error) { return c, err }
	}
	deny := egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{}}
	for _, c := range []struct {
		name, method, rest, body string
		f                        fakeEgress
		status                   int
		want                     []string // substrings of the answer
		not                      string
		op                       lifecycle.PolicyOp
	}{
		{name: "healthz", method: "GET", rest: "/healthz", status: 200, want: []string{"ok"}},
		{name: "other path", method: "GET", rest: "/nope", status: 404},
		{name: "gone", method: "GET", rest: "/policy", f: fakeEgress{pol: errOf(lifecycle.KindNotFound, "sandbox not found")}, status: 404, want: []string{"sandbox not found\n"}},
		{name: "runtime without helpers", method: "PATCH", rest: "/policy", f: fakeEgress{pol: errOf(lifecycle.KindNotImplemented, "egress API not supported")}, status: 501},
		{name: "get", method: "GET", rest: "/policy", status: 200, want: []string{`"enforcementMode":"dns+nft"`, `"target":"pypi.org"`, `"status":"ok"`}},
		{name: "method", method: "OPTIONS", rest: "/policy", status: 405, want: []string{"method not allowed"}},
		{name: "no policy", method: "PUT", rest: "/policy", f: fakeEgress{change: changed(lifecycle.PolicyChange{}, errOf(lifecycle.KindConflict, "sandbox x has no egress policy to change"))}, status: 409},
		{name: "too large", method: "PUT", rest: "/policy", body: strings.Repeat(" ", maxPolicyBody+1), f: fakeEgress{change: changed(lifecycle.PolicyChange{}, nil)}, status: 413, want: []string{"request body too large"}},
		{name: "invalid", method: "PATCH", rest: "/policy", body: "[]", f: fakeEgress{change: changed(lifecycle.PolicyChange{}, errOf(lifecycle.KindInvalid, "invalid patch rules: empty array"))}, status: 400, want: []string{"invalid patch rules: empty array\n"}, op: lifecycle.PolicyPatch},
		{name: "reset", method: "POST", rest: "/policy", f: fakeEgress{change: changed(lifecycle.PolicyChange{Policy: deny, Reason: "policy reset to default deny-all", Changed: true}, nil)}, status: 200, want: []string{`"reason":"policy reset to default deny-all"`, `"mode":"deny_all"`}, not: "enforcementMode"},
		{name: "no match", method: "DELETE", rest: "/policy", body: ` ["x.com"] `, f: fakeEgress{change: changed(lifecycle.PolicyChange{Policy: deny, Reason: "no matching targets found"}, nil)}, status: 200, want: []string{`"reason":"no matching targets found"`, `"enforcementMode":"dns+nft"`}, op: lifecycle.PolicyRemove},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := c.f
			s := &Server{egress: &f, inflight: newInflight(8, 8)}
			w := httptest.NewRecorder()
			req := httptest.NewRequest(c.method, "/x", strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			s.handleEgress(w, req, "sb", c.rest)
			body := w.Body.String()
			if w.Code != c.status {
				t.Fatalf("%d %q, want %d", w.Code, body, c.status)
			}
			for _, s := range c.want {
				if !strings.Contains(body, s) {
					t.Errorf("answer %q lacks %q", body, s)
				}
			}
			if c.not != "" && strings.Contains(body, c.not) {
				t.Errorf("answer %q has %q", body, c.not)
			}
			if c.status == 405 && w.Header().Get("Allow") != "GET, POST, PUT, PATCH, DELETE" {
				t.Errorf("Allow = %q", w.Header().Get("Allow"))
			}
			if f.change != nil && c.status != 413 && (f.op != c.op || string(f.read) != strings.TrimSpace(c.body)) {
				t.Errorf("write op %v body %q, want %v %q", f.op, f.read, c.op, strings.TrimSpace(c.body))
			}
			if c.status == http.StatusOK && strings.HasPrefix(c.rest, "/policy") && w.Header().Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type = %q", w.Header().Get("Content-Type"))
			}
		})
	}
}

// fakeTokens opens sandbox "sb" with the execd token "execd" and the
// egress token "egress".
type fakeTokens struct{}

func (fakeTokens) CheckToken(id, tok string) bool       { return id == "sb" && tok == "execd" }
func (fakeTokens) CheckEgressToken(id, tok string) bool { return id == "sb" && tok == "egress" }
func (fakeTokens) Transport(context.Context, string) (http.RoundTripper, error) {
	return nil, errors.New("no transport")
}

// Who opens the egress API: the egress token (the 18080 endpoint's
// header) and the key do, the execd token only /healthz, with the error
// envelope otherwise. A write must be declared JSON.
func TestEgressAuthorization(t *testing.T) {
	for _, c := range []struct {
		name, rest, method, ctype string
		headers                   map[string]string
		status                    int
		code                      string
	}{
		{name: "egress token", rest: "/policy", method: "PATCH", headers: map[string]string{lifecycle.EgressAuthHeader: "egress"}, status: 200},
		{name: "key", rest: "/policy", method: "PATCH", headers: map[string]string{headerAPIKey: "k"}, status: 200},
		{name: "key in the token header", rest: "/policy", method: "GET", headers: map[string]string{lifecycle.TokenHeader: "k"}, status: 200},
		{name: "execd token write", rest: "/policy", method: "POST", headers: map[string]string{lifecycle.TokenHeader: "execd"}, status: 403, code: codeEgressForbidden},
		{name: "execd token read", rest: "/policy", method: "GET", headers: map[string]string{lifecycle.TokenHeader: "execd"}, status: 403, code: codeEgressForbidden},
		{name: "execd token healthz", rest: "/healthz", method: "GET", headers: map[string]string{lifecycle.TokenHeader: "execd"}, status: 200},
		{name: "execd token as the egress token", rest: "/policy", method: "PATCH", headers: map[string]string{lifecycle.EgressAuthHeader: "execd"}, status: 401, code: "INVALID_API_KEY"},
		{name: "execd token beside a wrong egress token", rest: "/policy", method: "PATCH", headers: map[string]string{lifecycle.TokenHeader: "execd", lifecycle.EgressAuthHeader: "x"}, status: 401, code: "INVALID_API_KEY"},
		{name: "another sandbox's egress token", rest: "/policy", method: "PATCH", headers: map[string]string{lifecycle.EgressAuthHeader: "egress-of-other"}, status: 401, code: "INVALID_API_KEY"},
		{name: "nothing", rest: "/policy", method: "GET", status: 401, code: "MISSING_API_KEY"},
		{name: "text/plain", rest: "/policy", method: "POST", ctype: "text/plain", headers: map[string]string{headerAPIKey: "k"}, status: 415, code: codeUnsupportedMedia},
		{name: "no type", rest: "/policy", method: "PATCH", ctype: "-", headers: map[string]string{lifecycle.EgressAuthHeader: "egress"}, status: 415, code: codeUnsupportedMedia},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeEgress{change: func([]byte) (lifecycle.PolicyChange, error) { return lifecycle.PolicyChange{Changed: true}, nil }}
			s := &Server{egress: f, proxy: fakeTokens{}, keys: [][]byte{[]byte("k")}, inflight: newInflight(8, 8)}
			body := ""
			if c.method != "GET" {
				body = `{"defaultAction":"allow"}`
			}
			req := httptest.NewRequest(c.method, "/x", strings.NewReader(body))
			switch c.ctype {
			case "":
				req.Header.Set("Content-Type", "application/json")
			case "-":
			default:
				req.Header.Set("Content-Type", c.ctype)
			}
			for k, v := range c.headers {
				req.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			s.handleEgress(w, req, "sb", c.rest)
			if w.Code != c.status {
				t.Fatalf("%d %q, want %d", w.Code, w.Body.String(), c.status)
			}
			if c.code != "" && !strings.Contains(w.Body.String(), `"code":"`+c.code+`"`) {
				t.Errorf("answer %q lacks code %s", w.Body.String(), c.code)
			}
			if c.status >= 400 && f.read != nil {
				t.Errorf("a refused call changed the policy (body %q)", f.read)
			}
		})
	}
}
