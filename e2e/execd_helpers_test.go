//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// execdPort is the port of the execd API behind the proxy route.
const execdPort = "44772"

// execdTokenHeader carries the per-sandbox token of the endpoint's headers.
const execdTokenHeader = "X-EXECD-ACCESS-TOKEN"

// codeInterpreterRequest creates a code-interpreter sandbox the way the
// Deep Agents backend does, with a smaller memory limit.
func codeInterpreterRequest() map[string]any {
	return map[string]any{
		"image":          map[string]any{"uri": imageCodeInterpreter},
		"entrypoint":     []string{"/opt/code-interpreter/code-interpreter.sh"},
		"timeout":        600,
		"resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"},
	}
}

// execdBox is one sandbox reached through the server's proxy route with the
// credentials of its endpoint, as an SDK would reach it.
type execdBox struct {
	s       *Server
	ID      string
	Headers map[string]string // the endpoint's headers (the access token)
	deleted bool              // by the test itself
}

// newExecdBox creates a sandbox, resolves its execd endpoint, and deletes
// the sandbox when the test ends.
func newExecdBox(t *testing.T, s *Server, req map[string]any) *execdBox {
	t.Helper()
	var created sandboxJSON
	s.doJSON(t, http.MethodPost, "/v1/sandboxes", req, http.StatusAccepted, &created)
	box := &execdBox{s: s, ID: created.ID}
	t.Cleanup(func() {
		if !box.deleted {
			execdDelete(t, s, created.ID)
		}
	})
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	s.doJSON(t, http.MethodGet, sandboxPath(created.ID, "/endpoints/"+execdPort), nil, http.StatusOK, &ep)
	if want := "/sandboxes/" + created.ID + "/proxy/" + execdPort; !strings.HasSuffix(ep.Endpoint, want) {
		t.Fatalf("execd endpoint %q does not end in %s", ep.Endpoint, want)
	}
	if ep.Headers[execdTokenHeader] == "" {
		t.Fatalf("execd endpoint has no %s header: %v", execdTokenHeader, ep.Headers)
	}
	box.Headers = ep.Headers
	return box
}

// execdDelete deletes a sandbox at the end of a test, when t.Context() is
// already cancelled.
func execdDelete(t testing.TB, s *Server, id string) {
	req, err := http.NewRequest(http.MethodDelete, s.URL+sandboxPath(id), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(apiKeyHeader, s.APIKey)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Errorf("delete sandbox %s: %v", id, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		body, _ := io.ReadAll(resp.Body)
		t.Errorf("delete sandbox %s: status %d; body %s", id, resp.StatusCode, body)
	}
}

// path is the server path of an execd route of the sandbox.
func (b *execdBox) path(rest string) string {
	return "/sandboxes/" + b.ID + "/proxy/" + execdPort + rest
}

// do sends an execd request with the endpoint's headers instead of the API
// key; hdr adds or overrides headers as in Server.do.
func (b *execdBox) do(t testing.TB, method, rest string, body any, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	h := map[string]string{apiKeyHeader: ""}
	for k, v := range b.Headers {
		h[k] = v
	}
	for k, v := range hdr {
		h[k] = v
	}
	return b.s.do(t, method, b.path(rest), body, h)
}

// execdEvent is one event of execd's command stream (reference §2.3).
type execdEvent struct {
	Type          string `json:"type"`
	Text          string `json:"text"`
	Timestamp     *int64 `json:"timestamp"`
	ExecutionTime *int64 `json:"execution_time"`
	Error         *struct {
		Ename     string   `json:"ename"`
		Evalue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

// execdRun is a finished POST /command as it came over the wire.
type execdRun struct {
	Header http.Header
	Raw    []byte
	Events []execdEvent
	Stdout []string
	Stderr []string
}

// last returns the last event that is not a ping.
func (r execdRun) last() execdEvent {
	for i := len(r.Events) - 1; i >= 0; i-- {
		if r.Events[i].Type != "ping" {
			return r.Events[i]
		}
	}
	return execdEvent{}
}

// run sends POST /command and checks the framing strictly: every event is
// one compact JSON object on one line, followed by a blank line, with an
// integer timestamp; the first is init.
func (b *execdBox) run(t testing.TB, req map[string]any) execdRun {
	t.Helper()
	return b.runAt(t, "/command", req, nil)
}

// runAt is run on another route of the same stream (a bash session's run),
// with headers added as in do.
func (b *execdBox) runAt(t testing.TB, route string, req map[string]any, extra map[string]string) execdRun {
	t.Helper()
	status, hdr, raw := b.do(t, http.MethodPost, route, req, extra)
	if status != http.StatusOK {
		t.Fatalf("POST %s %v: status %d; body %s", route, req, status, raw)
	}
	out := execdRun{Header: hdr, Raw: raw}
	if !bytes.HasSuffix(raw, []byte("\n\n")) {
		t.Fatalf("POST /command %v: stream does not end with a blank line: %q", req, execdTail(raw))
	}
	for i, chunk := range strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		if strings.Contains(chunk, "\n") {
			t.Fatalf("event %d spans several lines: %q", i, chunk)
		}
		var ev execdEvent
		if err := json.Unmarshal([]byte(chunk), &ev); err != nil {
			t.Fatalf("event %d is not one JSON object: %v: %q", i, err, chunk)
		}
		if ev.Timestamp == nil || *ev.Timestamp <= 0 {
			t.Errorf("event %d has no integer millisecond timestamp: %q", i, chunk)
		}
		switch ev.Type {
		case "stdout":
			out.Stdout = append(out.Stdout, ev.Text)
		case "stderr":
			out.Stderr = append(out.Stderr, ev.Text)
		}
		out.Events = append(out.Events, ev)
	}
	if len(out.Events) == 0 || out.Events[0].Type != "init" || out.Events[0].Text == "" {
		t.Fatalf("POST /command %v: the first event is not init with an id: %s", req, raw)
	}
	return out
}

// execdTail returns the end of b, for messages.
func execdTail(b []byte) []byte {
	if len(b) > 200 {
		return b[len(b)-200:]
	}
	return b
}

// ptyClient is the WebSocket of a PTY session: the terminal's output and
// the text frames seen so far.
type ptyClient struct {
	t      testing.TB
	conn   *websocket.Conn
	output strings.Builder
	frames []map[string]any
}

// dialPTY attaches to PTY session sid with the endpoint's headers; the
// connection closes when the test ends.
func dialPTY(t testing.TB, b *execdBox, sid string) *ptyClient {
	t.Helper()
	hdr := http.Header{}
	for k, v := range b.Headers {
		hdr.Set(k, v)
	}
	url := "ws://" + b.s.Addr + b.path("/pty/"+sid+"/ws")
	conn, resp, err := websocket.DefaultDialer.DialContext(t.Context(), url, hdr)
	if err != nil {
		t.Fatalf("dial %s: %v (response %v)", url, err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	return &ptyClient{t: t, conn: conn}
}

// read collects frames until done holds.
func (p *ptyClient) read(what string, done func() bool) {
	p.t.Helper()
	p.conn.SetReadDeadline(time.Now().Add(ptyWait))
	for !done() {
		typ, data, err := p.conn.ReadMessage()
		if err != nil {
			p.t.Fatalf("waiting for %s: %v; output so far %q, frames %v", what, err, p.output.String(), p.frames)
		}
		switch {
		case typ == websocket.BinaryMessage && len(data) > 0 && data[0] == 0x01:
			p.output.Write(data[1:])
		case typ == websocket.TextMessage:
			var f map[string]any
			if err := json.Unmarshal(data, &f); err != nil {
				p.t.Fatalf("text frame %q is not JSON: %v", data, err)
			}
			p.frames = append(p.frames, f)
		}
	}
}

// frame returns the first text frame of a type, or nil.
func (p *ptyClient) frame(typ string) map[string]any {
	for _, f := range p.frames {
		if f["type"] == typ {
			return f
		}
	}
	return nil
}
