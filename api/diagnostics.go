package api

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
)

// codeScopeUnsupported is upstream's answer to a diagnostics scope the
// runtime cannot serve.
const codeScopeUnsupported = "DIAGNOSTICS_SCOPE_UNSUPPORTED"

// maxDiagnosticBytes bounds the inline content of a descriptor; the end of
// a longer text is kept and the descriptor says it was truncated.
const maxDiagnosticBytes = 1 << 20

// Scopes as upstream's Docker runtime serves them; "all" has only what the
// narrower scope has, and the descriptor says so in warnings.
var (
	logScopes   = []string{"container", "all"}
	eventScopes = []string{"runtime", "all"}
)

// diagnostic is upstream's DiagnosticContentResponse, always delivered
// inline.
type diagnostic struct {
	SandboxID     string   `json:"sandboxId"`
	Kind          string   `json:"kind"`
	Scope         string   `json:"scope"`
	Delivery      string   `json:"delivery"`
	ContentType   string   `json:"contentType"`
	Content       string   `json:"content"`
	ContentLength int      `json:"contentLength"`
	Truncated     bool     `json:"truncated"`
	Warnings      []string `json:"warnings,omitempty"`
}

// diagnosticScope normalises scope as upstream does (trimmed, lower case)
// and answers 400 for one the kind does not have.
func diagnosticScope(w http.ResponseWriter, r *http.Request, kind, scope string, supported []string) (string, bool) {
	s := strings.ToLower(strings.TrimSpace(scope))
	for _, ok := range supported {
		if s == ok {
			return s, true
		}
	}
	writeError(w, r, http.StatusBadRequest, codeScopeUnsupported,
		fmt.Sprintf("Unsupported %s diagnostics scope '%s'. Supported scopes: %s.", kind, scope, strings.Join(supported, ", ")))
	return "", false
}

func writeDiagnostic(w http.ResponseWriter, r *http.Request, kind, scope, content string, truncated bool) {
	d := diagnostic{
		SandboxID: mux.Vars(r)["id"], Kind: kind, Scope: scope, Delivery: "inline",
		ContentType: "text/plain; charset=utf-8", Content: content, ContentLength: len(content), Truncated: truncated,
	}
	if scope == "all" {
		what := map[string]string{"logs": "the sandbox container's output", "events": "the container runtime's events"}[kind]
		d.Warnings = []string{"sandboxd contributes only " + what + " to the all scope."}
	}
	writeJSON(w, http.StatusOK, d)
}

// scopedLogs serves GET …/diagnostics/logs?scope=: the last tail lines of
// the container's output (since, if given) in a descriptor; truncated says
// whether there were more.
func (s *Server) scopedLogs(w http.ResponseWriter, r *http.Request, tail int, since time.Time) {
	scope, ok := diagnosticScope(w, r, "logs", r.URL.Query().Get("scope"), logScopes)
	if !ok {
		return
	}
	text, truncated, err := s.diagnostics.LogTail(r.Context(), mux.Vars(r)["id"], tail, since, maxDiagnosticBytes)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeDiagnostic(w, r, "logs", scope, text, truncated)
}

// handleEvents serves GET …/diagnostics/events: a descriptor with scope,
// upstream's deprecated plain text (at most limit lines) without.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := intQuery(w, q, "limit", 50, 500)
	if !ok {
		return
	}
	scope := ""
	if q.Has("scope") {
		if scope, ok = diagnosticScope(w, r, "events", q.Get("scope"), eventScopes); !ok {
			return
		}
	}
	lines, err := s.diagnostics.Events(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	truncated := len(lines) > limit
	if truncated {
		lines = lines[:limit]
	}
	text := strings.Join(lines, "\n")
	if scope != "" {
		writeDiagnostic(w, r, "events", scope, text, truncated)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Deprecation", "true")
	_, _ = io.WriteString(w, text)
}

// intQuery reads an optional integer query parameter between 1 and max,
// answering FastAPI's 422 (as upstream) for anything else.
func intQuery(w http.ResponseWriter, q url.Values, name string, def, max int) (int, bool) {
	v := q.Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		unprocessable(w, "value_error", []string{"query", name}, fmt.Sprintf("%s must be an integer between 1 and %d", name, max))
		return 0, false
	}
	return n, true
}
