package api

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/gorilla/mux"

	"github.com/sandboxd/sandboxd/lifecycle"
)

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req lifecycle.CreateRequest
	if !s.decodeJSON(w, r, &req, false) || !validCreate(w, r, req) {
		return
	}
	sb, err := s.sandboxes.Create(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, sb)
}

// maxTimeout is the longest timeout whose expiry can be computed: a
// duration past it overflows, and the sandbox would expire at once.
const maxTimeout = math.MaxInt64 / int64(time.Second)

// validCreate refuses, with a 400, a create request the engine would
// fail on or misread: a timeout too large to represent, an image reference
// that is not one.
func validCreate(w http.ResponseWriter, r *http.Request, req lifecycle.CreateRequest) bool {
	if req.Timeout != nil && int64(*req.Timeout) > maxTimeout {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidParameter, fmt.Sprintf("timeout must be at most %d seconds (or null for manual cleanup)", maxTimeout))
		return false
	}
	if req.Image != nil {
		if uri := strings.TrimSpace(req.Image.URI); uri != "" {
			if _, err := reference.ParseAnyReference(uri); err != nil {
				writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidParameter, fmt.Sprintf("image.uri %q is not an image reference: %v", uri, err))
				return false
			}
		}
	}
	return true
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxes.Get(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

// pageParams reads page (>= 1, default 1) and pageSize (1..200, default 20).
func pageParams(w http.ResponseWriter, q map[string][]string) (int, int, bool) {
	get := func(name string, def, max int) (int, bool) {
		v := q[name]
		if len(v) == 0 || v[0] == "" {
			return def, true
		}
		n, err := strconv.Atoi(v[0])
		if err != nil {
			unprocessable(w, "int_parsing", []string{"query", name}, "Input should be a valid integer, unable to parse string as an integer")
			return 0, false
		}
		if n < 1 || (max > 0 && n > max) {
			msg := "Input should be greater than or equal to 1"
			if n > max {
				msg = "Input should be less than or equal to " + strconv.Itoa(max)
			}
			unprocessable(w, "value_error", []string{"query", name}, msg)
			return 0, false
		}
		return n, true
	}
	page, ok := get("page", 1, 0)
	if !ok {
		return 0, 0, false
	}
	size, ok := get("pageSize", 20, 200)
	return page, size, ok
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, size, ok := pageParams(w, q)
	if !ok {
		return
	}
	md, err := lifecycle.ParseMetadataFilter(q.Get("metadata"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	items, p, err := s.sandboxes.List(r.Context(), lifecycle.ListFilter{States: q["state"], Metadata: md, Page: page, PageSize: size})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if items == nil {
		items = []*lifecycle.Sandbox{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "pagination": p})
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	if err := s.sandboxes.Delete(r.Context(), mux.Vars(r)["id"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handlePatchMetadata(w http.ResponseWriter, r *http.Request) {
	var patch map[string]*string
	if !s.decodeJSON(w, r, &patch, false) {
		return
	}
	sb, err := s.sandboxes.PatchMetadata(r.Context(), mux.Vars(r)["id"], patch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) {
	if err := s.sandboxes.Pause(r.Context(), mux.Vars(r)["id"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	if err := s.sandboxes.Resume(r.Context(), mux.Vars(r)["id"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// parseTime accepts RFC 3339 and the ISO 8601 forms Python sends; a
// timestamp without a zone is UTC.
func parseTime(v string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ExpiresAt *string `json:"expiresAt"`
	}
	if !s.decodeJSON(w, r, &req, false) {
		return
	}
	if req.ExpiresAt == nil {
		unprocessable(w, "missing", []string{"body", "expiresAt"}, "Field required")
		return
	}
	at, ok := parseTime(*req.ExpiresAt)
	if !ok {
		unprocessable(w, "datetime_from_date_parsing", []string{"body", "expiresAt"}, "Input should be a valid datetime")
		return
	}
	exp, err := s.sandboxes.Renew(r.Context(), mux.Vars(r)["id"], at)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]time.Time{"expiresAt": exp})
}

func (s *Server) handleEndpoint(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	port, err := strconv.Atoi(vars["port"])
	if err != nil {
		unprocessable(w, "int_parsing", []string{"path", "port"}, "Input should be a valid integer, unable to parse string as an integer")
		return
	}
	q := r.URL.Query()
	if q.Get("expires") != "" {
		if strings.EqualFold(q.Get("use_server_proxy"), "true") {
			writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidParameter, "use_server_proxy and expires cannot be combined")
			return
		}
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeAPINotSupported, "signed endpoints (expires) are not supported by the "+s.engine+" runtime")
		return
	}
	ep, err := s.sandboxes.Endpoint(r.Context(), vars["id"], port, r.Host)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

func (s *Server) handleCreateSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name *string `json:"name"`
	}
	if !s.decodeJSON(w, r, &req, true) {
		return
	}
	name := ""
	if req.Name != nil {
		if *req.Name == "" {
			unprocessable(w, "string_too_short", []string{"body", "name"}, "String should have at least 1 character")
			return
		}
		name = *req.Name
	}
	snap, err := s.snapshots.CreateSnapshot(r.Context(), mux.Vars(r)["id"], name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/snapshots/"+snap.ID)
	writeJSON(w, http.StatusAccepted, snap)
}

func (s *Server) handleListSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, size, ok := pageParams(w, q)
	if !ok {
		return
	}
	items, p, err := s.snapshots.ListSnapshots(lifecycle.SnapshotFilter{SandboxID: q.Get("sandboxId"), States: q["state"], Page: page, PageSize: size})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if items == nil {
		items = []*lifecycle.Snapshot{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "pagination": p})
}

func (s *Server) handleGetSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.snapshots.GetSnapshot(mux.Vars(r)["id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func (s *Server) handleDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.snapshots.DeleteSnapshot(r.Context(), mux.Vars(r)["id"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// parseSince reads "10m", "1h", "30s" or an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, bool) {
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), true
	}
	return parseTime(v)
}

func (s *Server) handleLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tail, ok := intQuery(w, q, "tail", 100, 10000)
	if !ok {
		return
	}
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, ok := parseSince(v, time.Now())
		if !ok {
			unprocessable(w, "value_error", []string{"query", "since"}, "since must be a duration such as 10m or 1h, or an RFC 3339 time")
			return
		}
		since = t
	}
	if q.Has("scope") {
		s.scopedLogs(w, r, tail, since)
		return
	}
	rc, err := s.diagnostics.Logs(r.Context(), mux.Vars(r)["id"], tail, since)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Deprecation", "true")
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
}
