//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// interruptGrace is how long an interrupted command has between SIGTERM
	// and SIGKILL.
	interruptGrace = 3 * time.Second
	// maxFinishedCommands bounds how many finished commands keep a status
	// (and, for background ones, their output).
	maxFinishedCommands = 1024
)

type runCommandRequest struct {
	Command    string            `json:"command"`
	Argv       []*string         `json:"argv"` // instead of command: run directly, no shell
	Cwd        string            `json:"cwd"`
	Background bool              `json:"background"`
	Timeout    int64             `json:"timeout"` // milliseconds; 0 means none
	UID        *uint32           `json:"uid"`
	GID        *uint32           `json:"gid"`
	Envs       map[string]string `json:"envs"`
}

// command is a command started by POST /command.
type command struct {
	id         string
	background bool
	startedAt  time.Time
	proc       *process
	output     *outputLog // background commands only

	mu         sync.Mutex
	content    string
	finished   bool
	finishedAt time.Time
	exitCode   int
	errMsg     string
}

type commandStatus struct {
	ID         string     `json:"id"`
	Content    string     `json:"content,omitempty"`
	Running    bool       `json:"running"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

func (c *command) status() commandStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := commandStatus{ID: c.id, Content: c.content, Running: !c.finished, StartedAt: c.startedAt}
	if c.finished {
		code, at := c.exitCode, c.finishedAt
		st.ExitCode, st.FinishedAt, st.Error = &code, &at, c.errMsg
	}
	return st
}

// commandTable indexes commands by id and forgets the oldest finished ones.
type commandTable struct {
	mu       sync.Mutex
	byID     map[string]*command
	finished []*command // in finishing order
}

func (t *commandTable) init() { t.byID = make(map[string]*command) }

func (t *commandTable) add(c *command) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID[c.id] = c
}

func (t *commandTable) get(id string) *command {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// finish records the end of c.
func (t *commandTable) finish(c *command) {
	code, desc := c.proc.result()
	c.mu.Lock()
	c.finished, c.finishedAt, c.exitCode = true, time.Now(), code
	if code != 0 {
		c.errMsg = desc
	}
	if !c.background {
		// A foreground command's text (possibly megabytes of heredoc) was
		// only worth keeping while it ran.
		c.content = ""
	}
	c.mu.Unlock()

	t.mu.Lock()
	defer t.mu.Unlock()
	t.finished = append(t.finished, c)
	for len(t.finished) > maxFinishedCommands {
		old := t.finished[0]
		t.finished = t.finished[1:]
		delete(t.byID, old.id)
		if old.output != nil {
			old.output.release()
		}
	}
}

func (t *commandTable) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID) - len(t.finished)
}

func (t *commandTable) killAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.byID {
		_ = c.proc.kill()
	}
}

// runCommand serves POST /command.
func (s *server) runCommand(w http.ResponseWriter, r *http.Request) {
	var req runCommandRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	s.startCommand(w, r, req)
}

// startCommand runs a decoded POST /command request (and /code runs without
// a language, which execd runs as commands).
func (s *server) startCommand(w http.ResponseWriter, r *http.Request, req runCommandRequest) {
	argv, err := parseArgv(req.Argv)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	if (req.Command == "") == (argv == nil) {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "exactly one of command and argv is required")
		return
	}
	if req.Timeout < 0 {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "timeout must not be negative")
		return
	}
	if req.GID != nil && req.UID == nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "uid is required when gid is provided")
		return
	}
	env := mergeEnv(commandEnv(s.log), req.Envs)
	dir, err := checkDir(req.Cwd, env)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	spec := execSpec{script: req.Command, argv: argv, dir: dir, env: env, cred: credential(req.UID, req.GID)}
	content := req.Command
	if argv != nil {
		content = argvContent(argv)
	}
	timeout := time.Duration(req.Timeout) * time.Millisecond
	id := newID()
	es := newHeldEventStream(w, s.delays.hold)
	register := func(p *process, output *outputLog) *command {
		c := &command{id: id, background: output != nil, startedAt: time.Now(), proc: p, output: output, content: content}
		s.commands.add(c)
		return c
	}
	if req.Background {
		s.startBackground(es, id, spec, timeout, register)
		return
	}
	var c *command
	p := s.runStreaming(r.Context(), es, id, spec, timeout, keepsLineEndings(r), func(p *process) { c = register(p, nil) })
	if p != nil {
		s.commands.finish(c)
	}
}

// runStreaming runs spec and streams its output on es, one event per line
// (with its terminator if keep is set), then execution_complete or an error
// event carrying the exit code. id is the init event's text; started, if set,
// sees the process before init is sent. It returns the reaped process, or
// nil if it did not start.
//
// Unlike upstream execd, a client that goes away kills the command's process
// group: nobody can read the result, and abandoned commands would pile up.
func (s *server) runStreaming(ctx context.Context, es *eventStream, id string, spec execSpec, timeout time.Duration, keep bool, started func(*process)) *process {
	begin := time.Now()
	p, outR, errR, err := s.spawn(spec, false)
	if err != nil {
		s.log.Warn("command failed to start", "id", id, "err", err)
		es.text(evInit, id)
		es.fail(err.Error(), err.Error())
		return nil
	}
	if started != nil {
		started(p)
	}
	es.text(evInit, id)

	stopKill := context.AfterFunc(ctx, func() { _ = p.kill() })
	defer stopKill()
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() { _ = p.kill() })
		defer t.Stop()
	}
	stopPing := es.pingEvery(s.delays.ping)
	defer stopPing()
	stdout := &lineEvents{typ: evStdout, es: es, split: lineSplitter{keep: keep}}
	stderr := &lineEvents{typ: evStderr, es: es, split: lineSplitter{keep: keep}}
	pumps := []*pump{
		startPump(outR, stdout.write, stdout.flush, false),
		startPump(errR, stderr.write, stderr.flush, false),
	}
	<-p.done
	for _, pp := range pumps {
		pp.exited()
	}
	for _, pp := range pumps {
		pp.wait()
	}
	if code, desc := p.result(); code == 0 {
		es.complete(time.Since(begin))
	} else {
		es.fail(strconv.Itoa(code), desc)
	}
	return p
}

// spawn starts spec with its stdout and stderr on new pipes, or on one pipe
// if combined, and returns the read ends (errR is nil when combined). The
// error of a failed start is what execd reports as evalue.
func (s *server) spawn(spec execSpec, combined bool) (p *process, outR, errR *os.File, err error) {
	var sh shell
	if spec.argv == nil {
		if sh, err = s.findShell(); err != nil {
			return nil, nil, nil, err
		}
	}
	outR, outW, err := outputPipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("output pipe: %w", err)
	}
	defer outW.Close()
	spec.stdout, spec.stderr = outW, outW
	if !combined {
		var errW *os.File
		if errR, errW, err = outputPipe(); err != nil {
			outR.Close()
			return nil, nil, nil, fmt.Errorf("output pipe: %w", err)
		}
		defer errW.Close()
		spec.stderr = errW
	}
	if p, err = start(sh, spec); err != nil {
		outR.Close()
		if errR != nil {
			errR.Close()
		}
		return nil, nil, nil, err
	}
	return p, outR, errR, nil
}

// keepsLineEndings reports whether r's client reads output events as
// execd 1.1.1 sends them, terminators kept (its #2033): upstream's SDKs
// from 1.1 on, which name themselves in the User-Agent
// (OpenSandbox-<Lang>-SDK/<version>) and join the events' texts as they
// come. Other clients get execd's earlier events, one line each with its
// terminator stripped, which clients joining them with "\n" (the Deep
// Agents backend on the 0.1 SDKs) rely on.
func keepsLineEndings(r *http.Request) bool {
	// Case-insensitive, as upstream parses it, without allocating: this is
	// on every command's path.
	const prefix, marker = "opensandbox-", "-sdk/"
	ua := r.UserAgent()
	if len(ua) < len(prefix) || !strings.EqualFold(ua[:len(prefix)], prefix) {
		return false
	}
	i := len(prefix)
	for i+len(marker) <= len(ua) && !strings.EqualFold(ua[i:i+len(marker)], marker) {
		i++
	}
	if i+len(marker) > len(ua) {
		return false
	}
	major, rest, _ := strings.Cut(ua[i+len(marker):], ".")
	minor := strings.TrimLeft(rest, "0123456789")
	minor = rest[:len(rest)-len(minor)]
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	return err1 == nil && err2 == nil && (ma > 1 || ma == 1 && mi >= 1)
}

// lineEvents turns one output pipe into stdout or stderr events.
type lineEvents struct {
	typ   string
	es    *eventStream
	split lineSplitter
	buf   []byte
}

func (l *lineEvents) write(p []byte) {
	ts := time.Now().UnixMilli()
	buf := l.buf[:0]
	for {
		line, rest, ok := l.split.next(p)
		if !ok {
			break
		}
		buf = appendTextEvent(buf, l.typ, line, ts)
		p = rest
	}
	l.send(buf)
}

// flush sends the final unterminated line, if any.
func (l *lineEvents) flush() {
	if line := l.split.flush(); len(line) > 0 {
		l.send(appendTextEvent(l.buf[:0], l.typ, line, time.Now().UnixMilli()))
	}
}

func (l *lineEvents) send(buf []byte) {
	if len(buf) > 0 {
		l.es.write(buf)
	}
	if cap(buf) > maxRetainedPartial {
		buf = nil
	}
	l.buf = buf
}

// startBackground starts a detached command: its output goes to a log and
// the stream ends right away with init and execution_complete.
func (s *server) startBackground(es *eventStream, id string, spec execSpec, timeout time.Duration, register func(*process, *outputLog) *command) {
	begin := time.Now()
	p, r, _, err := s.spawn(spec, true)
	if err != nil {
		s.log.Warn("background command failed to start", "id", id, "err", err)
		es.text(evInit, id)
		es.fail(err.Error(), err.Error())
		return
	}
	output := newOutputLog(s.opts.TempDir, id, s.log)
	c := register(p, output)
	out := startPump(r, output.write, nil, true)
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() { _ = p.kill() })
	}
	go func() {
		<-p.done
		if timer != nil {
			timer.Stop()
		}
		out.exited()
		out.wait()
		s.commands.finish(c)
	}()
	es.text(evInit, id)
	es.complete(time.Since(begin))
}

// commandStatus serves GET /command/status/{id}.
func (s *server) commandStatus(w http.ResponseWriter, _ *http.Request, id string) {
	c := s.commands.get(id)
	if c == nil {
		writeError(w, http.StatusNotFound, codeInvalidRequest, "command not found: "+id)
		return
	}
	writeJSON(w, http.StatusOK, c.status())
}

// commandLogs serves GET /command/{id}/logs?cursor=N: the output lines of a
// background command after line N, and the cursor to ask for next.
func (s *server) commandLogs(w http.ResponseWriter, r *http.Request, id string) {
	c := s.commands.get(id)
	if c == nil {
		writeError(w, http.StatusNotFound, codeInvalidRequest, "command not found: "+id)
		return
	}
	if c.output == nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "command "+id+" is not running in background")
		return
	}
	var cursor int64
	if v := r.URL.Query().Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, "invalid cursor: "+v)
			return
		}
		cursor = n
	}
	c.mu.Lock()
	finished := c.finished
	c.mu.Unlock()
	body, next, err := c.output.linesAfter(cursor, finished)
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeRuntimeError, err.Error())
		return
	}
	w.Header().Set("EXECD-COMMANDS-TAIL-CURSOR", strconv.FormatInt(next, 10))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.Copy(w, body)
}

// interruptCommand serves DELETE /command?id=: SIGTERM to the command's
// process group (or the running command of the bash session with that id),
// SIGKILL if it is still running after interruptGrace.
func (s *server) interruptCommand(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		writeError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'id'")
		return
	}
	var p *process
	if c := s.commands.get(id); c != nil {
		p = c.proc
	} else if sess := s.sessions.get(id); sess != nil {
		p = sess.current()
	} else {
		writeError(w, http.StatusNotFound, codeContextNotFound, "no command or session with id "+id)
		return
	}
	if p == nil {
		writeError(w, http.StatusInternalServerError, codeRuntimeError, "nothing is running in session "+id)
		return
	}
	if err := p.terminate(s.delays.interruptGrace); err != nil {
		if errors.Is(err, errNotRunning) {
			err = fmt.Errorf("command %s is not running", id)
		}
		writeError(w, http.StatusInternalServerError, codeRuntimeError, err.Error())
		return
	}
}
