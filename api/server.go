// Package api serves the OpenSandbox lifecycle API and the proxy route into
// sandboxes over HTTP: routes, authentication, wire models and errors. It
// holds no sandbox state; lifecycle does.
package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/sandboxd/sandboxd/api/console"
	"github.com/sandboxd/sandboxd/api/mcp"
	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/lifecycle"
)

// Header names of the OpenSandbox API.
const (
	headerAPIKey    = "OPEN-SANDBOX-API-KEY"
	headerRequestID = "X-Request-ID"
)

// Health reports whether the container engine answers.
type Health interface {
	Ping(ctx context.Context) error
}

// Server is the HTTP face of sandboxd.
type Server struct {
	cfg         config.Config
	engine      string
	life        LifeBackend
	metrics     *lifecycle.Metrics
	sandboxes   SandboxBackend
	diagnostics DiagnosticsBackend
	snapshots   SnapshotBackend
	forks       ForkBackend
	pools       PoolBackend
	proxy       ProxyBackend
	files       FileBackend
	egress      EgressBackend
	activity    console.ActivitySource
	health      Health
	log         *slog.Logger
	keys        [][]byte
	router      *mux.Router
	build       Build
	// inflight caps proxied requests per sandbox and per credential.
	inflight *inflight
}

// New builds the handler tree over the lifecycle's services.
func New(cfg config.Config, b Backends, health Health, log *slog.Logger) *Server {
	s := &Server{
		cfg: cfg, engine: b.Engine, life: b.Life, metrics: b.Metrics,
		sandboxes: b.Sandboxes, diagnostics: b.Diagnostics, snapshots: b.Snapshots, forks: b.Forks, pools: b.Pools,
		proxy: b.Proxy, files: b.Files, egress: b.Egress, activity: b.Activity,
		health: health, log: log, router: mux.NewRouter(),
		inflight: newInflight(cfg.Server.MaxProxyRequestsPerSandbox, cfg.Server.MaxProxyRequestsPerToken),
	}
	for _, k := range cfg.APIKeysAll() {
		s.keys = append(s.keys, []byte(k))
	}
	s.routes()
	return s
}

func (s *Server) routes() {
	r := s.router
	r.UseEncodedPath()
	r.SkipClean(true)
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusNotFound, "GENERAL::NOT_FOUND", "Not Found: no route "+r.Method+" "+r.URL.Path)
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusMethodNotAllowed, "GENERAL::METHOD_NOT_ALLOWED", "Method Not Allowed: "+r.Method+" "+r.URL.Path)
	})
	r.HandleFunc("/health", s.handleHealth).Methods(http.MethodGet)
	r.HandleFunc("/metrics", s.handleMetrics).Methods(http.MethodGet)
	s.debugRoutes(r)
	s.consoleRoutes(r)
	// MCP tools, a client of this API with the caller's key (docs/mcp.md).
	r.Handle(mcp.Path, limitMCP(mcp.Handler(s, mcp.Options{}, s.log)))
	for _, prefix := range []string{"", "/v1"} {
		// Full paths on the top router: gorilla/mux subrouters lose the
		// 405 for a known path with the wrong method (mux issue #751).
		p := routeAdder(func(path string, h http.HandlerFunc) *mux.Route { return r.HandleFunc(prefix+path, h) })
		p("/sandboxes", s.handleCreate).Methods(http.MethodPost)
		p("/sandboxes", s.handleList).Methods(http.MethodGet)
		p("/sandboxes/{id}", s.handleGet).Methods(http.MethodGet)
		p("/sandboxes/{id}", s.handleDelete).Methods(http.MethodDelete)
		p("/sandboxes/{id}/metadata", s.handlePatchMetadata).Methods(http.MethodPatch)
		p("/sandboxes/{id}/pause", s.handlePause).Methods(http.MethodPost)
		p("/sandboxes/{id}/resume", s.handleResume).Methods(http.MethodPost)
		p("/sandboxes/{id}/renew-expiration", s.handleRenew).Methods(http.MethodPost)
		p("/sandboxes/{id}/endpoints/{port}", s.handleEndpoint).Methods(http.MethodGet)
		p("/sandboxes/{id}/snapshots", s.handleCreateSnapshot).Methods(http.MethodPost)
		p("/snapshots", s.handleListSnapshots).Methods(http.MethodGet)
		p("/snapshots/{id}", s.handleGetSnapshot).Methods(http.MethodGet)
		p("/snapshots/{id}", s.handleDeleteSnapshot).Methods(http.MethodDelete)
		p("/sandboxes/{id}/diagnostics/logs", s.handleLogs).Methods(http.MethodGet)
		p("/sandboxes/{id}/diagnostics/events", s.handleEvents).Methods(http.MethodGet)
		p("/sandboxes/{id}/diagnostics/{what}", s.handleDiagnosticsNotImplemented).Methods(http.MethodGet)
		s.forkRoutes(p)
		s.poolRoutes(p)
		s.templateRoutes(p)
		s.networkPolicyRoutes(p)
	}
	// Only under /v1, as upstream (its /metrics/events is a 404).
	r.HandleFunc("/v1/metrics/events", s.handleMetricsEvent).Methods(http.MethodPost)
}

// routeAdder registers a route under one of the API's prefixes.
type routeAdder func(path string, h http.HandlerFunc) *mux.Route

// ServeHTTP runs the middleware chain: request id, panic guard, access
// log, browser checks (Host, Origin), CORS, authentication, then the proxy
// into a sandbox or the routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.Header.Get(headerRequestID))
	if id == "" || len(id) > 128 {
		id = newRequestID()
	}
	w.Header().Set(headerRequestID, id)
	// lifecycle names the request in what it logs while serving it.
	r = r.WithContext(lifecycle.WithRequestID(r.Context(), id))
	rec := &statusRecorder{ResponseWriter: w}
	start := time.Now()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic in handler", "request_id", id, "method", r.Method, "path", logPath(r.URL.Path), "panic", v)
			if rec.status == 0 {
				writeError(rec, r, http.StatusInternalServerError, lifecycle.CodeGeneral, "internal error; see the server log for request "+id)
			}
		}
		s.accessLog(r, rec, id, start)
	}()
	if !s.browserCheck(rec, r) || s.cors(rec, r) || !s.authorize(rec, r) || !s.serving(rec, r) {
		return
	}
	if id, port, ok := proxyRoute(r.URL.EscapedPath()); ok {
		if n, err := strconv.Atoi(port); err == nil && n == lifecycle.EgressPort {
			// The egress API is sandboxd's own, never the sandbox's.
			s.handleEgress(rec, r, id, proxyRest(r.URL.EscapedPath(), port))
			return
		}
		s.handleProxy(rec, r, id, port)
		return
	}
	s.router.ServeHTTP(rec, r)
}

// serving answers 503 while the lifecycle does not serve (starting or
// stopping) and reports whether it does. /health says why, /metrics and
// the console's files serve throughout.
func (s *Server) serving(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path == "/health" || r.URL.Path == "/metrics" || console.Public(r.URL) {
		return true
	}
	err := s.life.Ready()
	if e, ok := lifecycle.AsError(err); ok {
		w.Header().Set("Retry-After", "1")
		s.refuse(w, r, kindStatus[e.Kind], e.Code, e.Message)
		return false
	}
	return true
}

// accessLog writes the request's line: what was asked (never the query,
// headers or bodies, where credentials and file contents travel) and how
// it ended. /health, polled by load balancers, logs at DEBUG only.
func (s *Server) accessLog(r *http.Request, rec *statusRecorder, id string, start time.Time) {
	if !s.cfg.Log.Access {
		return
	}
	level := slog.LevelInfo
	if r.URL.Path == "/health" {
		level = slog.LevelDebug
	}
	attrs := []any{"request_id", id, "method", r.Method, "path", logPath(r.URL.Path), "status", rec.code(), "bytes", rec.bytes, "duration_ms", time.Since(start).Milliseconds()}
	if sb := sandboxIDOf(r.URL.Path); sb != "" {
		attrs = append(attrs, "sandbox_id", sb)
	}
	s.log.Log(r.Context(), level, "request", attrs...)
}

// logPath is path as the access log shows it. Lifecycle paths hold only
// ids, and so do the execd API's; a path forwarded to another port of a
// sandbox is the sandbox's own business (it may carry tokens of the app
// inside) and is cut after the port.
func logPath(path string) string {
	if !isProxyPath(path) {
		return path
	}
	rest := path[strings.Index(path, "/proxy/")+len("/proxy/"):]
	port, _, _ := strings.Cut(rest, "/")
	if port == strconv.Itoa(lifecycle.ExecdPort) {
		return path
	}
	return path[:len(path)-len(rest)] + port + "/…"
}

// cors adds CORS headers for configured origins only; it answers
// preflights itself and reports whether it did.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || !slices.Contains(s.cfg.Server.CORSOrigins, origin) {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Allow-Credentials", "true")
	h.Set("Access-Control-Expose-Headers", headerRequestID)
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
		if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
			h.Set("Access-Control-Allow-Headers", req)
		}
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// isProxyPath reports whether path is a sandbox proxy route, which has its
// own per-sandbox authorisation.
func isProxyPath(path string) bool {
	p := strings.TrimPrefix(path, "/v1")
	if !strings.HasPrefix(p, "/sandboxes/") {
		return false
	}
	parts := strings.SplitN(strings.TrimPrefix(p, "/sandboxes/"), "/", 4)
	return len(parts) >= 3 && parts[1] == "proxy" && parts[2] != ""
}

// sandboxIDOf returns the sandbox id in a /sandboxes/{id}... path.
func sandboxIDOf(path string) string {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(path, "/v1"), "/sandboxes/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// validKey compares k with every configured key in constant time.
func (s *Server) validKey(k string) bool { return s.keyIndex(k) >= 0 }

// keyIndex returns the index of the configured key equal to k, or -1; it
// compares k with every key in constant time. An empty k matches none.
func (s *Server) keyIndex(k string) int {
	found := -1
	for i, key := range s.keys {
		if subtle.ConstantTimeCompare([]byte(k), key) == 1 {
			found = i
		}
	}
	return found
}

// authorize enforces the API key on everything but /health, the console's
// static files and the proxy route (checked by the proxy handler against
// the sandbox's token).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	if len(s.keys) == 0 || r.URL.Path == "/health" || isProxyPath(r.URL.EscapedPath()) || console.Public(r.URL) {
		return true
	}
	key := r.Header.Get(headerAPIKey)
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && key == "" && (r.URL.Path == "/metrics" || r.URL.Path == mcp.Path) {
		key = bearer // what Prometheus scrapers and MCP clients can send
	}
	if r.URL.Path == mcp.Path && (key == "" || !s.validKey(key)) {
		w.Header().Set("WWW-Authenticate", "Bearer") // MCP's HTTP auth; no OAuth metadata
	}
	if key == "" {
		writeError(w, r, http.StatusUnauthorized, "MISSING_API_KEY", "Authentication credentials are missing. Provide API key via OPEN-SANDBOX-API-KEY header.")
		return false
	}
	if !s.validKey(key) {
		writeError(w, r, http.StatusUnauthorized, "INVALID_API_KEY", "Authentication credentials are invalid. Check your API key and try again.")
		return false
	}
	return true
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if phase, reason := s.life.Phase(); phase != lifecycle.PhaseServing {
		writeJSON(w, http.StatusServiceUnavailable, s.build.add(map[string]string{"status": phase, "reason": reason}))
		return
	}
	if err := s.health.Ping(r.Context()); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, s.build.add(map[string]string{"status": "unhealthy", "docker": "unreachable", "message": err.Error()}))
		return
	}
	writeJSON(w, http.StatusOK, s.build.add(map[string]string{"status": "healthy"}))
}

// handleMetrics serves sandboxd's own metrics in Prometheus text format.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	byState := map[string]int{}
	items, _, err := s.sandboxes.List(r.Context(), lifecycle.ListFilter{Page: 1, PageSize: math.MaxInt32})
	if err != nil {
		// The counters and process gauges matter most when Docker is
		// down; only the states are unknown then.
		s.log.WarnContext(r.Context(), "metrics without sandboxes by state", "err", err)
	}
	for _, sb := range items {
		byState[sb.Status.State]++
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.metrics.WritePrometheus(w, byState)
	lifecycle.WriteEgressPrometheus(w, s.egress.EgressStats(r.Context()))
	writeProcessMetrics(w)
}

func (s *Server) handleDiagnosticsNotImplemented(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, http.StatusNotImplemented, lifecycle.CodeDiagnosticsNotImpl, "Only diagnostics/logs and diagnostics/events are implemented by sandboxd.")
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// statusRecorder remembers the status and size for the access log and keeps the
// optional interfaces (Flusher, Hijacker) the proxy needs.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64 // body bytes written
}

func (s *statusRecorder) WriteHeader(code int) {
	// A 1xx (a proxied 100 Continue) is not the response's status.
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

func (s *statusRecorder) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// ReadFrom keeps the connection's own ReadFrom (sendfile, splice) within
// reach of io.Copy: downloads use it.
func (s *statusRecorder) ReadFrom(src io.Reader) (int64, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := io.Copy(s.ResponseWriter, src)
	s.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush forwards to the underlying writer (streaming responses).
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// maxMCPRequests bounds the /mcp requests in progress at once. Unlike a
// proxied request (m in SECURITY.md), one tool call holds what the
// sandbox answers until it has shaped its result: an event line of up to
// 32 MiB, 8 MiB of results or of a download with its base64 copy; and
// the API requests it is made of are counted per key only.
const maxMCPRequests = 16

// limitMCP answers 429 to an /mcp request beyond maxMCPRequests.
func limitMCP(h http.Handler) http.Handler {
	slots := make(chan struct{}, maxMCPRequests)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			writeError(w, r, http.StatusTooManyRequests, codeTooManyRequests, fmt.Sprintf("too many /mcp requests in progress (at most %d at once); retry", maxMCPRequests))
		}
	})
}
