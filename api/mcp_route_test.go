package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/config"
)

const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

var mcpHeaders = map[string]string{"Accept": "application/json, text/event-stream"}

func withHeaders(extra map[string]string) map[string]string {
	h := map[string]string{}
	for k, v := range mcpHeaders {
		h[k] = v
	}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// /mcp is behind the key (the SDKs' header or a bearer token) and the
// browser checks, before the MCP handler runs.
func TestMCPRouteRefusals(t *testing.T) {
	keyed := newEnv(t, nil)
	open := newEnv(t, func(c *config.Config) { c.Server.APIKey = "" })
	for _, tt := range []struct {
		name    string
		e       *env
		headers map[string]string
		status  int
		code    string
	}{
		{"no key", keyed, map[string]string{headerAPIKey: ""}, 401, "MISSING_API_KEY"},
		{"wrong bearer", keyed, map[string]string{headerAPIKey: "", "Authorization": "Bearer nope"}, 401, "INVALID_API_KEY"},
		{"bearer without the scheme's space", keyed, map[string]string{headerAPIKey: "", "Authorization": "Bearer" + testKey}, 401, "MISSING_API_KEY"},
		{"foreign origin", keyed, map[string]string{"Origin": "https://evil.example"}, 403, codeForbiddenOrigin},
		{"rebinding host, open server", open, map[string]string{"Host": "attacker.example:8080"}, 403, codeForbiddenHost},
		{"bearer", keyed, map[string]string{headerAPIKey: "", "Authorization": "Bearer " + testKey}, 200, ""},
		{"the SDKs' header", keyed, nil, 200, ""},
		{"open server on loopback", open, map[string]string{headerAPIKey: ""}, 200, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.e.do(t, http.MethodPost, "/mcp", mcpInitialize, withHeaders(tt.headers))
			if tt.code != "" {
				wantError(t, r, tt.status, tt.code)
				if got := r.header.Get("WWW-Authenticate"); (tt.status == 401) != (got == "Bearer") {
					t.Errorf("WWW-Authenticate %q on a %d", got, tt.status)
				}
				return
			}
			if r.status != tt.status || !strings.Contains(string(r.body), `"serverInfo"`) {
				t.Errorf("status %d, body %s", r.status, r.body)
			}
		})
	}
	if r := keyed.do(t, http.MethodGet, "/mcp", "", mcpHeaders); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET /mcp: %d, want 405 (stateless: no session streams)", r.status)
	}
}

// The tools reach this server's API in-process with the caller's key and
// its rules: the sandbox is there, a host path outside the allow-list is
// refused as a tool error, and no container is made for it.
func TestMCPRouteTools(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	hc := &http.Client{Transport: bearer{testKey}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(t.Context(),
		&sdk.StreamableClientTransport{Endpoint: e.srv.URL + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "sandbox_get_info", Arguments: map[string]any{"sandbox_id": id}})
	if err != nil || res.IsError {
		t.Fatalf("sandbox_get_info: %v %+v", err, res)
	}
	var info struct {
		ID     string `json:"id"`
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	data, _ := json.Marshal(res.StructuredContent)
	if json.Unmarshal(data, &info); info.ID != id || info.Status.State != "Running" {
		t.Errorf("info %s", data)
	}
	before := containers(t, e)
	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "sandbox_create", Arguments: map[string]any{
		"image": "busybox:latest", "skip_health_check": true,
		"volumes": []any{map[string]any{"name": "etc", "mountPath": "/h", "host": map[string]any{"path": "/etc"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "VOLUME::HOST_PATH_NOT_ALLOWED") {
		t.Errorf("a host mount outside the allow-list: isError %v, %+v", res.IsError, res.Content)
	}
	if n := containers(t, e); n != before {
		t.Errorf("a refused create changed the containers: %d -> %d", before, n)
	}
}

// bearer sends the key as an Authorization bearer token.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPRequestsCapped: at most maxMCPRequests /mcp requests are in
// progress at once (a tool call holds far more than a proxied request);
// the next is a 429 with the envelope, and a slot freed serves again.
func TestMCPRequestsCapped(t *testing.T) {
	e := newEnv(t, nil)
	var writers []*io.PipeWriter
	// Each held request reports how it ended: none may end before its
	// body does.
	done := make(chan string, maxMCPRequests)
	for range maxMCPRequests {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		t.Cleanup(func() { pw.Close() }) // before the server's close waits for it
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/mcp", pr)
		req.Header.Set(headerAPIKey, testKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", mcpHeaders["Accept"])
		go func() {
			res, err := e.srv.Client().Do(req)
			if err != nil {
				done <- err.Error()
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			done <- fmt.Sprintf("%d %.200s", res.StatusCode, body)
		}()
	}
	for _, pw := range writers {
		if _, err := pw.Write([]byte(" ")); err != nil {
			t.Fatal(err)
		}
	}
	// The held requests reach the handler soon after their first bytes (a
	// loaded machine may take seconds).
	r := e.do(t, http.MethodPost, "/mcp", mcpInitialize, withHeaders(nil))
	for deadline := time.Now().Add(15 * time.Second); r.status != http.StatusTooManyRequests && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		r = e.do(t, http.MethodPost, "/mcp", mcpInitialize, withHeaders(nil))
	}
	select {
	case end := <-done:
		t.Fatalf("a held request ended before its body did: %s", end)
	default:
	}
	wantError(t, r, http.StatusTooManyRequests, codeTooManyRequests)
	for _, pw := range writers {
		_, _ = pw.Write([]byte(mcpInitialize))
		pw.Close()
	}
	for range maxMCPRequests {
		<-done
	}
	if r := e.do(t, http.MethodPost, "/mcp", mcpInitialize, withHeaders(nil)); r.status != http.StatusOK {
		t.Fatalf("after the slots were freed: %d %s", r.status, r.body)
	}
}
