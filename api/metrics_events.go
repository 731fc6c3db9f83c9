package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
)

// maxEventBytes bounds a metrics event: the SDKs send a few short fields.
const maxEventBytes = 16 << 10

// sdkAgent is the User-Agent the SDKs send: OpenSandbox-<Lang>-SDK/<ver>.
var sdkAgent = regexp.MustCompile(`(?i)OpenSandbox-([A-Za-z0-9]+)-SDK/(\S+)`)

// handleMetricsEvent serves POST /v1/metrics/events, which every 1.1 SDK
// posts after each create and whose answer it ignores: 204 for any JSON
// object whose known fields have their types. Both names the duration has
// had (createDurationMs, durationMs) and any event type are accepted: the
// fields changed between upstream versions, and an SDK of any of them must
// see no failure. The event is logged at DEBUG; sandboxd keeps its own
// create metrics.
func (s *Server) handleMetricsEvent(w http.ResponseWriter, r *http.Request) {
	buf, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEventBytes))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr):
		writeError(w, r, http.StatusRequestEntityTooLarge, "GENERAL::REQUEST_TOO_LARGE", fmt.Sprintf("a metrics event is at most %d bytes", maxEventBytes))
		return
	case err != nil:
		writeError(w, r, http.StatusBadRequest, codeInvalidRequestBody, "cannot read request body: "+err.Error())
		return
	case len(buf) > 0 && !requireJSON(w, r):
		return
	}
	var ev struct {
		EventType        *string  `json:"eventType"`
		CreateDurationMs *float64 `json:"createDurationMs"`
		DurationMs       *float64 `json:"durationMs"`
		Success          *bool    `json:"success"`
		SandboxID        *string  `json:"sandboxId"`
		Image            *string  `json:"image"`
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(buf, &fields); err != nil || fields == nil {
		unprocessable(w, "model_attributes_type", []string{"body"}, "Input should be a valid dictionary or object")
		return
	}
	if err := json.Unmarshal(buf, &ev); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			unprocessable(w, typeErr.Type.Kind().String()+"_type", []string{"body", typeErr.Field}, "Input should be a valid "+typeName(typeErr.Type.Kind().String()))
			return
		}
		unprocessable(w, "value_error", []string{"body"}, err.Error())
		return
	}
	for name, v := range map[string]*float64{"createDurationMs": ev.CreateDurationMs, "durationMs": ev.DurationMs} {
		if v != nil && *v < 0 {
			unprocessable(w, "greater_than_equal", []string{"body", name}, "Input should be greater than or equal to 0")
			return
		}
	}
	lang, version := "unknown", "unknown"
	if m := sdkAgent.FindStringSubmatch(r.UserAgent()); m != nil {
		lang, version = clip(m[1]), clip(m[2])
	}
	s.log.DebugContext(r.Context(), "sdk metrics event", "sdk", lang, "sdk_version", version,
		"event_type", deref(ev.EventType), "success", ev.Success != nil && *ev.Success, "sandbox_id", deref(ev.SandboxID))
	w.WriteHeader(http.StatusNoContent)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return clip(*s)
}

// clip bounds a client's string in the log.
func clip(s string) string {
	const max = 128
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
