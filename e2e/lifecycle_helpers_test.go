//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
)

// Generous bounds for things that happen in the background. They only stop
// a test that would otherwise hang; no test asserts how fast anything is.
const (
	// stateWait bounds waiting for a container state change to show.
	stateWait = 60 * time.Second
	// reapSlack is how long after its expiresAt a sandbox may take to go.
	reapSlack = 60 * time.Second
	// pollEvery is the polling period of the waits.
	pollEvery = 250 * time.Millisecond
)

// lcSandbox is the lifecycle API's Sandbox object (reference §1.5.3), with
// timestamps kept as the strings that were on the wire.
type lcSandbox struct {
	ID    string `json:"id"`
	Image *struct {
		URI string `json:"uri"`
	} `json:"image"`
	SnapshotID string `json:"snapshotId"`
	Status     struct {
		State            string `json:"state"`
		Reason           string `json:"reason"`
		Message          string `json:"message"`
		LastTransitionAt string `json:"lastTransitionAt"`
	} `json:"status"`
	Metadata   map[string]string `json:"metadata"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  string            `json:"expiresAt"`
	CreatedAt  string            `json:"createdAt"`
}

// lcPage is the pagination object of the list routes.
type lcPage struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"pageSize"`
	TotalItems  int  `json:"totalItems"`
	TotalPages  int  `json:"totalPages"`
	HasNextPage bool `json:"hasNextPage"`
}

// lcList is GET /v1/sandboxes.
type lcList struct {
	Items      []lcSandbox `json:"items"`
	Pagination lcPage      `json:"pagination"`
}

// lcEndpoint is GET /v1/sandboxes/{id}/endpoints/{port}.
type lcEndpoint struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers"`
}

// lcSnapshot is the Snapshot object (reference §1.5.8).
type lcSnapshot struct {
	ID        string `json:"id"`
	SandboxID string `json:"sandboxId"`
	Name      string `json:"name"`
	Status    struct {
		State   string `json:"state"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"status"`
	CreatedAt string `json:"createdAt"`
}

// lcError is the error envelope plus FastAPI's 422 detail.
type lcError struct {
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Detail  []json.RawMessage `json:"detail"`
}

// busyboxWith is busyboxRequest with some fields replaced; a nil value
// removes the field, so {"timeout": nil} asks for manual cleanup.
func busyboxWith(fields map[string]any) map[string]any {
	req := busyboxRequest()
	for k, v := range fields {
		if v == nil {
			delete(req, k)
			continue
		}
		req[k] = v
	}
	return req
}

// createSandbox creates a sandbox through path (/v1/sandboxes or
// /sandboxes) and expects 202. The harness removes the containers of the
// server's instance when the test ends.
func createSandbox(t testing.TB, s *Server, path string, req any) lcSandbox {
	t.Helper()
	status, _, body := s.do(t, http.MethodPost, path, req, nil)
	if status != http.StatusAccepted {
		t.Fatalf("POST %s: status %d, want 202; body: %s", path, status, body)
	}
	assertNoNulls(t, "POST "+path, body)
	sb := decodeJSON[lcSandbox](t, body)
	if sb.ID == "" {
		t.Fatalf("POST %s: no id in %s", path, body)
	}
	return sb
}

// getBody GETs path, expects 200, checks for nulls and returns the body.
func getBody(t testing.TB, s *Server, path string) []byte {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, path, nil, nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d, want 200; body: %s", path, status, body)
	}
	assertNoNulls(t, "GET "+path, body)
	return body
}

// getSandbox GETs one sandbox under prefix ("" or "/v1") and expects 200.
func getSandbox(t testing.TB, s *Server, prefix, id string) lcSandbox {
	t.Helper()
	return decodeJSON[lcSandbox](t, getBody(t, s, prefix+"/sandboxes/"+id))
}

// listSandboxes GETs a list with the given raw query and expects 200.
func listSandboxes(t testing.TB, s *Server, prefix, rawQuery string) lcList {
	t.Helper()
	path := prefix + "/sandboxes?" + rawQuery
	body := getBody(t, s, path)
	l := decodeJSON[lcList](t, body)
	if l.Items == nil {
		t.Fatalf("GET %s: items is missing, want an array: %s", path, body)
	}
	return l
}

// ids returns the ids of sandboxes, in order.
func ids(items []lcSandbox) []string {
	out := make([]string, len(items))
	for i, sb := range items {
		out[i] = sb.ID
	}
	return out
}

// wantError checks a failed response: the status, the error envelope with
// the given code (any code if code is ""), a non-empty message, and for 422
// FastAPI's non-empty detail array. It returns the message.
func wantError(t testing.TB, what string, status int, body []byte, wantStatus int, code string) string {
	t.Helper()
	if status != wantStatus {
		t.Errorf("%s: status %d, want %d; body: %s", what, status, wantStatus, body)
		return ""
	}
	var e lcError
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("%s: error body is not JSON: %v; body: %s", what, err, body)
		return ""
	}
	if code != "" && e.Code != code {
		t.Errorf("%s: code %q, want %q; body: %s", what, e.Code, code, body)
	}
	if wantStatus == http.StatusUnprocessableEntity {
		if len(e.Detail) == 0 {
			t.Errorf("%s: a 422 needs FastAPI's detail array; body: %s", what, body)
		}
	} else if e.Message == "" {
		t.Errorf("%s: error without a message; body: %s", what, body)
	}
	assertNoNulls(t, what, body)
	return e.Message
}

// doError sends a request that must fail and checks it with wantError.
func doError(t testing.TB, s *Server, method, path string, body any, wantStatus int, code string) string {
	t.Helper()
	status, _, data := s.do(t, method, path, body, nil)
	return wantError(t, method+" "+path, status, data, wantStatus, code)
}

// assertNoNulls fails the test if a JSON document holds a null anywhere:
// the API omits unset fields, and SDK parsers crash on explicit nulls.
func assertNoNulls(t testing.TB, what string, body []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("%s: body is not JSON: %v; body: %s", what, err, body)
		return
	}
	for _, p := range nullPaths(v, "$") {
		t.Errorf("%s: null at %s; body: %s", what, p, body)
	}
}

// nullPaths returns the JSON paths of every null in v.
func nullPaths(v any, path string) []string {
	switch x := v.(type) {
	case nil:
		return []string{path}
	case map[string]any:
		var out []string
		for k, e := range x {
			out = append(out, nullPaths(e, path+"."+k)...)
		}
		return out
	case []any:
		var out []string
		for i, e := range x {
			out = append(out, nullPaths(e, fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	return nil
}

// parseUTC parses a wire timestamp, which must be RFC 3339 in UTC with the
// Z suffix.
func parseUTC(t testing.TB, what, v string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatalf("%s: %q is not an RFC 3339 timestamp: %v", what, v, err)
	}
	if !strings.HasSuffix(v, "Z") {
		t.Errorf("%s: %q is not UTC with a Z suffix", what, v)
	}
	return ts
}

// waitUntil polls cond until it holds or timeout passes, then fails.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", timeout, what)
		}
		time.Sleep(pollEvery)
	}
}

// waitState waits until GET shows the sandbox in one of the given states
// and returns it.
func waitState(t testing.TB, s *Server, id string, states ...string) lcSandbox {
	t.Helper()
	var sb lcSandbox
	waitUntil(t, stateWait, fmt.Sprintf("sandbox %s to be %v", id, states), func() bool {
		sb = getSandbox(t, s, "/v1", id)
		for _, st := range states {
			if sb.Status.State == st {
				return true
			}
		}
		return false
	})
	return sb
}

// assertGone checks that a sandbox is gone from the API and from Docker.
func assertGone(t testing.TB, s *Server, id string) {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, sandboxPath(id), nil, nil)
	wantError(t, "GET deleted sandbox "+id, status, body, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	if left := containersByLabel(t, labelID, id); len(left) != 0 {
		t.Errorf("sandbox %s: %d container(s) left in Docker", id, len(left))
	}
}

// proxyPath is the execd API path of a sandbox through the server proxy.
func proxyPath(id, rest string) string {
	return "/sandboxes/" + id + "/proxy/44772" + rest
}

// runCommand runs a shell command in a sandbox through the server proxy's
// execd API and returns its stdout lines joined by "\n". The command must
// succeed.
func runCommand(t testing.TB, s *Server, id, command string) string {
	t.Helper()
	path := proxyPath(id, "/command")
	status, _, body := s.do(t, http.MethodPost, path, map[string]any{"command": command}, nil)
	if status != http.StatusOK {
		t.Fatalf("run %q in %s: status %d; body: %s", command, id, status, body)
	}
	var stdout []string
	complete := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Text  string `json:"text"`
			Error *struct {
				Evalue string `json:"evalue"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("run %q in %s: event %q is not JSON: %v", command, id, line, err)
		}
		switch ev.Type {
		case "stdout":
			stdout = append(stdout, ev.Text)
		case "error":
			t.Fatalf("run %q in %s failed: %s", command, id, body)
		case "execution_complete":
			complete = true
		}
	}
	if !complete {
		t.Fatalf("run %q in %s: no execution_complete event; body: %s", command, id, body)
	}
	return strings.Join(stdout, "\n")
}

// uploadFile writes a file into a sandbox with execd's multipart upload
// through the server proxy.
func uploadFile(t testing.TB, s *Server, id, path, content string) {
	t.Helper()
	if status, _, body := uploadRaw(t, s, id, path, content); status != http.StatusOK {
		t.Fatalf("upload %s to %s: status %d; body: %s", path, id, status, body)
	}
}

// downloadFile reads a file from a sandbox through the server proxy.
func downloadFile(t testing.TB, s *Server, id, path string) string {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, proxyPath(id, "/files/download?path="+path), nil, nil)
	if status != http.StatusOK {
		t.Fatalf("download %s from %s: status %d; body: %s", path, id, status, body)
	}
	return string(body)
}

// imageExists asks Docker whether an image reference exists locally.
func imageExists(t testing.TB, ref string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	_, err := dockerClient(t).ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("inspect image %s: %v", ref, err)
	}
	return true
}

// removeImageAtEnd removes an image, if it still exists, when the test ends.
func removeImageAtEnd(t testing.TB, ref string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
		defer cancel()
		_, err := dockerClient(t).ImageRemove(ctx, ref, image.RemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("clean-up: remove image %s: %v", ref, err)
		}
	})
}
