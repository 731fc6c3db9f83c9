//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testAgent is an agent served by httptest, killed at the end of the test.
type testAgent struct {
	*server
	url string
	dir string // a scratch directory
}

func newTestAgent(t *testing.T) *testAgent {
	t.Helper()
	dir := t.TempDir()
	s := newServer(Options{TempDir: t.TempDir()})
	ts := httptest.NewServer(s.routes())
	t.Cleanup(func() {
		s.close()
		ts.Close()
	})
	return &testAgent{server: s, url: ts.URL, dir: dir}
}

// event is a decoded execd stream event.
type event struct {
	Type          string `json:"type"`
	Text          string `json:"text"`
	ExecutionTime *int64 `json:"execution_time"`
	Timestamp     *int64 `json:"timestamp"`
	Error         *struct {
		EName     string   `json:"ename"`
		EValue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

// result is a parsed command stream.
type result struct {
	events []event
	stdout []string
	stderr []string
}

// exitCode infers the exit code the way the SDKs do.
func (r result) exitCode(t *testing.T) string {
	t.Helper()
	last := r.events[len(r.events)-1]
	switch last.Type {
	case evComplete:
		return "0"
	case evError:
		return last.Error.EValue
	}
	t.Fatalf("stream ends with %q, want %s or %s", last.Type, evComplete, evError)
	return ""
}

// post sends a JSON body.
func (a *testAgent) post(t *testing.T, path string, body any) *http.Response {
	t.Helper()
	return a.do(t, http.MethodPost, path, body)
}

func (a *testAgent) do(t *testing.T, method, path string, body any) *http.Response {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// run posts a command and reads its whole stream.
func (a *testAgent) run(t *testing.T, path string, body any) result {
	t.Helper()
	resp := a.post(t, path, body)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %s %s", path, resp.Status, b)
	}
	return readStream(t, resp)
}

// readStream checks the framing of an event stream and decodes it: bare
// JSON objects each followed by a blank line, every one with a timestamp,
// none split by any character Python's str.splitlines treats as a line end.
func readStream(t *testing.T, resp *http.Response) result {
	t.Helper()
	for h, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", tail(body))
	}
	var res result
	for _, chunk := range bytes.Split(bytes.TrimSuffix(body, []byte("\n\n")), []byte("\n\n")) {
		if strings.ContainsAny(string(chunk), "\n\r\v\f\x1c\x1d\x1e\u0085\u2028\u2029") {
			t.Fatalf("event contains a line separator: %q", tail(chunk))
		}
		var ev event
		if err := json.Unmarshal(chunk, &ev); err != nil {
			t.Fatalf("event %q: %v", tail(chunk), err)
		}
		if ev.Timestamp == nil || *ev.Timestamp < 1e12 {
			t.Fatalf("event %q has no millisecond timestamp", tail(chunk))
		}
		switch ev.Type {
		case evPing:
			continue
		case evStdout:
			res.stdout = append(res.stdout, ev.Text)
		case evStderr:
			res.stderr = append(res.stderr, ev.Text)
		}
		res.events = append(res.events, ev)
	}
	if len(res.events) < 2 || res.events[0].Type != evInit || res.events[0].Text == "" {
		t.Fatalf("stream does not start with init: %+v", res.events)
	}
	for _, ev := range res.events[1 : len(res.events)-1] {
		if ev.Type != evStdout && ev.Type != evStderr {
			t.Fatalf("unexpected %q event before the end", ev.Type)
		}
	}
	return res
}

func tail(b []byte) string {
	if len(b) > 200 {
		return string(b[:100]) + "…" + string(b[len(b)-100:])
	}
	return string(b)
}

// decode reads a JSON response with the expected status.
func decode[T any](t *testing.T, resp *http.Response, status int) T {
	t.Helper()
	var v T
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, b)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// wantError checks an execd error answer.
func wantError(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	e := decode[apiError](t, resp, status)
	if e.Code != code || e.Message == "" {
		t.Fatalf("error = %+v, want code %s with a message", e, code)
	}
}

// eventually retries cond until it holds, for conditions the agent reaches
// asynchronously (a killed process disappearing). The bound only guards
// against hanging; it is not what the test measures.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// startStream posts a command and returns once its init event has arrived,
// with the command id and a reader for the rest of the stream.
func (a *testAgent) startStream(t *testing.T, ctx context.Context, path string, body any) (id string, rest *bufio.Reader, resp *http.Response) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	rest = bufio.NewReader(resp.Body)
	ev := nextEvent(t, rest)
	if ev.Type != evInit {
		t.Fatalf("first event %+v, want init", ev)
	}
	return ev.Text, rest, resp
}

// nextEvent reads one event, skipping pings.
func nextEvent(t *testing.T, r *bufio.Reader) event {
	t.Helper()
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read event: %v (got %q)", err, line)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		if ev.Type != evPing {
			return ev
		}
	}
}

// finalEvent skips output events and returns the event that ends a stream.
func finalEvent(t *testing.T, r *bufio.Reader) event {
	t.Helper()
	for {
		if ev := nextEvent(t, r); ev.Type != evStdout && ev.Type != evStderr {
			return ev
		}
	}
}

// pidOf reads the first stdout line of a stream as a pid.
func pidOf(t *testing.T, r *bufio.Reader) int {
	t.Helper()
	ev := nextEvent(t, r)
	pid, err := strconv.Atoi(ev.Text)
	if ev.Type != evStdout || err != nil {
		t.Fatalf("want a pid on stdout, got %+v", ev)
	}
	return pid
}

// alive reports whether a signal can be sent to pid.
func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) && !processGone(pid)
}
