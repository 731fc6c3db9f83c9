//go:build linux

package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"
)

// Options configures Handler. The zero value works.
type Options struct {
	// TempDir holds the output of background commands. Empty means
	// os.TempDir(); if it is not writable, output is kept in memory.
	TempDir string
	// Logger receives diagnostics. Nil discards them.
	Logger *slog.Logger
}

// maxJSONBody bounds JSON request bodies. Commands carry whole files in
// heredocs, so this is generous.
const maxJSONBody = 64 << 20

// server holds the agent's state: what runs in the sandbox right now.
type server struct {
	opts     Options
	log      *slog.Logger
	commands commandTable
	sessions sessionTable
	ptys     ptyTable
	code     codeTable
	metrics  metricsSampler
	// findShell locates the shell for commands; tests replace it.
	findShell func() (shell, error)
	// findJupyter finds the Jupyter server the sandbox announces; tests
	// replace it rather than the process environment, to run in parallel.
	findJupyter func() (*jupyterServer, error)
	// delays are the production waits, which tests shorten.
	delays delays

	proxyTransport *http.Transport
}

// Handler returns the execd API. Each call has its own state.
func Handler(opts Options) http.Handler {
	return newServer(opts).routes()
}

func newServer(opts Options) *server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.TempDir == "" {
		opts.TempDir = os.TempDir()
	}
	s := &server{opts: opts, log: opts.Logger, proxyTransport: newProxyTransport(),
		delays: delays{interruptGrace: interruptGrace, ping: pingInterval, jupyterAbsent: jupyterAbsentGrace, jupyterPoll: jupyterPoll,
			metricsWatch: metricsWatchInterval, hold: eventHold}}
	s.findShell = new(shellFinder).find
	s.findJupyter = jupyterFromEnv
	s.commands.init()
	s.sessions.init()
	s.ptys.init()
	s.code.init()
	s.metrics.init("/")
	return s
}

// delays holds the waits the server makes.
type delays struct {
	interruptGrace, ping, jupyterAbsent, jupyterPoll, metricsWatch, hold time.Duration
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /_sandboxd/activity", s.activity)
	mux.HandleFunc("GET /_sandboxd/started", s.entrypointStarted)

	mux.HandleFunc("POST /command", s.runCommand)
	mux.HandleFunc("DELETE /command", s.interruptCommand)
	// /command/status/{id} and /command/{id}/logs overlap as ServeMux
	// patterns, so one route tells them apart.
	mux.HandleFunc("GET /command/{a}/{b}", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.PathValue("a") == "status":
			s.commandStatus(w, r, r.PathValue("b"))
		case r.PathValue("b") == "logs":
			s.commandLogs(w, r, r.PathValue("a"))
		default:
			http.NotFound(w, r)
		}
	})

	mux.HandleFunc("POST /session", s.createSession)
	mux.HandleFunc("POST /session/{id}/run", s.runInSession)
	mux.HandleFunc("DELETE /session/{id}", s.deleteSession)

	mux.HandleFunc("POST /code/context", s.createCodeContext)
	mux.HandleFunc("GET /code/contexts", s.listCodeContexts)
	mux.HandleFunc("DELETE /code/contexts", s.deleteCodeContexts)
	mux.HandleFunc("GET /code/contexts/{id}", s.codeContextByID)
	mux.HandleFunc("DELETE /code/contexts/{id}", s.codeContextByID)
	mux.HandleFunc("POST /code", s.runCode)
	mux.HandleFunc("DELETE /code", s.interruptCode)

	mux.HandleFunc("GET /files/info", s.filesInfo)
	mux.HandleFunc("DELETE /files", s.removeFiles)
	mux.HandleFunc("POST /files/mv", s.moveFiles)
	mux.HandleFunc("POST /files/permissions", s.setPermissions)
	mux.HandleFunc("GET /files/search", s.searchFiles)
	mux.HandleFunc("POST /files/replace", s.replaceInFiles)
	mux.HandleFunc("POST /files/upload", s.upload)
	mux.HandleFunc("POST "+UploadRoute, s.uploadByFd)
	mux.HandleFunc("GET /files/download", s.download)
	mux.HandleFunc("POST /directories", s.makeDirs)
	mux.HandleFunc("DELETE /directories", s.removeDirs)
	mux.HandleFunc("GET /directories/list", s.listDir)

	mux.HandleFunc("GET /metrics", s.getMetrics)
	mux.HandleFunc("GET /metrics/watch", s.watchMetrics)

	mux.HandleFunc("POST /pty", s.createPTY)
	mux.HandleFunc("GET /pty/{id}", s.ptyStatus)
	mux.HandleFunc("DELETE /pty/{id}", s.deletePTY)
	mux.HandleFunc("GET /pty/{id}/ws", s.ptyWebSocket)

	mux.HandleFunc("GET /v1/isolated/capabilities", s.isolatedCapabilities)
	mux.HandleFunc("/v1/isolated/", s.isolatedUnavailable)

	mux.HandleFunc("/proxy/{port}", s.proxy)
	mux.HandleFunc("/proxy/{port}/{path...}", s.proxy)
	return mux
}

// activity reports how much work is running, so that sandboxd does not
// consider a busy sandbox idle.
func (s *server) activity(w http.ResponseWriter, _ *http.Request) {
	n := s.commands.running() + s.sessions.running() + s.ptys.running() + s.code.running()
	writeJSON(w, http.StatusOK, map[string]int{"running": n})
}

// close kills everything the server started. Tests use it; the agent
// itself leaves background commands running when its connection ends.
func (s *server) close() {
	s.commands.killAll()
	s.sessions.closeAll()
	s.ptys.closeAll()
	s.code.closeAll()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeRuntimeError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError sends the execd error envelope.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
}

// decodeJSON reads a bounded JSON body into v. An empty body is an error
// unless emptyOK.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody)).Decode(v)
	if errors.Is(err, io.EOF) && emptyOK {
		return nil
	}
	if err != nil {
		return fmt.Errorf("error parsing request body: %w", err)
	}
	return nil
}

// newID returns a random identifier for commands and sessions.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return hex.EncodeToString(b[:])
}

// Run serves the execd API over yamux on stdin and stdout until stdin
// reaches EOF or ctx is done, with state of its own that ends with it
// (background commands keep running, unobserved). Main falls back to it
// when the agent daemon cannot be reached.
func Run(ctx context.Context, stdin io.Reader, stdout io.Writer, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger.Info("agent serving on stdio", "pid", os.Getpid())
	if err := ServeStdio(ctx, Handler(Options{Logger: logger}), stdin, stdout, logger); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// stdioConn joins stdin and stdout into the connection yamux needs.
type stdioConn struct {
	io.Reader
	io.Writer
}

func (c stdioConn) Close() error {
	var errs []error
	if cl, ok := c.Reader.(io.Closer); ok {
		errs = append(errs, cl.Close())
	}
	if cl, ok := c.Writer.(io.Closer); ok {
		errs = append(errs, cl.Close())
	}
	return errors.Join(errs...)
}
