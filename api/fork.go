package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// Headers of a fork request: upstream's idempotency key, and sandboxd's
// number of sandboxes to make (the body forbids unknown keys).
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerForkCount      = "Sandboxd-Fork-Count"
)

// ForkBackend serves the fork routes (OSEP-0024, and sandboxd's list).
type ForkBackend interface {
	Fork(ctx context.Context, sourceID string, req lifecycle.ForkRequest) (*lifecycle.ForkOperation, error)
	GetFork(id string) (*lifecycle.ForkOperation, error)
	ListForks(f lifecycle.ForkFilter) ([]*lifecycle.ForkOperation, lifecycle.Page, error)
}

func (s *Server) forkRoutes(p routeAdder) {
	p("/sandboxes/{id}/fork", s.handleFork).Methods(http.MethodPost)
	p("/forks", s.handleListForks).Methods(http.MethodGet)
	p("/forks/{id}", s.handleGetFork).Methods(http.MethodGet)
}

// Keys a fork body may have: upstream's model forbids any other.
var (
	forkKeys     = []string{"timeout", "overrides"}
	overrideKeys = []string{"env", "resourceLimits", "resourceRequests", "networkPolicy", "metadata", "entrypoint"}
)

func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	req, ok := s.forkRequest(w, r)
	if !ok {
		return
	}
	op, err := s.forks.Fork(r.Context(), mux.Vars(r)["id"], req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/forks/"+op.ID)
	writeJSON(w, http.StatusAccepted, op)
}

// forkRequest reads a fork's headers and body, refusing what upstream's
// model refuses: a missing or null timeout, an unknown key, a null
// override (422), a blank or overlong idempotency key (400).
func (s *Server) forkRequest(w http.ResponseWriter, r *http.Request) (lifecycle.ForkRequest, bool) {
	req := lifecycle.ForkRequest{Count: 1}
	if keys := r.Header.Values(headerIdempotencyKey); len(keys) > 0 {
		k := keys[0]
		if len(keys) > 1 || strings.TrimSpace(k) == "" || len(k) > lifecycle.MaxIdempotencyKey {
			writeError(w, r, http.StatusBadRequest, lifecycle.CodeForkInvalid, fmt.Sprintf("%s must be one value of 1 to %d characters", headerIdempotencyKey, lifecycle.MaxIdempotencyKey))
			return req, false
		}
		req.IdempotencyKey = k
	}
	if v := r.Header.Get(headerForkCount); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > lifecycle.MaxForkCount {
			writeError(w, r, http.StatusBadRequest, lifecycle.CodeForkInvalid, fmt.Sprintf("%s must be a number from 1 to %d", headerForkCount, lifecycle.MaxForkCount))
			return req, false
		}
		req.Count = n
	}
	var body map[string]json.RawMessage
	if !s.decodeJSON(w, r, &body, false) {
		return req, false
	}
	if !knownKeys(w, body, forkKeys, "body") {
		return req, false
	}
	timeout, ok := body["timeout"]
	switch {
	case !ok:
		unprocessable(w, "missing", []string{"body", "timeout"}, "Field required")
		return req, false
	case string(timeout) == "null":
		unprocessable(w, "int_type", []string{"body", "timeout"}, "Input should be a valid integer")
		return req, false
	}
	if o, ok := body["overrides"]; ok {
		var overrides map[string]json.RawMessage
		if string(o) == "null" || !unmarshalBody(w, o, &overrides) {
			if string(o) == "null" {
				unprocessable(w, "value_error", []string{"body", "overrides"}, "Fork overrides must not be null; omit a field to inherit it.")
			}
			return req, false
		}
		if !knownKeys(w, overrides, overrideKeys, "body", "overrides") {
			return req, false
		}
		for k, v := range overrides {
			if string(v) == "null" {
				unprocessable(w, "value_error", []string{"body", "overrides", k}, "Fork overrides must not be null; omit a field to inherit it.")
				return req, false
			}
		}
		if e, ok := overrides["entrypoint"]; ok && strings.ReplaceAll(string(e), " ", "") == "[]" {
			unprocessable(w, "too_short", []string{"body", "overrides", "entrypoint"}, "List should have at least 1 item after validation, not 0")
			return req, false
		}
	}
	// The keys are known: decode the document as a whole.
	buf, _ := json.Marshal(body)
	if !unmarshalBody(w, buf, &req) {
		return req, false
	}
	if req.Timeout < 60 {
		unprocessable(w, "greater_than_equal", []string{"body", "timeout"}, "Input should be greater than or equal to 60")
		return req, false
	}
	return req, true
}

// knownKeys writes FastAPI's 422 for a key of obj not in allowed.
func knownKeys(w http.ResponseWriter, obj map[string]json.RawMessage, allowed []string, loc ...string) bool {
	for k := range obj {
		if !slices.Contains(allowed, k) {
			unprocessable(w, "extra_forbidden", append(loc, k), "Extra inputs are not permitted")
			return false
		}
	}
	return true
}

func (s *Server) handleGetFork(w http.ResponseWriter, r *http.Request) {
	op, err := s.forks.GetFork(mux.Vars(r)["id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, op)
}

// handleListForks lists fork tasks, those of one sandbox (its source or a
// target) with ?sandboxId= (sandboxd's route: upstream has none).
func (s *Server) handleListForks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, size, ok := pageParams(w, q)
	if !ok {
		return
	}
	items, p, err := s.forks.ListForks(lifecycle.ForkFilter{SandboxID: q.Get("sandboxId"), Page: page, PageSize: size})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if items == nil {
		items = []*lifecycle.ForkOperation{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "pagination": p})
}
