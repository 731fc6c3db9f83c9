package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveTarget(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sandboxd.toml")
	if err := os.WriteFile(cfg, []byte("[server]\nhost = \"0.0.0.0\"\nport = 9123\napi_key = \"file-key\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENSANDBOX_SERVER_API_KEY", "")
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	tests := []struct {
		name, config, domain string
		env                  map[string]string
		want, wantKey        string
		wantErr              string
	}{
		{"env", "", "", map[string]string{"OPEN_SANDBOX_DOMAIN": "localhost:8081", "OPEN_SANDBOX_API_KEY": "k"}, "http://localhost:8081", "k", ""},
		{"env with protocol", "", "", map[string]string{"OPEN_SANDBOX_DOMAIN": "sb.example:443", "OPEN_SANDBOX_PROTOCOL": "https", "OPEN_SANDBOX_API_KEY": "k"}, "https://sb.example:443", "k", ""},
		{"URL domain", "", "", map[string]string{"OPEN_SANDBOX_DOMAIN": "https://sb.example/base/", "OPEN_SANDBOX_API_KEY": "k"}, "https://sb.example/base", "k", ""},
		{"config file; wildcard host means loopback", cfg, "", nil, "http://127.0.0.1:9123", "file-key", ""},
		{"flag beats env, key from file", cfg, "h:1", map[string]string{"OPEN_SANDBOX_DOMAIN": "x:2"}, "http://h:1", "file-key", ""},
		{"env key beats file", cfg, "", map[string]string{"OPEN_SANDBOX_API_KEY": "env-key"}, "http://127.0.0.1:9123", "env-key", ""},
		{"missing explicit config", filepath.Join(dir, "none.toml"), "", nil, "", "", "none.toml"},
		{"bad scheme", "", "ftp://x", map[string]string{"OPEN_SANDBOX_API_KEY": "k"}, "", "", "want host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveTarget(tt.config, tt.domain, env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.base.String() != tt.want || got.key != tt.wantKey {
				t.Errorf("got %s key %q, want %s key %q", got.base, got.key, tt.want, tt.wantKey)
			}
		})
	}
	t.Run("no key anywhere", func(t *testing.T) {
		t.Setenv("SANDBOX_CONFIG_PATH", "")
		t.Setenv("HOME", t.TempDir()) // no ~/.sandbox.toml
		if _, err := resolveTarget("", "", env(map[string]string{"OPEN_SANDBOX_DOMAIN": "h:1"})); err == nil || !strings.Contains(err.Error(), "no API key") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestShellCommand(t *testing.T) {
	for _, tt := range []struct {
		argv []string
		want string
	}{
		{[]string{"ls | wc -l"}, "ls | wc -l"},
		{[]string{"echo", "a b", "it's", "$HOME", ""}, `echo 'a b' 'it'\''s' '$HOME' ''`},
		{[]string{"ls", "-la", "/tmp/x.txt", "k=v"}, "ls -la /tmp/x.txt k=v"},
	} {
		if got := shellCommand(tt.argv); got != tt.want {
			t.Errorf("shellCommand(%q) = %s, want %s", tt.argv, got, tt.want)
		}
	}
}

func TestRemotePath(t *testing.T) {
	for _, tt := range []struct {
		arg, id, path string
		ok            bool
	}{
		{"abc-123:/tmp/x", "abc-123", "/tmp/x", true},
		{"abc:rel/x", "abc", "rel/x", true},
		{"./abc:/x", "", "", false},
		{`C:\x`, "", "", false},
		{"local.txt", "", "", false},
		{"abc:", "", "", false},
	} {
		id, p, ok := remotePath(tt.arg)
		if id != tt.id || p != tt.path || ok != tt.ok {
			t.Errorf("remotePath(%q) = %q, %q, %v", tt.arg, id, p, ok)
		}
	}
}

func TestStreamEvents(t *testing.T) {
	stream := `{"type":"init","text":"cmd-1","timestamp":1}

{"type":"stdout","text":"out","timestamp":2}

{"type":"stderr","text":"err","timestamp":3}

{"type":"ping","timestamp":4}

`
	tests := []struct {
		name, tail string
		code       int
		wantErr    string
	}{
		{"complete", `{"type":"execution_complete","timestamp":5}` + "\n\n", 0, ""},
		{"exit code", `{"type":"error","error":{"ename":"CommandExecError","evalue":"42","traceback":[]}}` + "\n\n", 42, ""},
		{"failure", `{"type":"error","error":{"ename":"StartError","evalue":"no shell"}}` + "\n\n", 1, "StartError: no shell"},
		{"cut off", "", 1, "without an exit code"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			var id string
			code, err := streamEvents(strings.NewReader(stream+tt.tail), &out, &errb, func(s string) { id = s })
			if code != tt.code || (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("code %d err %v, want %d %q", code, err, tt.code, tt.wantErr)
			}
			if id != "cmd-1" || out.String() != "out\n" || errb.String() != "err\n" {
				t.Errorf("id %q stdout %q stderr %q", id, out.String(), errb.String())
			}
		})
	}
}

// A command's request carries the key in its header only, JSON bodies say
// so, and the API's error envelope becomes the message.
func TestClientRequests(t *testing.T) {
	var got []*http.Request
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, bodies = append(got, r), append(bodies, string(b))
		if strings.HasSuffix(r.URL.Path, "/missing/pause") {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]string{"code": "DOCKER::SANDBOX_NOT_FOUND", "message": "Sandbox missing not found."})
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	e := &env{name: "pause", cmd: commands["pause"], stdout: &stdout, stderr: &stderr, getenv: func(k string) string {
		return map[string]string{"OPEN_SANDBOX_DOMAIN": srv.URL, "OPEN_SANDBOX_API_KEY": "the-key"}[k]
	}}
	code := e.exit(runPause(context.Background(), e, []string{"a/b", "missing"}))
	if code != 1 || stdout.String() != "a/b\n" || !strings.Contains(stderr.String(), "DOCKER::SANDBOX_NOT_FOUND: Sandbox missing not found. (HTTP 404)") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	if len(got) != 2 {
		t.Fatalf("%d requests", len(got))
	}
	r := got[0]
	if r.URL.EscapedPath() != "/v1/sandboxes/a%2Fb/pause" || r.Method != http.MethodPost {
		t.Errorf("request %s %s", r.Method, r.URL.EscapedPath())
	}
	if r.Header.Get(headerAPIKey) != "the-key" || r.URL.RawQuery != "" || r.Header.Get("Cookie") != "" {
		t.Errorf("key sent as %q, query %q", r.Header.Get(headerAPIKey), r.URL.RawQuery)
	}
	if r.Header.Get("Content-Type") != "application/json" || bodies[0] != "{}" {
		t.Errorf("body %q with Content-Type %q", bodies[0], r.Header.Get("Content-Type"))
	}

	stderr.Reset()
	if code := e.exit(runPause(context.Background(), e, nil)); code != 2 || !strings.Contains(stderr.String(), "usage: sandboxd pause") {
		t.Errorf("no ids: exit %d, %q", code, stderr.String())
	}
}
