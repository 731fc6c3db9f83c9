//go:build linux

package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"
)

// PTY WebSocket protocol (upstream components/execd/PTY.md). Binary frames
// start with a channel byte; JSON text frames carry control messages.
const (
	chanStdin  byte = 0x00 // client → server
	chanStdout byte = 0x01
	chanStderr byte = 0x02 // pipe mode only
	chanReplay byte = 0x03 // followed by an 8-byte big-endian offset

	wsPingInterval    = 30 * time.Second
	wsReadTimeout     = 60 * time.Second
	wsWriteTimeout    = 10 * time.Second
	wsTakeoverTimeout = 5 * time.Second
	// wsCloseTakenOver tells an evicted client that another one took over
	// (application range of RFC 6455 close codes).
	wsCloseTakenOver = 4001

	replaySize = 1 << 20
)

// ptySession is an interactive shell, started when the first WebSocket
// attaches: a terminal (default) or pipes (?pty=0). Its output is kept in a
// replay buffer so that a client can reconnect and catch up.
type ptySession struct {
	id, dir, command string

	// attach admits one WebSocket at a time.
	attach chan struct{}

	mu       sync.Mutex
	closed   bool
	proc     *process
	isPTY    bool
	stdin    *os.File
	ptmx     *os.File      // terminal mode only
	done     chan struct{} // closed when the shell has exited and its output is read
	exitCode int
	replay   ring
	sink     chan ptyChunk // the attached client's output, or nil
	sinkGone chan struct{}
	evict    func() // closes the attached client's connection
}

type ptyChunk struct {
	channel byte
	data    []byte
}

type ptyTable struct {
	mu   sync.Mutex
	byID map[string]*ptySession
}

func (t *ptyTable) init() { t.byID = make(map[string]*ptySession) }

func (t *ptyTable) get(id string) *ptySession {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

func (t *ptyTable) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, p := range t.byID {
		if p.running() {
			n++
		}
	}
	return n
}

func (t *ptyTable) closeAll() {
	t.mu.Lock()
	all := t.byID
	t.byID = make(map[string]*ptySession)
	t.mu.Unlock()
	for _, p := range all {
		p.close()
	}
}

func (p *ptySession) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc != nil && p.proc.running()
}

// createPTY serves POST /pty {cwd?, command?} → 201 {session_id}.
func (s *server) createPTY(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Cwd     string `json:"cwd"`
		Command string `json:"command"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	dir, err := expandPath(req.Cwd, os.Environ())
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			writeError(w, http.StatusInternalServerError, codeRuntimeError, "error creating pty session directory: "+err.Error())
			return
		}
	}
	p := &ptySession{id: newID(), dir: dir, command: req.Command, attach: make(chan struct{}, 1), replay: ring{buf: make([]byte, replaySize)}}
	s.ptys.mu.Lock()
	s.ptys.byID[p.id] = p
	s.ptys.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]string{"session_id": p.id})
}

// ptyStatus serves GET /pty/{id}.
func (s *server) ptyStatus(w http.ResponseWriter, r *http.Request) {
	p := s.ptys.get(r.PathValue("id"))
	if p == nil {
		writeError(w, http.StatusNotFound, codeContextNotFound, "pty session "+r.PathValue("id")+" not found")
		return
	}
	p.mu.Lock()
	offset := p.replay.total
	p.mu.Unlock()
	writeJSON(w, http.StatusOK, struct {
		SessionID    string `json:"session_id"`
		Running      bool   `json:"running"`
		OutputOffset int64  `json:"output_offset"`
	}{p.id, p.running(), offset})
}

// deletePTY serves DELETE /pty/{id}.
func (s *server) deletePTY(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.ptys.mu.Lock()
	p := s.ptys.byID[id]
	delete(s.ptys.byID, id)
	s.ptys.mu.Unlock()
	if p == nil {
		writeError(w, http.StatusNotFound, codeContextNotFound, "pty session "+id+" not found")
		return
	}
	p.close()
}

// close kills the shell and disconnects the client.
func (p *ptySession) close() {
	p.mu.Lock()
	p.closed = true
	proc, evict := p.proc, p.evict
	p.mu.Unlock()
	if proc != nil {
		_ = proc.kill()
	}
	if evict != nil {
		evict()
	}
}

// start launches the shell if it is not running.
func (p *ptySession) start(findShell func() (shell, error), terminal bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("pty session is closed")
	}
	if p.proc != nil && p.proc.running() {
		return nil
	}
	sh, err := findShell()
	if err != nil {
		return err
	}
	args := []string{filepath.Base(sh.path)}
	if sh.isBash {
		args = append(args, "--norc", "--noprofile")
	}
	if p.command != "" {
		args = append(args, "-c", p.command)
	}
	cmd := &exec.Cmd{Path: sh.path, Args: args, Dir: p.dir, Env: os.Environ()}
	var outputs []*os.File
	var channels []byte
	if terminal {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return fmt.Errorf("open pty: %w", err)
		}
		defer tty.Close()
		if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 80, Rows: 24}); err != nil {
			ptmx.Close()
			return fmt.Errorf("set pty size: %w", err)
		}
		// pty leaves the master in blocking mode; a pollable one lets the
		// pump drain it with deadlines like a pipe.
		master, err := pollable(ptmx)
		if err != nil {
			return err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		if err := cmd.Start(); err != nil {
			master.Close()
			return fmt.Errorf("start shell: %w", err)
		}
		p.ptmx, p.stdin = master, master
		outputs, channels = []*os.File{master}, []byte{chanStdout}
	} else {
		files, err := pipes(3)
		if err != nil {
			return err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0][0], files[1][1], files[2][1]
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err = cmd.Start()
		files[0][0].Close()
		files[1][1].Close()
		files[2][1].Close()
		if err != nil {
			files[0][1].Close()
			files[1][0].Close()
			files[2][0].Close()
			return fmt.Errorf("start shell: %w", err)
		}
		p.ptmx, p.stdin = nil, files[0][1]
		outputs, channels = []*os.File{files[1][0], files[2][0]}, []byte{chanStdout, chanStderr}
	}
	p.isPTY = terminal
	proc := adopt(cmd)
	p.proc = proc
	done := make(chan struct{})
	p.done = done
	pumps := make([]*pump, len(outputs))
	for i, f := range outputs {
		ch := channels[i]
		pumps[i] = startPump(f, func(b []byte) { p.output(ch, b) }, nil, false)
	}
	stdin := p.stdin
	go func() {
		<-proc.done
		for _, pp := range pumps {
			pp.exited()
		}
		for _, pp := range pumps {
			pp.wait()
		}
		if !terminal {
			stdin.Close()
		}
		code, _ := proc.result()
		p.mu.Lock()
		p.exitCode = code
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// pollable returns a non-blocking copy of f registered with the runtime
// poller, and closes f.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("dup pty: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pty nonblock: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// pipes returns n pipes as [read, write] pairs.
func pipes(n int) ([][2]*os.File, error) {
	out := make([][2]*os.File, 0, n)
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			for _, pr := range out {
				pr[0].Close()
				pr[1].Close()
			}
			return nil, fmt.Errorf("pipe: %w", err)
		}
		out = append(out, [2]*os.File{r, w})
	}
	return out, nil
}

// output records shell output and hands it to the attached client. A slow
// client slows the shell down, as a terminal does.
func (p *ptySession) output(channel byte, b []byte) {
	p.mu.Lock()
	p.replay.write(b)
	sink, gone := p.sink, p.sinkGone
	p.mu.Unlock()
	if sink == nil {
		return
	}
	select {
	case sink <- ptyChunk{channel, append([]byte(nil), b...)}:
	case <-gone:
	}
}

// subscribe atomically snapshots the replay buffer from offset since and
// makes the caller the receiver of further output.
func (p *ptySession) subscribe(since int64, evict func()) (replay []byte, offset int64, sink chan ptyChunk, done chan struct{}, isPTY bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	replay, offset = p.replay.since(since)
	p.sink, p.sinkGone, p.evict = make(chan ptyChunk), make(chan struct{}), evict
	return replay, offset, p.sink, p.done, p.isPTY
}

func (p *ptySession) unsubscribe(sink chan ptyChunk) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sink == sink {
		close(p.sinkGone)
		p.sink, p.sinkGone, p.evict = nil, nil, nil
	}
}

func (p *ptySession) writeStdin(b []byte) error {
	p.mu.Lock()
	f := p.stdin
	p.mu.Unlock()
	if f == nil {
		return errors.New("session not started")
	}
	_, err := f.Write(b)
	return err
}

func (p *ptySession) signal(name string) error {
	sig, ok := map[string]syscall.Signal{
		"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL,
		"SIGQUIT": syscall.SIGQUIT, "SIGHUP": syscall.SIGHUP,
	}[name]
	if !ok {
		return fmt.Errorf("unknown signal %q", name)
	}
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	if proc == nil {
		return errNotRunning
	}
	return proc.signal(sig)
}

func (p *ptySession) resize(cols, rows int) error {
	p.mu.Lock()
	f := p.ptmx
	p.mu.Unlock()
	if f == nil || cols <= 0 || rows <= 0 || cols > 0xffff || rows > 0xffff {
		return nil // pipe mode has no size
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	ws := &unix.Winsize{Col: uint16(cols), Row: uint16(rows)}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) { ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		return err
	}
	return ioctlErr
}

// acquire admits one WebSocket client. With takeover, the current client is
// evicted first.
func (p *ptySession) acquire(takeover bool) bool {
	select {
	case p.attach <- struct{}{}:
		return true
	default:
	}
	if !takeover {
		return false
	}
	p.mu.Lock()
	evict := p.evict
	p.mu.Unlock()
	if evict != nil {
		evict()
	}
	t := time.NewTimer(wsTakeoverTimeout)
	defer t.Stop()
	select {
	case p.attach <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (p *ptySession) release() { <-p.attach }

var wsUpgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 32 << 10,
	// The agent is reached only through sandboxd, which authenticates.
	CheckOrigin: func(*http.Request) bool { return true },
}

type ptyFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id,omitempty"`
	Mode      string `json:"mode,omitempty"`
	Data      string `json:"data,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Error     string `json:"error,omitempty"`
	Code      string `json:"code,omitempty"`
	Cols      int    `json:"cols,omitempty"`
	Rows      int    `json:"rows,omitempty"`
	Signal    string `json:"signal,omitempty"`
}

// ptyWebSocket serves GET /pty/{id}/ws[?pty=0][&since=N][&takeover=1].
func (s *server) ptyWebSocket(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p := s.ptys.get(id)
	if p == nil {
		writeError(w, http.StatusNotFound, codeContextNotFound, "pty session "+id+" not found")
		return
	}
	q := r.URL.Query()
	takeover := q.Get("takeover") == "1" && websocket.IsWebSocketUpgrade(r)
	if !takeover && !p.acquire(false) {
		writeError(w, http.StatusConflict, "ALREADY_CONNECTED", "another client is already connected to pty session "+id)
		return
	}
	// A takeover evicts the current client only once the handshake has
	// succeeded, so a failed handshake harms nobody.
	conn, err := wsUpgrader.Upgrade(w, r, nil)
	if err != nil {
		if !takeover {
			p.release()
		}
		return
	}
	defer conn.Close()
	if takeover && !p.acquire(true) {
		writeFrame(conn, &sync.Mutex{}, ptyFrame{Type: "error", Code: "ALREADY_CONNECTED", Error: "takeover timed out for pty session " + id})
		return
	}
	defer p.release()

	var wmu sync.Mutex // gorilla/websocket allows one writer at a time
	if err := p.start(s.findShell, q.Get("pty") != "0"); err != nil {
		writeFrame(conn, &wmu, ptyFrame{Type: "error", Code: "START_FAILED", Error: err.Error()})
		return
	}
	since, _ := strconv.ParseInt(q.Get("since"), 10, 64)
	// halt ends the connection: closing it also unblocks the read loop.
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() {
		stopOnce.Do(func() {
			close(stop)
			conn.Close()
		})
	}
	evict := func() {
		// WriteControl needs no wmu: it waits only for the frame being
		// written, and a stalled writer delays the takeover by its deadline
		// at most.
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(wsCloseTakenOver, "TAKEN_OVER"), time.Now().Add(200*time.Millisecond))
		halt()
	}
	replay, offset, sink, done, isPTY := p.subscribe(since, evict)
	defer p.unsubscribe(sink)

	if len(replay) > 0 {
		frame := make([]byte, 9+len(replay))
		frame[0] = chanReplay
		binary.BigEndian.PutUint64(frame[1:9], uint64(offset))
		copy(frame[9:], replay)
		if writeBinary(conn, &wmu, frame) != nil {
			return
		}
	}
	mode := "pipe"
	if isPTY {
		mode = "pty"
	}
	if writeFrame(conn, &wmu, ptyFrame{Type: "connected", SessionID: id, Mode: mode}) != nil {
		return
	}

	go func() { // output, pings, and the exit frame
		defer halt()
		ping := time.NewTicker(wsPingInterval)
		defer ping.Stop()
		for {
			select {
			case <-stop:
				return
			case c := <-sink:
				if writeBinary(conn, &wmu, append([]byte{c.channel}, c.data...)) != nil {
					return
				}
			case <-ping.C:
				wmu.Lock()
				_ = conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
				err := conn.WriteMessage(websocket.PingMessage, nil)
				wmu.Unlock()
				if err != nil {
					return
				}
			case <-done:
				p.mu.Lock()
				code := p.exitCode
				p.mu.Unlock()
				_ = writeFrame(conn, &wmu, ptyFrame{Type: "exit", ExitCode: &code})
				wmu.Lock()
				_ = conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
				_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "process exited"))
				wmu.Unlock()
				return
			}
		}
	}()
	s.ptyReadLoop(conn, &wmu, p, halt)
}

// ptyReadLoop handles the client's frames until the connection fails or is
// closed by halt.
func (s *server) ptyReadLoop(conn *websocket.Conn, wmu *sync.Mutex, p *ptySession, halt func()) {
	defer halt()
	_ = conn.SetReadDeadline(time.Now().Add(wsReadTimeout))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wsReadTimeout)) })
	for {
		typ, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(wsReadTimeout))
		switch typ {
		case websocket.BinaryMessage:
			if len(data) == 0 || data[0] != chanStdin {
				continue
			}
			if err := p.writeStdin(data[1:]); err != nil {
				_ = writeFrame(conn, wmu, ptyFrame{Type: "error", Code: "STDIN_WRITE_FAILED", Error: err.Error()})
				return
			}
		case websocket.TextMessage:
			var f ptyFrame
			if json.Unmarshal(data, &f) != nil {
				continue
			}
			switch f.Type {
			case "stdin":
				if err := p.writeStdin([]byte(f.Data)); err != nil {
					_ = writeFrame(conn, wmu, ptyFrame{Type: "error", Code: "STDIN_WRITE_FAILED", Error: err.Error()})
					return
				}
			case "signal":
				if err := p.signal(f.Signal); err != nil {
					s.log.Debug("pty signal", "id", p.id, "err", err)
				}
			case "resize":
				if err := p.resize(f.Cols, f.Rows); err != nil {
					s.log.Debug("pty resize", "id", p.id, "err", err)
				}
			case "ping":
				_ = writeFrame(conn, wmu, ptyFrame{Type: "pong"})
			default:
				_ = writeFrame(conn, wmu, ptyFrame{Type: "error", Code: "INVALID_FRAME", Error: fmt.Sprintf("unknown frame type %q", f.Type)})
			}
		}
	}
}

func writeFrame(conn *websocket.Conn, wmu *sync.Mutex, f ptyFrame) error {
	wmu.Lock()
	defer wmu.Unlock()
	_ = conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
	return conn.WriteJSON(f)
}

func writeBinary(conn *websocket.Conn, wmu *sync.Mutex, b []byte) error {
	wmu.Lock()
	defer wmu.Unlock()
	_ = conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
	return conn.WriteMessage(websocket.BinaryMessage, b)
}

// ring keeps the last len(buf) bytes of a stream and how many were written.
type ring struct {
	buf   []byte
	total int64
}

func (r *ring) write(p []byte) {
	size := int64(len(r.buf))
	if int64(len(p)) > size {
		r.total += int64(len(p)) - size
		p = p[int64(len(p))-size:]
	}
	at := int(r.total % size)
	n := copy(r.buf[at:], p)
	copy(r.buf, p[n:])
	r.total += int64(len(p))
}

// since returns the bytes from offset on that are still held, and the
// offset they start at.
func (r *ring) since(offset int64) ([]byte, int64) {
	size := int64(len(r.buf))
	offset = max(offset, r.total-size, 0)
	if offset >= r.total {
		return nil, r.total
	}
	out := make([]byte, r.total-offset)
	at := int(offset % size)
	n := copy(out, r.buf[at:])
	copy(out[n:], r.buf)
	return out, offset
}
