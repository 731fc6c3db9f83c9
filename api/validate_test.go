package api

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// A timeout too large to represent and a malformed image reference are
// 400s before anything is created; the largest timeout and the reference
// forms Docker takes are accepted.
func TestCreateValidation(t *testing.T) {
	e := newEnv(t, nil)
	body := func(uri string, timeout any) string {
		return fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":["sleep","infinity"],"timeout":%v}`, uri, timeout)
	}
	for _, b := range []string{
		body("busybox:latest", "9223372036854775807"),
		body("busybox:latest", maxTimeout+1),
		body("BusyBox:latest", 600),
		body("busybox:la:test", 600),
		body("busybox@sha256:short", 600),
		body("registry.example.com:5000/a//b", 600),
		body("-busybox", 600),
	} {
		wantError(t, e.do(t, http.MethodPost, "/v1/sandboxes", b, nil), http.StatusBadRequest, lifecycle.CodeInvalidParameter)
	}
	if n := containers(t, e); n != 0 {
		t.Errorf("refused creates made %d containers", n)
	}
	for _, b := range []string{
		body("busybox", maxTimeout),
		body("docker.io/library/busybox:1.36", 600),
		body("registry.example.com:5000/team/image:v1", "null"),
		body("busybox@sha256:"+fmt.Sprintf("%064x", 1), 600),
		body(fmt.Sprintf("%064x", 2), 600),
	} {
		if r := e.do(t, http.MethodPost, "/v1/sandboxes", b, nil); r.status != http.StatusAccepted {
			t.Errorf("create %s: %d %s", b, r.status, r.body)
		}
	}
}
