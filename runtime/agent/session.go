//go:build linux

package agent

import (
	"bytes"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// A bash session keeps its working directory and exported environment from
// one run to the next. Like upstream execd, each run is a fresh shell: on
// exit, a trap writes the shell's final directory and exported variables to
// a pipe, and the next run starts from them. The state travels on its own
// file descriptor, so output is never mixed with it.
//
// The trap duplicates the pipe (fd 3) to a high descriptor first, so that
// fd 3 is free for the user's script. It does not call exit: bash then keeps
// the script's exit status, and a shell killed by a signal still dies of it.
const (
	bashStatePrologue = `exec {__sandboxd_fd}>&3 3>&-; trap 'set +eu; IFS=$'"'"' \t\n'"'"'; ` +
		`{ printf "%s\0" "$PWD"; for __sandboxd_v in $(compgen -e); do [[ -v $__sandboxd_v ]] && printf "%s=%s\0" "$__sandboxd_v" "${!__sandboxd_v}"; done; } >&"$__sandboxd_fd"' EXIT; `
	// Other shells (dash, busybox ash) list exported variables with export -p.
	shStatePrologue = `trap '{ printf "%s\0" "$PWD"; export -p; } >&3' EXIT; `

	// maxStateSize bounds what a run may hand to the next one.
	maxStateSize = 16 << 20
	// maxEnvEntry is the longest "KEY=value" the kernel accepts in execve.
	maxEnvEntry = 128<<10 - 1
)

// bashSession is one persistent session. Runs take turns.
type bashSession struct {
	id   string
	turn chan struct{} // holds a token while a run is in progress

	mu     sync.Mutex
	dir    string
	env    []string
	proc   *process // the current run
	closed bool
}

// current returns the running process, if any.
func (b *bashSession) current() *process {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc != nil && b.proc.running() {
		return b.proc
	}
	return nil
}

type sessionTable struct {
	mu   sync.Mutex
	byID map[string]*bashSession
}

func (t *sessionTable) init() { t.byID = make(map[string]*bashSession) }

func (t *sessionTable) get(id string) *bashSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

func (t *sessionTable) remove(id string) *bashSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.byID[id]
	delete(t.byID, id)
	return b
}

func (t *sessionTable) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, b := range t.byID {
		if b.current() != nil {
			n++
		}
	}
	return n
}

func (t *sessionTable) closeAll() {
	t.mu.Lock()
	ids := make([]string, 0, len(t.byID))
	for id := range t.byID {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	for _, id := range ids {
		t.remove(id).close()
	}
}

// close ends the session and kills its running command.
func (b *bashSession) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.proc != nil {
		_ = b.proc.kill()
	}
}

// createSession serves POST /session {cwd?}.
func (s *server) createSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Cwd string `json:"cwd"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	env := commandEnv(s.log) // the env file as it is now: the session keeps it
	dir, err := expandPath(req.Cwd, env)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			writeError(w, http.StatusInternalServerError, codeRuntimeError, "error creating session directory: "+err.Error())
			return
		}
	}
	b := &bashSession{id: newID(), turn: make(chan struct{}, 1), dir: dir, env: env}
	s.sessions.mu.Lock()
	s.sessions.byID[b.id] = b
	s.sessions.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"session_id": b.id})
}

// deleteSession serves DELETE /session/{id}.
func (s *server) deleteSession(w http.ResponseWriter, r *http.Request) {
	b := s.sessions.remove(r.PathValue("id"))
	if b == nil {
		writeError(w, http.StatusNotFound, codeContextNotFound, "session "+r.PathValue("id")+" not found")
		return
	}
	b.close()
}

// runInSession serves POST /session/{id}/run {command, cwd?, timeout?}
// with the same event stream as POST /command; init carries the session id.
func (s *server) runInSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	b := s.sessions.get(id)
	if b == nil {
		writeError(w, http.StatusNotFound, codeContextNotFound, "session "+id+" not found")
		return
	}
	var req struct {
		Command string `json:"command"`
		Cwd     string `json:"cwd"`
		Timeout int64  `json:"timeout"` // milliseconds
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	if req.Command == "" {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "command is required")
		return
	}
	if req.Timeout < 0 {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "timeout must not be negative")
		return
	}

	select {
	case b.turn <- struct{}{}:
		defer func() { <-b.turn }()
	case <-r.Context().Done():
		return
	}
	b.mu.Lock()
	closed, dir, env := b.closed, b.dir, b.env
	b.mu.Unlock()
	if closed {
		writeError(w, http.StatusNotFound, codeContextNotFound, "session "+id+" not found")
		return
	}
	if req.Cwd != "" {
		d, err := checkDir(req.Cwd, env)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
			return
		}
		dir = d
	} else if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		dir = "" // the session's directory is gone: start where the agent is
	}

	stateR, stateW, err := os.Pipe()
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeRuntimeError, "state pipe: "+err.Error())
		return
	}
	defer stateW.Close()
	var state bytes.Buffer
	statePump := startPump(stateR, func(p []byte) {
		if state.Len()+len(p) <= maxStateSize {
			state.Write(p)
		}
	}, nil, false)

	prologue, bash := shStatePrologue, false
	if sh, err := s.findShell(); err == nil && sh.isBash {
		prologue, bash = bashStatePrologue, true
	}
	spec := execSpec{script: prologue + req.Command, dir: dir, env: env, extra: []*os.File{stateW}}
	es := newHeldEventStream(w, s.delays.hold)
	p := s.runStreaming(r.Context(), es, id, spec, time.Duration(req.Timeout)*time.Millisecond, keepsLineEndings(r), func(p *process) {
		stateW.Close()
		b.mu.Lock()
		b.proc = p
		b.mu.Unlock()
	})
	stateW.Close()
	statePump.exited()
	statePump.wait()
	if p == nil {
		return
	}
	if dir, env, ok := parseState(state.Bytes(), bash); ok {
		b.mu.Lock()
		b.dir = dir
		if env != nil {
			b.env = env
		}
		b.mu.Unlock()
	}
}

// parseState reads what the exit trap wrote: the directory, NUL-terminated,
// then the exported variables, as NUL-terminated records from bash or as
// export -p output from other shells. A shell killed by a signal writes
// nothing; env is nil when no variable could be read.
func parseState(b []byte, bash bool) (dir string, env []string, ok bool) {
	d, rest, ok := strings.Cut(string(b), "\x00")
	if !ok {
		return "", nil, false
	}
	var vars []string
	if bash {
		vars = strings.Split(strings.TrimSuffix(rest, "\x00"), "\x00")
	} else {
		vars = parseExportP(rest)
	}
	for _, kv := range vars {
		k, _, ok := strings.Cut(kv, "=")
		// A new shell sets SHLVL and _ itself; oversized entries would make
		// the next exec fail.
		if !ok || k == "" || k == "SHLVL" || k == "_" || len(kv) > maxEnvEntry {
			continue
		}
		env = append(env, kv)
	}
	return d, env, true
}

// parseExportP reads the export -p output of POSIX shells: lines
// "export NAME='value'", where a value may span lines and a single quote in
// it ends the quoted part, adds a quoted or backslash-escaped quote, and
// starts a new one. Names exported without a value are skipped.
func parseExportP(s string) []string {
	var env []string
	for s != "" {
		line, ok := strings.CutPrefix(s, "export ")
		i := strings.IndexAny(line, "=\n")
		if !ok || i < 0 || line[i] == '\n' {
			_, s, _ = strings.Cut(s, "\n")
			continue
		}
		name, rest := line[:i], line[i+1:]
		var v strings.Builder
		for rest != "" && rest[0] != '\n' {
			switch {
			case rest[0] == '\'':
				j := strings.IndexByte(rest[1:], '\'')
				if j < 0 {
					return env // cut short
				}
				v.WriteString(rest[1 : 1+j])
				rest = rest[2+j:]
			case strings.HasPrefix(rest, `"'"`):
				v.WriteByte('\'')
				rest = rest[3:]
			case strings.HasPrefix(rest, `\'`):
				v.WriteByte('\'')
				rest = rest[2:]
			default:
				v.WriteByte(rest[0])
				rest = rest[1:]
			}
		}
		env = append(env, name+"="+v.String())
		s = strings.TrimPrefix(rest, "\n")
	}
	return env
}
