//go:build linux

package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func (a *testAgent) newPTY(t *testing.T, body any) string {
	t.Helper()
	id := decode[map[string]string](t, a.do(t, http.MethodPost, "/pty", body), http.StatusCreated)["session_id"]
	if id == "" {
		t.Fatal("no session_id")
	}
	return id
}

type ptyStatusBody struct {
	SessionID    string `json:"session_id"`
	Running      bool   `json:"running"`
	OutputOffset int64  `json:"output_offset"`
}

// wsClient is a test client of the PTY WebSocket.
type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
	// out holds output read but not yet matched by until, per channel: one
	// frame may carry the text of two successive until calls.
	out map[byte]*bytes.Buffer
}

func (a *testAgent) dialPTY(t *testing.T, id, query string) (*wsClient, *http.Response, error) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(a.url, "http") + "/pty/" + id + "/ws" + query
	conn, resp, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { conn.Close() })
	// Guards the test against hanging; the agent is expected to answer at once.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	return &wsClient{t: t, conn: conn, out: map[byte]*bytes.Buffer{chanStdout: {}, chanStderr: {}}}, resp, nil
}

// frame reads the next message: binary frames as channel + data, text
// frames decoded into ptyFrame.
func (c *wsClient) frame() (channel byte, data []byte, text *ptyFrame) {
	c.t.Helper()
	typ, b, err := c.conn.ReadMessage()
	if err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	if typ == websocket.TextMessage {
		var f ptyFrame
		if err := json.Unmarshal(b, &f); err != nil {
			c.t.Fatalf("text frame %q: %v", b, err)
		}
		return 0, nil, &f
	}
	if len(b) == 0 {
		c.t.Fatal("empty binary frame")
	}
	return b[0], b[1:], nil
}

// until reads output until each channel in want has shown its text, and
// consumes that channel's output up to the end of the text.
func (c *wsClient) until(want map[byte]string) {
	c.t.Helper()
	for ch, text := range want {
		for !strings.Contains(c.out[ch].String(), text) {
			channel, data, frame := c.frame()
			if frame != nil {
				c.t.Fatalf("got %+v while waiting for %q", *frame, want)
			}
			if b := c.out[channel]; b != nil {
				b.Write(data)
			}
		}
		b := c.out[ch]
		b.Next(strings.Index(b.String(), text) + len(text))
	}
}

func (c *wsClient) stdin(s string) {
	c.t.Helper()
	if err := c.conn.WriteMessage(websocket.BinaryMessage, append([]byte{chanStdin}, s...)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *wsClient) send(f ptyFrame) {
	c.t.Helper()
	if err := c.conn.WriteJSON(f); err != nil {
		c.t.Fatal(err)
	}
}

func (c *wsClient) expectText(typ string) *ptyFrame {
	c.t.Helper()
	for {
		_, _, text := c.frame()
		if text != nil {
			if text.Type != typ {
				c.t.Fatalf("got %+v, want a %s frame", *text, typ)
			}
			return text
		}
	}
}

func TestPTYTerminal(t *testing.T) {
	a := newTestAgent(t)
	id := a.newPTY(t, map[string]string{"cwd": a.dir})
	if st := decode[ptyStatusBody](t, a.do(t, http.MethodGet, "/pty/"+id, nil), http.StatusOK); st.Running || st.SessionID != id {
		t.Fatalf("status before attach %+v", st)
	}

	c, _, err := a.dialPTY(t, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if f := c.expectText("connected"); f.SessionID != id || f.Mode != "pty" {
		t.Fatalf("connected frame %+v", *f)
	}
	c.send(ptyFrame{Type: "resize", Cols: 100, Rows: 30})
	c.stdin("stty size; echo $((6*7))-$(pwd)\n")
	c.until(map[byte]string{chanStdout: "30 100"})
	c.until(map[byte]string{chanStdout: "42-" + a.dir})
	c.send(ptyFrame{Type: "ping"})
	c.expectText("pong")

	// A second client is refused while the first is attached.
	if _, resp, err := a.dialPTY(t, id, ""); err == nil || resp == nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("second client: err %v, resp %v; want 409", err, resp)
	}
	st := decode[ptyStatusBody](t, a.do(t, http.MethodGet, "/pty/"+id, nil), http.StatusOK)
	if !st.Running || st.OutputOffset == 0 {
		t.Fatalf("status while running %+v", st)
	}
	if n := decode[map[string]int](t, a.do(t, http.MethodGet, "/_sandboxd/activity", nil), http.StatusOK)["running"]; n != 1 {
		t.Fatalf("activity %d, want 1", n)
	}

	// Takeover evicts the first client, and replay catches up from offset 0.
	c2, _, err := a.dialPTY(t, id, "?takeover=1&since=0")
	if err != nil {
		t.Fatal(err)
	}
	var err2 error
	for err2 == nil { // output may still be queued before the close frame
		_, _, err2 = c.conn.ReadMessage()
	}
	if !websocket.IsCloseError(err2, wsCloseTakenOver) {
		t.Fatalf("evicted client got %v, want close %d", err2, wsCloseTakenOver)
	}
	ch, data, _ := c2.frame()
	if ch != chanReplay || len(data) < 8 || binary.BigEndian.Uint64(data[:8]) != 0 || !bytes.Contains(data[8:], []byte("42-")) {
		t.Fatalf("first frame after takeover: channel %d %q, want a replay from offset 0", ch, data)
	}
	c2.expectText("connected")

	c2.stdin("exit 3\n")
	if f := c2.expectText("exit"); f.ExitCode == nil || *f.ExitCode != 3 {
		t.Fatalf("exit frame %+v, want exit_code 3", *f)
	}
	if _, _, err := c2.conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after exit got %v, want a normal close", err)
	}

	if resp := a.do(t, http.MethodDelete, "/pty/"+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %s", resp.Status)
	}
	wantError(t, a.do(t, http.MethodGet, "/pty/"+id, nil), http.StatusNotFound, codeContextNotFound)
	wantError(t, a.do(t, http.MethodDelete, "/pty/"+id, nil), http.StatusNotFound, codeContextNotFound)
}

func TestPTYPipeMode(t *testing.T) {
	a := newTestAgent(t)
	id := a.newPTY(t, nil)
	c, _, err := a.dialPTY(t, id, "?pty=0")
	if err != nil {
		t.Fatal(err)
	}
	if f := c.expectText("connected"); f.Mode != "pipe" {
		t.Fatalf("mode %q, want pipe", f.Mode)
	}
	c.send(ptyFrame{Type: "stdin", Data: "echo to-err >&2; echo to-out\n"})
	c.until(map[byte]string{chanStdout: "to-out", chanStderr: "to-err"})
	c.send(ptyFrame{Type: "bogus"})
	if f := c.expectText("error"); f.Code != "INVALID_FRAME" {
		t.Fatalf("error frame %+v", *f)
	}
	c.send(ptyFrame{Type: "signal", Signal: "SIGKILL"})
	if f := c.expectText("exit"); f.ExitCode == nil || *f.ExitCode != -1 {
		t.Fatalf("exit frame %+v, want -1", *f)
	}
}

func TestPTYCommand(t *testing.T) {
	a := newTestAgent(t)
	id := a.newPTY(t, map[string]string{"command": "echo from-command; exit 5"})
	c, _, err := a.dialPTY(t, id, "")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for {
		ch, data, text := c.frame()
		if text != nil && text.Type == "exit" {
			if *text.ExitCode != 5 {
				t.Fatalf("exit code %d, want 5", *text.ExitCode)
			}
			break
		}
		if ch == chanStdout || ch == chanReplay {
			out.Write(data)
		}
	}
	if !strings.Contains(out.String(), "from-command") {
		t.Fatalf("output %q lacks the command's output before the exit frame", out.String())
	}
	wantError(t, a.do(t, http.MethodGet, "/pty/nope/ws", nil), http.StatusNotFound, codeContextNotFound)
}

func TestRing(t *testing.T) {
	r := ring{buf: make([]byte, 8)}
	r.write([]byte("abc"))
	if b, off := r.since(0); string(b) != "abc" || off != 0 {
		t.Fatalf("got %q@%d", b, off)
	}
	r.write([]byte("defghij")) // wraps: holds "cdefghij"
	tests := []struct {
		since   int64
		want    string
		wantOff int64
	}{
		{0, "cdefghij", 2},
		{5, "fghij", 5},
		{10, "", 10},
		{99, "", 10},
	}
	for _, tt := range tests {
		if b, off := r.since(tt.since); string(b) != tt.want || off != tt.wantOff {
			t.Errorf("since(%d) = %q@%d, want %q@%d", tt.since, b, off, tt.want, tt.wantOff)
		}
	}
	r.write([]byte("0123456789XY")) // larger than the buffer
	if b, off := r.since(0); string(b) != "456789XY" || off != 14 || r.total != 22 {
		t.Fatalf("got %q@%d total %d", b, off, r.total)
	}
}
