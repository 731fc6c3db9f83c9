//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// codeContextBusy is the error code of a run on a context that is running
// another one (upstream writes "session is busy" into an open stream).
const codeContextBusy = "CONTEXT_BUSY"

// codeContext is a code interpreter context: a kernel with its state.
type codeContext struct {
	id       string
	language string
	cwd      string
	kernel   kernel
	busy     atomic.Bool

	mu   sync.Mutex
	stop chan struct{} // closed to interrupt the current run; nil between runs
}

// beginRun marks the context busy and makes the channel that interrupts
// the run about to start; it reports false if another run is in progress.
func (c *codeContext) beginRun() (<-chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.busy.CompareAndSwap(false, true) {
		return nil, false
	}
	c.stop = make(chan struct{})
	return c.stop, true
}

func (c *codeContext) endRun() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop = nil
	c.busy.Store(false)
}

// interruptRun interrupts the current run, at whatever point it is (its
// kernel may not have taken the code up yet), and reports whether there
// was one.
func (c *codeContext) interruptRun() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop == nil {
		return false
	}
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	return true
}

type codeContextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd,omitempty"`
}

func (c *codeContext) json() codeContextJSON {
	return codeContextJSON{ID: c.id, Language: c.language, Cwd: c.cwd}
}

// codeTable holds the code contexts, and per language the default context
// that runs without a context id use.
type codeTable struct {
	mu       sync.Mutex
	byID     map[string]*codeContext
	defaults map[string]string // language -> context id
	create   sync.Mutex        // one default context created at a time
	// noJupyter records that the announced Jupyter server was found absent.
	noJupyter atomic.Bool
}

func (t *codeTable) init() {
	t.byID = make(map[string]*codeContext)
	t.defaults = make(map[string]string)
}

func (t *codeTable) get(id string) *codeContext {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

func (t *codeTable) add(c *codeContext) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID[c.id] = c
}

// list returns the contexts of language, or all of them if it is empty.
func (t *codeTable) list(language string) []*codeContext {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []*codeContext{}
	for _, id := range slices.Sorted(maps.Keys(t.byID)) {
		if c := t.byID[id]; language == "" || c.language == language {
			out = append(out, c)
		}
	}
	return out
}

// remove forgets c and shuts its kernel down.
func (t *codeTable) remove(c *codeContext) error {
	t.mu.Lock()
	delete(t.byID, c.id)
	if t.defaults[c.language] == c.id {
		delete(t.defaults, c.language)
	}
	t.mu.Unlock()
	return c.kernel.shutdown()
}

// running counts the contexts running code, which keeps the sandbox from
// being reaped as idle.
func (t *codeTable) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.byID {
		if c.busy.Load() {
			n++
		}
	}
	return n
}

func (t *codeTable) closeAll() {
	for _, c := range t.list("") {
		_ = t.remove(c)
	}
}

// codeFailure is an error with the status and execd code to answer it with.
type codeFailure struct {
	status int
	code   string
	msg    string
}

func (e *codeFailure) Error() string { return e.msg }

func writeCodeError(w http.ResponseWriter, err error) {
	var f *codeFailure
	if errors.As(err, &f) {
		writeError(w, f.status, f.code, f.msg)
		return
	}
	writeError(w, http.StatusInternalServerError, codeRuntimeError, err.Error())
}

// startKernel starts a kernel for language: in the sandbox's Jupyter server
// if it announces one, else a Python driver if the sandbox has python3.
func (s *server) startKernel(ctx context.Context, language, cwd string) (kernel, error) {
	j, err := s.findJupyter()
	if err != nil {
		return nil, &codeFailure{http.StatusInternalServerError, codeRuntimeError, err.Error()}
	}
	if j != nil {
		// Once found absent, Jupyter gets no grace again: every context
		// would wait for it.
		grace := s.delays.jupyterAbsent
		if s.code.noJupyter.Load() {
			grace = 0
		}
		specs, err := j.kernelspecs(ctx, grace, s.delays.jupyterPoll)
		s.code.noJupyter.Store(errors.Is(err, errNoJupyter))
		switch {
		case err == nil:
			spec, ok := specs[language]
			if !ok {
				return nil, unknownLanguage(language, slices.Sorted(maps.Keys(specs)))
			}
			k, err := j.start(ctx, spec, cwd)
			if err != nil {
				return nil, &codeFailure{http.StatusInternalServerError, codeRuntimeError, "error creating code context. " + err.Error()}
			}
			return k, nil
		case errors.Is(err, errNoJupyter):
			s.log.Info("JUPYTER_HOST is set but no Jupyter server runs; using the Python driver")
		default:
			return nil, &codeFailure{http.StatusServiceUnavailable, codeRuntimeError, "error creating code context. " + err.Error()}
		}
	}
	python, err := findPython()
	if err != nil {
		return nil, unknownLanguage(language, nil)
	}
	if language != "python" {
		return nil, unknownLanguage(language, []string{"python"})
	}
	k, err := startPython(python, cwd)
	if err != nil {
		return nil, &codeFailure{http.StatusInternalServerError, codeRuntimeError, "error creating code context. " + err.Error()}
	}
	return k, nil
}

func unknownLanguage(language string, have []string) error {
	msg := "unknown language: " + language
	if len(have) == 0 {
		msg += " (this sandbox runs no Jupyter server and has no python3)"
	} else {
		msg += " (this sandbox has: " + strings.Join(have, ", ") + ")"
	}
	return &codeFailure{http.StatusBadRequest, codeInvalidRequest, msg}
}

// newCodeContext starts a context. A non-empty cwd is created, as execd does.
func (s *server) newCodeContext(ctx context.Context, language, cwd string) (*codeContext, error) {
	dir := cwd
	if cwd != "" {
		var err error
		if dir, err = expandPath(cwd, os.Environ()); err != nil {
			return nil, &codeFailure{http.StatusBadRequest, codeInvalidRequest, err.Error()}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, &codeFailure{http.StatusBadRequest, codeInvalidRequest, "cannot create cwd: " + err.Error()}
		}
	}
	k, err := s.startKernel(ctx, language, dir)
	if err != nil {
		return nil, err
	}
	id := newID()
	if jk, ok := k.(*jupyterKernel); ok {
		id = jk.sessionID
	}
	c := &codeContext{id: id, language: language, cwd: cwd, kernel: k}
	s.code.add(c)
	return c, nil
}

// defaultContext returns the default context of language, creating it on
// first use.
func (s *server) defaultContext(ctx context.Context, language string) (*codeContext, error) {
	s.code.create.Lock()
	defer s.code.create.Unlock()
	s.code.mu.Lock()
	c := s.code.byID[s.code.defaults[language]]
	s.code.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := s.newCodeContext(ctx, language, "")
	if err != nil {
		return nil, err
	}
	s.code.mu.Lock()
	s.code.defaults[language] = c.id
	s.code.mu.Unlock()
	return c, nil
}

// createCodeContext serves POST /code/context.
func (s *server) createCodeContext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "error parsing request, MAYBE invalid body format. "+err.Error())
		return
	}
	if req.Language == "" {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "language is required")
		return
	}
	c, err := s.newCodeContext(r.Context(), req.Language, req.Cwd)
	if err != nil {
		writeCodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c.json())
}

// listCodeContexts serves GET /code/contexts[?language=].
func (s *server) listCodeContexts(w http.ResponseWriter, r *http.Request) {
	out := []codeContextJSON{}
	for _, c := range s.code.list(r.URL.Query().Get("language")) {
		out = append(out, codeContextJSON{ID: c.id, Language: c.language})
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteCodeContexts serves DELETE /code/contexts?language=.
func (s *server) deleteCodeContexts(w http.ResponseWriter, r *http.Request) {
	language := r.URL.Query().Get("language")
	if language == "" {
		writeError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'language'")
		return
	}
	for _, c := range s.code.list(language) {
		if err := s.code.remove(c); err != nil {
			writeError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error deleting code context %s. %v", language, err))
			return
		}
	}
}

// codeContextByID serves GET and DELETE /code/contexts/{id}.
func (s *server) codeContextByID(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c := s.code.get(id)
	if c == nil {
		writeError(w, http.StatusNotFound, codeContextNotFound, "context "+id+" not found")
		return
	}
	if r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, codeContextJSON{ID: c.id, Language: c.language})
		return
	}
	if err := s.code.remove(c); err != nil {
		writeError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error deleting code context %s. %v", id, err))
	}
}

// runCode serves POST /code.
func (s *server) runCode(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Context *struct {
			ID       string `json:"id"`
			Language string `json:"language"`
		} `json:"context"`
		Code string `json:"code"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "error parsing request, MAYBE invalid body format. "+err.Error())
		return
	}
	if req.Code == "" {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "invalid request, validation error: code is required")
		return
	}
	var id, language string
	if req.Context != nil {
		id, language = req.Context.ID, req.Context.Language
	}
	if language == "" {
		// execd runs code without a language as a command, whatever the id.
		s.startCommand(w, r, runCommandRequest{Command: req.Code})
		return
	}
	var c *codeContext
	if id != "" {
		if c = s.code.get(id); c == nil {
			writeError(w, http.StatusNotFound, codeContextNotFound, "context "+id+" not found")
			return
		}
	} else {
		var err error
		if c, err = s.defaultContext(r.Context(), language); err != nil {
			writeCodeError(w, err)
			return
		}
	}
	// The run can be interrupted from before its init goes out.
	stop, ok := c.beginRun()
	if !ok {
		writeError(w, http.StatusConflict, codeContextBusy, "error running codes session is busy: context "+c.id+" is running other code; wait for it or interrupt it (DELETE /code?id="+c.id+")")
		return
	}
	defer c.endRun()

	es := newEventStream(w)
	es.text(evInit, c.id)
	stopPing := es.pingEvery(s.delays.ping)
	// Unlike upstream, a client that goes away interrupts its run: nobody
	// reads the result, and the context would stay busy.
	stopInterrupt := context.AfterFunc(r.Context(), func() { c.interruptRun() })
	run := newCodeRun(es)
	err := c.kernel.execute(req.Code, run.handle, stop)
	stopInterrupt()
	stopPing()
	run.finish(err)
}

// interruptCode serves DELETE /code?id=: it interrupts a context, or, like
// execd, the command or session with that id.
func (s *server) interruptCode(w http.ResponseWriter, r *http.Request) {
	c := s.code.get(r.URL.Query().Get("id"))
	if c == nil {
		s.interruptCommand(w, r)
		return
	}
	if c.interruptRun() {
		return
	}
	// Nothing runs: the kernel is interrupted all the same, as upstream
	// does (an idle kernel ignores it), for its errors to show.
	if err := c.kernel.interrupt(); err != nil {
		writeError(w, http.StatusInternalServerError, codeRuntimeError, "error interruptting code context. "+err.Error())
	}
}
