//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// apiKeyHeader is the header that carries the API key on the lifecycle API.
const apiKeyHeader = "OPEN-SANDBOX-API-KEY"

// do sends one request to the server and returns its status, header and
// body. The API key is sent unless headers override it; a header given with
// an empty value is not sent at all (e.g. {apiKeyHeader: ""} for anonymous
// requests). body is sent as is when it is nil, []byte or string, and as
// JSON otherwise; a string is JSON text (malformed on purpose, say) and is
// labelled application/json like an encoded body. Transport errors fail
// the test.
func (s *Server) do(t testing.TB, method, path string, body any, headers map[string]string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	jsonBody := false
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
		jsonBody = true
	case io.Reader: // sent without a Content-Length
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encode %s %s body: %v", method, path, err)
		}
		rd = bytes.NewReader(data)
		jsonBody = true
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	req.Header.Set(apiKeyHeader, s.APIKey)
	if jsonBody {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, data
}

// doJSON is do with an expected status; the response body is decoded into
// out unless out is nil.
func (s *Server) doJSON(t testing.TB, method, path string, body any, wantStatus int, out any) http.Header {
	t.Helper()
	status, hdr, data := s.do(t, method, path, body, nil)
	if status != wantStatus {
		t.Fatalf("%s %s: status %d, want %d; body: %s", method, path, status, wantStatus, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
	return hdr
}

// decodeJSON decodes a JSON document into a T.
func decodeJSON[T any](t testing.TB, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode JSON %s: %v", data, err)
	}
	return v
}

// runNode runs one test file of e2e/ts (e.g. "sdk_smoke.test.mjs") with
// node's test runner against s, and fails the test with node's output if any
// of its tests fails. The script finds the server in SANDBOXD_URL
// (http://127.0.0.1:PORT), SANDBOXD_DOMAIN (127.0.0.1:PORT) and
// SANDBOXD_API_KEY; env adds or overrides variables.
func (s *Server) runNode(t testing.TB, script string, env map[string]string) {
	t.Helper()
	dir := filepath.Join(repoRoot(), "e2e", "ts")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@alibaba-group", "opensandbox")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed in %s (run e2e/setup.sh): %v", dir, err)
	}
	cmd := exec.CommandContext(t.Context(), "node", "--test", "--test-reporter=spec", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SANDBOXD_URL="+s.URL,
		"SANDBOXD_DOMAIN="+s.Addr,
		"SANDBOXD_API_KEY="+s.APIKey,
		"NO_COLOR=1",
	)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s: %v\n%s", script, err, out)
	}
	t.Logf("node --test %s:\n%s", script, out)
}

// sandboxPath is the lifecycle API path of one sandbox, under /v1.
func sandboxPath(id string, rest ...string) string {
	return fmt.Sprintf("/v1/sandboxes/%s%s", id, strings.Join(rest, ""))
}
