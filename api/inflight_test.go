package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/lifecycle"
)

// blockingAgent holds every request to /block until release is closed.
type blockingAgent struct {
	arrived chan struct{}
	release chan struct{}
}

func (a *blockingAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/block" {
		a.arrived <- struct{}{}
		<-a.release
	}
}

// Proxied requests in flight are capped per sandbox and per credential;
// past a cap the answer is 429 with the envelope, and a request under the
// other caps is still served.
func TestProxyInflightCaps(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.Server.MaxProxyRequestsPerSandbox = 2
		c.Server.MaxProxyRequestsPerToken = 2
	})
	a, b, c := e.create(t), e.create(t), e.create(t)
	agent := &blockingAgent{arrived: make(chan struct{}), release: make(chan struct{})}
	e.rt.SetAgent(agent)
	var wg sync.WaitGroup
	var once sync.Once
	done := func() { once.Do(func() { close(agent.release) }); wg.Wait() }
	t.Cleanup(done)
	hold := func(id string, hdr map[string]string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/sandboxes/"+id+"/proxy/44772/block", nil)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			if resp, err := e.srv.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		<-agent.arrived
	}
	key := map[string]string{headerAPIKey: testKey}
	hold(a, key)
	hold(a, map[string]string{lifecycle.TokenHeader: e.mgr.Sandboxes.Token(a)})

	r := e.do(t, http.MethodGet, "/sandboxes/"+a+"/proxy/44772/ping", "", nil)
	wantError(t, r, http.StatusTooManyRequests, codeTooManyRequests)
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Sandbox a is full; now the key is too, but not c's token.
	hold(b, key)
	wantError(t, e.do(t, http.MethodGet, "/sandboxes/"+c+"/proxy/44772/ping", "", nil), http.StatusTooManyRequests, codeTooManyRequests)
	for _, id := range []string{b, c} {
		if r := e.do(t, http.MethodGet, "/sandboxes/"+id+"/proxy/44772/ping", "", map[string]string{headerAPIKey: "", lifecycle.TokenHeader: e.mgr.Sandboxes.Token(id)}); r.status != http.StatusOK {
			t.Errorf("a token under its caps: %d %s", r.status, r.body)
		}
	}
	if r := e.do(t, http.MethodGet, "/v1/sandboxes/"+a, "", nil); r.status != http.StatusOK {
		t.Errorf("lifecycle route while the proxy is full: %d %s", r.status, r.body)
	}

	done()
	// A handler releases its slots just after its client has the answer,
	// so a request sent at once may still find them taken.
	f := e.srv.Config.Handler.(*Server).inflight
	left := func() map[string]int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return maps.Clone(f.n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(left()) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := left(); len(n) != 0 {
		t.Errorf("counters left after every request ended: %v", n)
	}
	if r := e.do(t, http.MethodGet, "/sandboxes/"+a+"/proxy/44772/ping", "", nil); r.status != http.StatusOK {
		t.Errorf("after the requests ended: %d %s", r.status, r.body)
	}
}

func TestBackendFailure(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{&net.OpError{Op: "dial", Net: "yamux", Err: errors.New("session shutdown")}, 502, codeBackendConnectionFailed},
		{fmt.Errorf("wrapped: %w", &net.OpError{Op: "dial", Err: errors.New("refused")}), 502, codeBackendConnectionFailed},
		{context.DeadlineExceeded, 504, codeBackendTimeout},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, 504, codeBackendTimeout},
		{errors.New("net/http: server response headers exceeded 65536 bytes; aborted"), 502, codeBackendResponseFailed},
		{io.ErrUnexpectedEOF, 502, codeBackendResponseFailed},
	}
	for _, tt := range tests {
		status, code, msg := backendFailure(tt.err)
		if status != tt.status || code != tt.code || msg == "" {
			t.Errorf("backendFailure(%v) = %d %s %q, want %d %s", tt.err, status, code, msg, tt.status, tt.code)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// The access log has one line per request, without the query or any
// credential, and the path of a forwarded port cut after the port; it is
// off with [log] access = false.
func TestAccessLog(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint("access=", on), func(t *testing.T) {
			var buf bytes.Buffer
			e := newEnv(t, nil)
			cfg := config.Default()
			cfg.Server.APIKey = testKey
			cfg.Log.Access = on
			srv := httptest.NewServer(New(cfg, backendsOf(e.mgr), e.rt, slog.New(slog.NewTextHandler(&buf, nil))))
			defer srv.Close()
			e.srv = srv
			id := e.create(t)
			e.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/proxy/44772/files/download?path=/secret-file", "", map[string]string{lifecycle.TokenHeader: e.mgr.Sandboxes.Token(id)})
			e.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/proxy/8888/lab/tree/token-in-path?token=query-token", "", nil)
			out := buf.String()
			if !on {
				if strings.Contains(out, "msg=request") {
					t.Errorf("access lines with access = false:\n%s", out)
				}
				return
			}
			if n := strings.Count(out, "msg=request"); n != 3 {
				t.Errorf("%d access lines for 3 requests:\n%s", n, out)
			}
			for _, want := range []string{"method=POST path=/v1/sandboxes status=202", "path=/v1/sandboxes/" + id + "/proxy/44772/files/download", "path=/v1/sandboxes/" + id + "/proxy/8888/…", "sandbox_id=" + id, "request_id=", "bytes=", "duration_ms="} {
				if !strings.Contains(out, want) {
					t.Errorf("access log lacks %q:\n%s", want, out)
				}
			}
			for _, secret := range []string{testKey, e.mgr.Sandboxes.Token(id), "secret-file", "token-in-path", "query-token"} {
				if strings.Contains(out, secret) {
					t.Errorf("access log holds %q:\n%s", secret, out)
				}
			}
		})
	}
}
