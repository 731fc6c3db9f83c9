package api

import (
	"net/http"
	"strings"
	"testing"
)

// TestKeylessPathsReachOnlyTheProxy: the key check is skipped for paths of
// the proxy route's shape, and the proxy handler checks the sandbox's
// token instead. A path the skip accepts but the proxy does not take (a
// port that is not digits, an encoded or dotted segment, an empty id) must
// not reach any other route: it is refused or not found, never served.
func TestKeylessPathsReachOnlyTheProxy(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t)
	for _, prefix := range []string{"", "/v1"} {
		for _, p := range []string{
			"/sandboxes/" + sb + "/proxy/abc",
			"/sandboxes/" + sb + "/proxy/%34%34%37%37%32/command",
			"/sandboxes/" + sb + "/proxy/44772/../../endpoints/44772",
			"/sandboxes/" + sb + "/proxy/44772/..%2F..%2Fendpoints%2F44772",
			"/sandboxes/" + sb + "%2Fendpoints%2F44772/proxy/1",
			"/sandboxes/" + sb + "/proxy/-1",
			"/sandboxes/" + sb + "/proxy/1e3",
			"/sandboxes//proxy/44772/command",
			"/sandboxes/" + sb + "/proxy/18080/policy",
			"/sandboxes/" + sb + "/proxy/0018080/policy",
		} {
			for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
				r := e.do(t, method, prefix+p, "", map[string]string{headerAPIKey: ""})
				if r.status/100 == 2 || r.status >= 500 || strings.Contains(string(r.body), sb+`","`) {
					t.Errorf("%s %s without a credential: %d %s", method, prefix+p, r.status, r.body)
				}
			}
		}
	}
	if r := e.do(t, http.MethodGet, "/v1/sandboxes/"+sb, "", nil); r.status != http.StatusOK {
		t.Fatalf("the sandbox is gone: %d %s", r.status, r.body)
	}
}
