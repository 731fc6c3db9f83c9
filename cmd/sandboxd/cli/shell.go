package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/term"
)

// Channel bytes of execd's PTY WebSocket (binary frames).
const (
	ptyStdin  byte = 0x00
	ptyStdout byte = 0x01
	ptyStderr byte = 0x02
	ptyReplay byte = 0x03 // then an 8-byte offset
)

// ptyFrame is a JSON control frame of the PTY WebSocket.
type ptyFrame struct {
	Type     string `json:"type"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
	Code     string `json:"code,omitempty"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	Signal   string `json:"signal,omitempty"`
}

func runShell(ctx context.Context, e *env, args []string) (int, error) {
	fs := e.flags()
	cwd := fs.String("cwd", "", "working directory in the sandbox")
	c, rest, err := e.connect(fs, args)
	if err != nil {
		return 0, err
	}
	if len(rest) != 1 {
		return 0, usagef("shell needs one ID")
	}
	id := rest[0]
	req := map[string]any{}
	if *cwd != "" {
		req["cwd"] = *cwd
	}
	var created struct {
		SessionID string `json:"session_id"`
	}
	if err := c.json(ctx, http.MethodPost, execdPath(id, "/pty"), nil, req, &created); err != nil {
		return 1, err
	}
	session := execdPath(id, "/pty/"+url.PathEscape(created.SessionID))
	// The shell goes with the session, whichever way this ends.
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.json(dctx, http.MethodDelete, session, nil, nil, nil)
	}()

	ws := c.url(session+"/ws", nil)
	ws = map[string]string{"http": "ws", "https": "wss"}[c.base.Scheme] + strings.TrimPrefix(ws, c.base.Scheme)
	conn, res, err := websocket.DefaultDialer.DialContext(ctx, ws, http.Header{headerAPIKey: {c.key}})
	if err != nil {
		if res != nil {
			return 1, fmt.Errorf("open terminal: %w (HTTP %d)", err, res.StatusCode)
		}
		return 1, fmt.Errorf("open terminal: %w", err)
	}
	defer conn.Close()
	return terminal(ctx, conn, e.stdin, e.stdout, e.stderr)
}

// terminal joins the local terminal to the remote one until the shell
// exits, and returns its exit code. A local terminal is put in raw mode,
// so Ctrl-C and the other keys reach the remote shell as typed.
func terminal(ctx context.Context, conn *websocket.Conn, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	var wmu sync.Mutex
	send := func(typ int, data []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		return conn.WriteMessage(typ, data)
	}
	sendJSON := func(f ptyFrame) error {
		b, _ := json.Marshal(f)
		return send(websocket.TextMessage, b)
	}

	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd := int(f.Fd())
		old, err := term.MakeRaw(fd)
		if err != nil {
			return 1, fmt.Errorf("raw mode: %w", err)
		}
		defer term.Restore(fd, old)
		resize := func() {
			if w, h, err := term.GetSize(fd); err == nil {
				_ = sendJSON(ptyFrame{Type: "resize", Cols: w, Rows: h})
			}
		}
		resize()
		defer onResize(resize)()
	} else {
		// Without a local terminal, Ctrl-C is a signal here: pass it on.
		interrupts := make(chan os.Signal, 1)
		signal.Notify(interrupts, os.Interrupt)
		defer signal.Stop(interrupts)
		go func() {
			for range interrupts {
				_ = sendJSON(ptyFrame{Type: "signal", Signal: "SIGINT"})
			}
		}()
	}

	go func() { // keyboard → shell
		buf := make([]byte, 32<<10)
		for {
			n, err := stdin.Read(buf)
			if n > 0 && send(websocket.BinaryMessage, append([]byte{ptyStdin}, buf[:n]...)) != nil {
				return
			}
			if err != nil {
				return // the shell decides when it ends; EOF on a pipe does not end it
			}
		}
	}()
	go func() {
		<-ctx.Done()
		conn.Close()
	}()

	for {
		typ, data, err := conn.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return 130, ctx.Err()
			}
			return 1, fmt.Errorf("terminal closed: %w", err)
		}
		switch {
		case typ == websocket.BinaryMessage && len(data) > 0:
			out := data[1:]
			switch data[0] {
			case ptyReplay:
				if len(out) < 8 {
					continue
				}
				out = out[8:]
			case ptyStdout:
			case ptyStderr:
				_, _ = stderr.Write(out)
				continue
			default:
				continue
			}
			_, _ = stdout.Write(out)
		case typ == websocket.TextMessage:
			var f ptyFrame
			if json.Unmarshal(data, &f) != nil {
				continue
			}
			switch f.Type {
			case "exit":
				if f.ExitCode == nil {
					return 1, errors.New("the shell ended without an exit code")
				}
				return *f.ExitCode, nil
			case "error":
				return 1, fmt.Errorf("terminal: %s %s", f.Code, f.Error)
			}
		}
	}
}
