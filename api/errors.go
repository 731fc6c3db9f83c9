package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// Codes of refusals made by the HTTP layer itself. The BACKEND_* codes are
// upstream's (1.1) for a proxied request the sandbox did not answer; like
// upstream's, they carry no namespace.
const (
	codeUnsupportedMedia        = "GENERAL::UNSUPPORTED_MEDIA_TYPE"
	codeForbiddenOrigin         = "GENERAL::FORBIDDEN_ORIGIN"
	codeForbiddenHost           = "GENERAL::FORBIDDEN_HOST"
	codeTooManyRequests         = "GENERAL::TOO_MANY_REQUESTS"
	codeBackendConnectionFailed = "BACKEND_CONNECTION_FAILED"
	codeBackendTimeout          = "BACKEND_TIMEOUT"
	codeBackendResponseFailed   = "BACKEND_RESPONSE_FAILED"
	codeEgressForbidden         = "EGRESS::FORBIDDEN"
)

// errorBody is the OpenSandbox error envelope.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Detail is FastAPI's validation detail, sent with 422s as upstream does.
	Detail []detail `json:"detail,omitempty"`
}

type detail struct {
	Type  string `json:"type"`
	Loc   []any  `json:"loc"`
	Msg   string `json:"msg"`
	Input any    `json:"input,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, _ *http.Request, status int, code, msg string) {
	writeJSON(w, status, errorBody{Code: code, Message: msg})
}

// unprocessable writes a 422 with FastAPI's detail array.
func unprocessable(w http.ResponseWriter, typ string, loc []string, msg string) {
	l := make([]any, len(loc))
	for i, s := range loc {
		l[i] = s
	}
	writeJSON(w, http.StatusUnprocessableEntity, errorBody{
		Code:    lifecycle.CodeInvalidParameter,
		Message: fmt.Sprintf("%s: %s", strings.Join(loc, "."), msg),
		Detail:  []detail{{Type: typ, Loc: l, Msg: msg}},
	})
}

var kindStatus = map[lifecycle.Kind]int{
	lifecycle.KindInvalid:        http.StatusBadRequest,
	lifecycle.KindNotFound:       http.StatusNotFound,
	lifecycle.KindConflict:       http.StatusConflict,
	lifecycle.KindUnavailable:    http.StatusServiceUnavailable,
	lifecycle.KindInternal:       http.StatusInternalServerError,
	lifecycle.KindNotImplemented: http.StatusNotImplemented,
	lifecycle.KindTooLarge:       http.StatusRequestEntityTooLarge,
	lifecycle.KindTooMany:        http.StatusTooManyRequests,
}

// fail writes a lifecycle error; anything else is a logged 500.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	e, ok := lifecycle.AsError(err)
	if !ok {
		s.log.Error("unexpected error", "request_id", lifecycle.RequestID(r.Context()), "path", r.URL.Path, "err", err)
		writeError(w, r, http.StatusInternalServerError, lifecycle.CodeGeneral, "internal error; see the server log for request "+lifecycle.RequestID(r.Context()))
		return
	}
	if e.Kind == lifecycle.KindUnprocessable {
		unprocessable(w, "value_error", e.Field, e.Message)
		return
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(e.RetryAfter.Seconds(), 1))))
	}
	status := kindStatus[e.Kind]
	if status >= 500 && status != http.StatusNotImplemented {
		s.log.Error("request failed", "request_id", lifecycle.RequestID(r.Context()), "path", r.URL.Path, "code", lifecycle.WireCode(e.Code, s.engine), "err", err)
	}
	s.refuse(w, r, status, e.Code, e.Message)
}

// refuse is writeError for a lifecycle code, which may be engine-scoped
// (lifecycle.EngineScope): it goes out with the runtime's prefix.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	writeError(w, r, status, lifecycle.WireCode(code, s.engine), msg)
}

// decodeJSON reads a bounded JSON body into v; it writes a 413, 415 or 422
// and returns false on a bad body. An empty body needs no Content-Type
// (SDKs send none on a POST without body). Unknown fields are ignored, as upstream does.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	body := http.MaxBytesReader(w, r.Body, s.cfg.Server.MaxBodyBytes)
	buf, err := io.ReadAll(body)
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) {
		writeError(w, r, http.StatusRequestEntityTooLarge, "GENERAL::REQUEST_TOO_LARGE", fmt.Sprintf("request body exceeds %d bytes ([server] max_body_bytes)", maxErr.Limit))
		return false
	}
	if err != nil {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidParameter, "cannot read request body: "+err.Error())
		return false
	}
	if len(strings.TrimSpace(string(buf))) == 0 {
		if allowEmpty {
			return true
		}
		unprocessable(w, "missing", []string{"body"}, "Field required")
		return false
	}
	if !requireJSON(w, r) {
		return false
	}
	return unmarshalBody(w, buf, v)
}

// unmarshalBody decodes a JSON body into v; it writes FastAPI's 422 and
// returns false if the body does not fit v.
func unmarshalBody(w http.ResponseWriter, buf []byte, v any) bool {
	if err := json.Unmarshal(buf, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var synErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr):
			loc := []string{"body"}
			if typeErr.Field != "" {
				loc = append(loc, strings.Split(typeErr.Field, ".")...)
			}
			unprocessable(w, typeErr.Type.Kind().String()+"_type", loc, fmt.Sprintf("Input should be a valid %s, got %s", typeName(typeErr.Type.Kind().String()), typeErr.Value))
		case errors.As(err, &synErr):
			unprocessable(w, "json_invalid", []string{"body", fmt.Sprint(synErr.Offset)}, "JSON decode error: "+synErr.Error())
		default:
			unprocessable(w, "value_error", []string{"body"}, err.Error())
		}
		return false
	}
	return true
}

func typeName(kind string) string {
	switch kind {
	case "int", "int64", "int32", "uint32", "uint64":
		return "integer"
	case "map", "struct":
		return "object"
	case "slice":
		return "list"
	}
	return kind
}
