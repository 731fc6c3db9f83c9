//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// ptyWait bounds each wait for PTY output; it only stops a hung test.
const ptyWait = 60 * time.Second

// TestExecdHTTP checks, with plain HTTP, the parts of the execd API that the
// TypeScript SDK hides or has no call for: the exact stream framing, JSON
// error bodies, Range downloads, the metrics shape and the PTY WebSocket.
func TestExecdHTTP(t *testing.T) {
	s := startServer(t)
	b := newExecdBox(t, s, codeInterpreterRequest())

	t.Run("stream framing and escapes", func(t *testing.T) {
		// NUL, NEL, LS, PS and an invalid UTF-8 byte, and a line ending in
		// \r\n: clients split the stream on NEL/LS/PS, so they must be escaped.
		script := `import sys; sys.stdout.buffer.write(b"a\x00b\n" + "x\u2028y\u0085z\u2029w\r\n".encode() + b"bad\xff\n")`
		r := b.run(t, map[string]any{"command": "python3 -c '" + script + "'"})
		want := []string{"a\x00b", "x\u2028y\u0085z\u2029w", "bad\ufffd"}
		if !slices.Equal(r.Stdout, want) {
			t.Errorf("stdout events %q, want %q", r.Stdout, want)
		}
		for _, raw := range []string{"\u2028", "\u0085", "\u2029", "\x00"} {
			if bytes.Contains(r.Raw, []byte(raw)) {
				t.Errorf("the stream carries %q unescaped: %q", raw, r.Raw)
			}
		}
		if ct := r.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q, want text/event-stream", ct)
		}
		if last := r.last(); last.Type != "execution_complete" || last.ExecutionTime == nil {
			t.Errorf("last event %+v, want execution_complete with execution_time", last)
		}
	})

	t.Run("nonzero exit", func(t *testing.T) {
		r := b.run(t, map[string]any{"command": "echo out; echo err >&2; exit 4"})
		if !slices.Equal(r.Stdout, []string{"out"}) || !slices.Equal(r.Stderr, []string{"err"}) {
			t.Errorf("stdout %q stderr %q, want [out] [err]", r.Stdout, r.Stderr)
		}
		last := r.last()
		if last.Type != "error" || last.Error == nil || last.Error.Ename != "CommandExecError" || last.Error.Evalue != "4" {
			t.Errorf("last event %+v, want error CommandExecError with evalue 4", last)
		}
		for _, ev := range r.Events {
			if ev.Type == "execution_complete" {
				t.Errorf("a failed command sent execution_complete: %s", r.Raw)
			}
		}
	})

	t.Run("missing cwd is a JSON 400", func(t *testing.T) {
		status, _, body := b.do(t, http.MethodPost, "/command", map[string]any{"command": "pwd", "cwd": "/no/such/dir"}, nil)
		e := decodeJSON[struct{ Code, Message string }](t, body)
		if status != http.StatusBadRequest || e.Code != "INVALID_REQUEST_BODY" || e.Message == "" {
			t.Errorf("status %d body %s, want 400 INVALID_REQUEST_BODY with a message", status, body)
		}
	})

	t.Run("access token", func(t *testing.T) {
		if status, _, body := b.do(t, http.MethodGet, "/ping", nil, nil); status != http.StatusOK {
			t.Errorf("ping with the endpoint's token: status %d; body %s", status, body)
		}
		for name, hdr := range map[string]map[string]string{
			"no credentials": {execdTokenHeader: ""},
			"wrong token":    {execdTokenHeader: "not-the-token"},
		} {
			if status, _, body := b.do(t, http.MethodGet, "/ping", nil, hdr); status != http.StatusUnauthorized {
				t.Errorf("ping with %s: status %d, want 401; body %s", name, status, body)
			}
		}
	})

	t.Run("range download", func(t *testing.T) {
		// 1024 bytes whose value is their offset modulo 256.
		b.run(t, map[string]any{"command": `python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 4)' > /tmp/range.bin`})
		content := bytes.Repeat(func() []byte {
			p := make([]byte, 256)
			for i := range p {
				p[i] = byte(i)
			}
			return p
		}(), 4)
		for _, tc := range []struct {
			rangeHdr     string
			status       int
			contentRange string
			body         []byte
		}{
			{"", http.StatusOK, "", content},
			{"bytes=10-19", http.StatusPartialContent, "bytes 10-19/1024", content[10:20]},
			{"bytes=1000-", http.StatusPartialContent, "bytes 1000-1023/1024", content[1000:]},
			{"bytes=-16", http.StatusPartialContent, "bytes 1008-1023/1024", content[1008:]},
			{"bytes=1020-5000", http.StatusPartialContent, "bytes 1020-1023/1024", content[1020:]},
			{"bytes=5000-6000", http.StatusRequestedRangeNotSatisfiable, "bytes */1024", nil},
		} {
			status, hdr, body := b.do(t, http.MethodGet, "/files/download?path=/tmp/range.bin", nil, map[string]string{"Range": tc.rangeHdr})
			if status != tc.status || hdr.Get("Content-Range") != tc.contentRange {
				t.Errorf("Range %q: status %d Content-Range %q, want %d %q", tc.rangeHdr, status, hdr.Get("Content-Range"), tc.status, tc.contentRange)
				continue
			}
			if tc.body == nil {
				continue
			}
			if !bytes.Equal(body, tc.body) {
				t.Errorf("Range %q: body %v, want %v", tc.rangeHdr, body, tc.body)
			}
			if cl := hdr.Get("Content-Length"); cl != fmt.Sprint(len(tc.body)) {
				t.Errorf("Range %q: Content-Length %q, want %d", tc.rangeHdr, cl, len(tc.body))
			}
		}
		status, _, body := b.do(t, http.MethodGet, "/files/download?path=/tmp/no-such-file", nil, nil)
		if e := decodeJSON[struct{ Code string }](t, body); status != http.StatusNotFound || e.Code != "FILE_NOT_FOUND" {
			t.Errorf("download of a missing file: status %d body %s, want 404 FILE_NOT_FOUND", status, body)
		}
	})

	t.Run("large uploads", func(t *testing.T) {
		// Above 1 MiB an upload with a Content-Length streams into the
		// sandbox on the size that Content-Length implies, which is wrong
		// when the file part is not the last one or an epilogue follows:
		// then sandboxd writes the file again from its copy.
		big := func(n int, seed byte) string {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i*7) + seed
			}
			return string(p)
		}
		a, c := big(3<<20+5, 1), big(2<<20+11, 2)
		for _, tc := range []struct {
			name     string
			files    [][2]string
			epilogue string
			length   bool // send a Content-Length
		}{
			{"last part", [][2]string{{"/tmp/up/a.bin", a}}, "", true},
			{"unknown length", [][2]string{{"/tmp/up/b.bin", a}}, "", false},
			{"not the last part", [][2]string{{"/tmp/up/c.bin", c}, {"/tmp/up/d.bin", a}}, "", true},
			{"epilogue", [][2]string{{"/tmp/up/e.bin", c}}, "an epilogue\r\n", true},
		} {
			body, ctype, err := uploadBodyFiles(tc.files)
			if err != nil {
				t.Fatal(err)
			}
			body = append(body, tc.epilogue...)
			var send any = body
			if !tc.length {
				send = struct{ io.Reader }{bytes.NewReader(body)}
			}
			status, _, resp := b.do(t, http.MethodPost, "/files/upload", send, map[string]string{"Content-Type": ctype})
			if status != http.StatusOK {
				t.Errorf("%s: upload status %d: %s", tc.name, status, resp)
				continue
			}
			for _, f := range tc.files {
				if status, _, got := b.do(t, http.MethodGet, "/files/download?path="+f[0], nil, nil); status != http.StatusOK || string(got) != f[1] {
					t.Errorf("%s: %s reads back %d bytes (status %d), want the %d uploaded", tc.name, f[0], len(got), status, len(f[1]))
				}
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		status, _, body := b.do(t, http.MethodGet, "/metrics", nil, nil)
		if status != http.StatusOK {
			t.Fatalf("GET /metrics: status %d; body %s", status, body)
		}
		checkMetrics(t, "GET /metrics", body)
	})

	t.Run("metrics watch", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+b.path("/metrics/watch"), nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range b.Headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("GET /metrics/watch: status %d Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
		if err != nil {
			t.Fatalf("read the first snapshot: %v", err)
		}
		checkMetrics(t, "GET /metrics/watch", line)
	})

	t.Run("pty", func(t *testing.T) { testPTY(t, b) })
}

// checkMetrics checks a metrics snapshot: exactly execd's five fields, all
// numbers, and the limits the sandbox was created with (1 CPU, 512 MiB).
func checkMetrics(t *testing.T, what string, body []byte) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: %v: %s", what, err, body)
	}
	keys := []string{"cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "timestamp"}
	got := make([]string, 0, len(m))
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(keys)
	if !slices.Equal(got, keys) {
		t.Fatalf("%s: fields %v, want %v", what, got, keys)
	}
	n := map[string]float64{}
	for k, v := range m {
		f, ok := v.(float64)
		if !ok {
			t.Fatalf("%s: %s is %T, want a number: %s", what, k, v, body)
		}
		n[k] = f
	}
	if n["cpu_count"] != 1 || n["mem_total_mib"] != 512 {
		t.Errorf("%s: cpu_count %v mem_total_mib %v, want the sandbox's limits 1 and 512: %s", what, n["cpu_count"], n["mem_total_mib"], body)
	}
	if n["mem_used_mib"] <= 0 || n["mem_used_mib"] > n["mem_total_mib"] || n["cpu_used_pct"] < 0 {
		t.Errorf("%s: implausible usage: %s", what, body)
	}
	if ts := int64(n["timestamp"]); float64(ts) != n["timestamp"] || time.UnixMilli(ts).Year() < 2024 {
		t.Errorf("%s: timestamp %v is not Unix milliseconds", what, n["timestamp"])
	}
}

// testPTY drives an interactive shell over the PTY WebSocket (upstream
// PTY.md): binary stdin frames, a resize, text stdin frames and the exit
// frame.
func testPTY(t *testing.T, b *execdBox) {
	status, _, body := b.do(t, http.MethodPost, "/pty", map[string]any{"cwd": "/tmp"}, nil)
	if status != http.StatusCreated {
		t.Fatalf("POST /pty: status %d; body %s", status, body)
	}
	sid := decodeJSON[struct {
		SessionID string `json:"session_id"`
	}](t, body).SessionID
	if sid == "" {
		t.Fatalf("POST /pty: no session_id in %s", body)
	}

	p := dialPTY(t, b, sid)
	conn, read, frame := p.conn, p.read, p.frame
	send := func(typ int, data []byte) {
		t.Helper()
		if err := conn.WriteMessage(typ, data); err != nil {
			t.Fatalf("write frame: %v", err)
		}
	}

	read("the connected frame", func() bool { return frame("connected") != nil })
	if f := frame("connected"); f["session_id"] != sid || f["mode"] != "pty" {
		t.Errorf("connected frame %v, want session_id %s mode pty", f, sid)
	}

	// The terminal echoes the input, so the command prints something the
	// input does not contain.
	send(websocket.BinaryMessage, append([]byte{0x00}, `echo "pty-$((6*7))-$(pwd)"`+"\n"...))
	read("the command's output", func() bool { return strings.Contains(p.output.String(), "pty-42-/tmp") })

	send(websocket.TextMessage, []byte(`{"type":"resize","cols":123,"rows":45}`))
	send(websocket.TextMessage, []byte(`{"type":"stdin","data":"echo \"size-$(stty size | tr ' ' x)\"\n"}`))
	read("the new size", func() bool { return strings.Contains(p.output.String(), "size-45x123") })

	send(websocket.TextMessage, []byte(`{"type":"stdin","data":"exit 5\n"}`))
	read("the exit frame", func() bool { return frame("exit") != nil })
	if code, _ := frame("exit")["exit_code"].(float64); code != 5 {
		t.Errorf("exit frame %v, want exit_code 5", frame("exit"))
	}

	status, _, body = b.do(t, http.MethodGet, "/pty/"+sid, nil, nil)
	st := decodeJSON[struct {
		SessionID    string `json:"session_id"`
		Running      bool   `json:"running"`
		OutputOffset int64  `json:"output_offset"`
	}](t, body)
	if status != http.StatusOK || st.SessionID != sid || st.Running || st.OutputOffset < int64(p.output.Len()) {
		t.Errorf("GET /pty/%s after exit: status %d %s, want the session, not running, offset >= %d", sid, status, body, p.output.Len())
	}
	if status, _, body := b.do(t, http.MethodDelete, "/pty/"+sid, nil, nil); status != http.StatusOK {
		t.Errorf("DELETE /pty/%s: status %d; body %s", sid, status, body)
	}
	if status, _, _ := b.do(t, http.MethodGet, "/pty/"+sid, nil, nil); status != http.StatusNotFound {
		t.Errorf("GET /pty/%s after DELETE: status %d, want 404", sid, status)
	}
}
