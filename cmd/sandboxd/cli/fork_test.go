package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestFork: fork asks for the count and the key in headers, follows the
// task until it settles and prints the new ids, one a line; a failed task
// is a failure with the server's reason.
func TestFork(t *testing.T) {
	for _, tt := range []struct {
		name     string
		final    string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"succeeds", `{"id":"f1","status":{"state":"Succeeded"},"sandboxIds":["a","b"],"cleanupPending":false}`, 0, "a\nb\n", "fork f1: Provisioning"},
		{"fails", `{"id":"f1","status":{"state":"Failed","reason":"FORK::SNAPSHOT_FAILED","message":"Fork failed."},"cleanupPending":false}`, 1, "", "FORK::SNAPSHOT_FAILED"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var post *http.Request
			var body string
			gets := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case r.Method == http.MethodPost && r.URL.EscapedPath() == "/v1/sandboxes/src%2F1/fork":
					b, _ := io.ReadAll(r.Body)
					post, body = r, string(b)
					w.WriteHeader(http.StatusAccepted)
					_, _ = io.WriteString(w, `{"id":"f1","status":{"state":"Pending"}}`)
				case r.Method == http.MethodGet && r.URL.Path == "/v1/forks/f1":
					gets++
					if gets == 1 {
						_, _ = io.WriteString(w, `{"id":"f1","status":{"state":"Provisioning"},"sandboxIds":["a"]}`)
						return
					}
					_, _ = io.WriteString(w, tt.final)
				default:
					t.Errorf("unexpected %s %s", r.Method, r.URL)
					w.WriteHeader(http.StatusNotFound)
				}
			}))
			defer srv.Close()
			var stdout, stderr bytes.Buffer
			e := &env{name: "fork", cmd: commands["fork"], stdout: &stdout, stderr: &stderr, getenv: func(k string) string {
				return map[string]string{"OPEN_SANDBOX_DOMAIN": srv.URL, "OPEN_SANDBOX_API_KEY": "the-key"}[k]
			}}
			code := e.exit(runFork(context.Background(), e, []string{"-n", "2", "--key", "k1", "--timeout", "5m", "src/1"}))
			if code != tt.wantCode || stdout.String() != tt.wantOut || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, stderr with %q", code, stdout.String(), stderr.String(), tt.wantCode, tt.wantOut, tt.wantErr)
			}
			mu.Lock()
			defer mu.Unlock()
			if post == nil {
				t.Fatal("no fork request")
			}
			if post.Header.Get("Sandboxd-Fork-Count") != "2" || post.Header.Get("Idempotency-Key") != "k1" || post.Header.Get(headerAPIKey) != "the-key" {
				t.Errorf("fork request headers %v", post.Header)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(body), &got); err != nil || len(got) != 1 || got["timeout"] != float64(300) {
				t.Errorf("fork body %s, want just timeout 300", body)
			}
		})
	}
}
