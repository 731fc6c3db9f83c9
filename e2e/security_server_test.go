//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// secProc is a sandboxd started by hand, for the start-up checks the
// harness cannot make (it always configures a key).
type secProc struct {
	cmd    *exec.Cmd
	out    *bytes.Buffer
	exited chan struct{}
	port   int
	store  string
}

// secStart starts sandboxd with a config whose [server] table gets the
// given extra lines (host, api_key, ...), a fresh port, store and
// instance id, and an environment without sandboxd's variables plus env.
func secStart(t *testing.T, serverLines string, env []string, args ...string) *secProc {
	t.Helper()
	dir := t.TempDir()
	p := &secProc{out: &bytes.Buffer{}, exited: make(chan struct{}), port: freePort(t), store: filepath.Join(dir, "store")}
	cfg := fmt.Sprintf("[server]\nport = %d\n%s\n[store]\ndir = %q\n[lifecycle]\ninstance_id = %q\n",
		p.port, serverLines, p.store, "e2e-"+randomHex(t, 6))
	path := filepath.Join(dir, "sandboxd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(sandboxdBinary, append([]string{"--config", path}, args...)...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "OPENSANDBOX_SERVER_API_KEY", "OPENSANDBOX_INSECURE_SERVER", "SANDBOX_CONFIG_PATH", "HOME":
			continue
		}
		p.cmd.Env = append(p.cmd.Env, kv)
	}
	p.cmd.Env = append(append(p.cmd.Env, "HOME="+dir), env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start sandboxd: %v", err)
	}
	go func() {
		p.cmd.Wait() // the status is read from ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(stopTimeout):
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// waitRefused waits for the process to exit and returns its output; it
// fails the test if it exits 0 or serves /health instead.
func (p *secProc) waitRefused(t *testing.T) string {
	t.Helper()
	deadline := time.After(startTimeout)
	for {
		select {
		case <-p.exited:
			if p.cmd.ProcessState.ExitCode() == 0 {
				t.Errorf("sandboxd exited 0, want a refusal; output:\n%s", p.out)
			}
			return p.out.String()
		case <-deadline:
			t.Fatalf("sandboxd still runs %s after start, want a refusal; output:\n%s", startTimeout, p.out)
		case <-time.After(50 * time.Millisecond):
			if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", p.port)); err == nil {
				resp.Body.Close()
				t.Fatalf("sandboxd serves /health, want a refusal; output:\n%s", p.out)
			}
		}
	}
}

// waitHealthy waits until the process serves /health on loopback.
func (p *secProc) waitHealthy(t *testing.T) {
	t.Helper()
	waitUntil(t, startTimeout, "sandboxd to answer /health", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("sandboxd exited (%s); output:\n%s", p.cmd.ProcessState, p.out)
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", p.port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// secExternalIP returns an address of this machine that is not loopback,
// or "" if it has none.
func secExternalIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return ""
}

// secAssertNotListening fails if something accepts TCP on ip:port.
func secAssertNotListening(t *testing.T, ip string, port int) {
	t.Helper()
	addr := net.JoinHostPort(ip, fmt.Sprint(port))
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err == nil {
		conn.Close()
		t.Errorf("sandboxd accepts connections on %s, want loopback only", addr)
		return
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
}

// TestSecurityStartupRefusals checks that sandboxd never starts an open
// server: without a key it refuses (pointing at init-config) unless the
// insecure flag or upstream's variable is given, and even then only on a
// loopback host. A refused start creates no state directory.
func TestSecurityStartupRefusals(t *testing.T) {
	ext := secExternalIP(t)
	tests := []struct {
		name   string
		server string
		env    []string
		args   []string
		want   string // in the output
	}{
		{name: "no key", server: `host = "127.0.0.1"`, want: "init-config"},
		{name: "blank key", server: "host = \"127.0.0.1\"\napi_key = \"   \"", want: "init-config"},
		{name: "insecure in the file is ignored", server: "host = \"127.0.0.1\"\ninsecure = true", want: "init-config"},
		{name: "insecure variable not exactly YES", server: `host = "127.0.0.1"`, env: []string{"OPENSANDBOX_INSECURE_SERVER=yes"}, want: "init-config"},
		{name: "insecure flag on all interfaces", server: `host = "0.0.0.0"`, args: []string{"--insecure"}, want: "loopback"},
		{name: "insecure variable on all interfaces", server: `host = "0.0.0.0"`, env: []string{"OPENSANDBOX_INSECURE_SERVER=YES"}, want: "loopback"},
		{name: "insecure flag on all IPv6 interfaces", server: `host = "::"`, args: []string{"--insecure"}, want: "loopback"},
		{name: "insecure flag on an external address", server: fmt.Sprintf("host = %q", ext), args: []string{"--insecure"}, want: "loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(tt.server, `host = ""`) {
				t.Skip("this machine has no non-loopback IPv4 address")
			}
			p := secStart(t, tt.server, tt.env, tt.args...)
			out := p.waitRefused(t)
			if !strings.Contains(out, tt.want) {
				t.Errorf("the refusal does not mention %q:\n%s", tt.want, out)
			}
			secAssertAbsent(t, "refused start", p.store)
		})
	}
}

// TestSecurityInsecureLoopbackOnly starts sandboxd without a key in
// insecure mode (flag and variable) and by default with a key: each
// listens on loopback and nowhere else.
func TestSecurityInsecureLoopbackOnly(t *testing.T) {
	ext := secExternalIP(t)
	tests := []struct {
		name   string
		server string
		env    []string
		args   []string
	}{
		{name: "insecure flag", server: `host = "127.0.0.1"`, args: []string{"--insecure"}},
		{name: "insecure variable", server: `host = "127.0.0.1"`, env: []string{"OPENSANDBOX_INSECURE_SERVER=YES"}},
		{name: "default host with a key", server: `api_key = "` + randomHex(t, 16) + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := secStart(t, tt.server, tt.env, tt.args...)
			p.waitHealthy(t)
			if ext != "" {
				secAssertNotListening(t, ext, p.port)
			}
			if tt.args != nil || tt.env != nil {
				if !strings.Contains(p.out.String(), "SECURITY WARNING") {
					t.Errorf("insecure mode starts without a warning:\n%s", p.out)
				}
			}
		})
	}
}

// TestSecurityCORS checks that a foreign origin gets no CORS header (so a
// web page cannot drive a local sandboxd), a configured one does, and a
// server with no configured origins answers no CORS at all.
func TestSecurityCORS(t *testing.T) {
	const app = "https://app.example"
	configured := startServer(t, withTOML(fmt.Sprintf("[server]\ncors_origins = [%q]\n", app)))
	plain := startServer(t)

	preflight := func(s *Server, origin, path string) (int, http.Header) {
		status, hdr, _ := s.do(t, http.MethodOptions, path, nil, map[string]string{
			apiKeyHeader:                     "",
			"Origin":                         origin,
			"Access-Control-Request-Method":  http.MethodPost,
			"Access-Control-Request-Headers": "open-sandbox-api-key, content-type",
		})
		return status, hdr
	}
	noCORS := func(what string, hdr http.Header) {
		t.Helper()
		for k := range hdr {
			if strings.HasPrefix(strings.ToLower(k), "access-control-") {
				t.Errorf("%s: CORS header %s: %q", what, k, hdr.Get(k))
			}
		}
	}
	paths := []string{"/v1/sandboxes", "/sandboxes", "/v1/sandboxes/x/proxy/44772/command", "/health"}
	for _, origin := range []string{"https://evil.example", "null", "http://app.example", "https://app.example.evil.example", "https://app.example:8443"} {
		for _, p := range paths {
			_, hdr := preflight(configured, origin, p)
			noCORS("preflight "+p+" from "+origin, hdr)
		}
		_, hdr, _ := configured.do(t, http.MethodGet, "/v1/sandboxes", nil, map[string]string{"Origin": origin})
		noCORS("GET from "+origin, hdr)
	}
	for _, p := range paths {
		_, hdr := preflight(plain, app, p)
		noCORS("preflight "+p+" to a server without cors_origins", hdr)
	}

	// The configured origin is allowed.
	status, hdr := preflight(configured, app, "/v1/sandboxes")
	if status != http.StatusNoContent || hdr.Get("Access-Control-Allow-Origin") != app ||
		!strings.Contains(hdr.Get("Access-Control-Allow-Methods"), http.MethodPost) ||
		!strings.Contains(strings.ToLower(hdr.Get("Access-Control-Allow-Headers")), "open-sandbox-api-key") {
		t.Errorf("preflight from %s: status %d headers %v, want 204 allowing it", app, status, hdr)
	}
	_, hdr, _ = configured.do(t, http.MethodGet, "/v1/sandboxes", nil, map[string]string{"Origin": app})
	if hdr.Get("Access-Control-Allow-Origin") != app {
		t.Errorf("GET from %s: Access-Control-Allow-Origin %q", app, hdr.Get("Access-Control-Allow-Origin"))
	}
}

// TestSecurityBodyLimit sends JSON bodies over [server] max_body_bytes
// (default 1 MiB), with and without a length, and checks the 413 envelope
// and that nothing was created; the same request within the limit works.
func TestSecurityBodyLimit(t *testing.T) {
	s := startServer(t)
	big := strings.Repeat("a", 1<<20)
	withEnv := func(v string) any { return busyboxWith(map[string]any{"env": map[string]string{"PAD": v}}) }

	status, hdr, body := s.do(t, http.MethodPost, "/v1/sandboxes", withEnv(big), nil)
	secWantError(t, "create with a 1 MiB env", status, hdr, body, http.StatusRequestEntityTooLarge, "GENERAL::")
	status, hdr, body = s.do(t, http.MethodPatch, "/v1/sandboxes/some-id/metadata", map[string]string{"k": big}, nil)
	secWantError(t, "PATCH metadata with 1 MiB", status, hdr, body, http.StatusRequestEntityTooLarge, "GENERAL::")
	status, hdr, body = s.do(t, http.MethodPost, "/v1/sandboxes/some-id/renew-expiration", map[string]string{"expiresAt": big}, nil)
	secWantError(t, "renew with 1 MiB", status, hdr, body, http.StatusRequestEntityTooLarge, "GENERAL::")

	// Chunked: no Content-Length to check up front.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/v1/sandboxes",
		io.MultiReader(strings.NewReader(`{"env":{"PAD":"`), strings.NewReader(big), strings.NewReader(`"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if req.ContentLength != 0 {
		t.Fatalf("the request has a length (%d); want it chunked", req.ContentLength)
	}
	req.Header.Set(apiKeyHeader, s.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	secWantError(t, "chunked create over the limit", resp.StatusCode, resp.Header, data, http.StatusRequestEntityTooLarge, "GENERAL::")

	if n := secInstanceContainers(t, s); n != 0 {
		t.Errorf("oversized requests left %d container(s)", n)
	}

	// Control: the same request within the limit creates the sandbox.
	var created sandboxJSON
	s.doJSON(t, http.MethodPost, "/v1/sandboxes", withEnv("small"), http.StatusAccepted, &created)
	s.doJSON(t, http.MethodDelete, sandboxPath(created.ID), nil, http.StatusNoContent, nil)
}

// secRawRequest sends one request as a browser would: body, headers and
// the Host header as given, no API key unless in hdr.
func secRawRequest(t *testing.T, method, url, host, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// TestSecurityBrowserRequests replays what a web page can send to a local
// sandboxd without a CORS preflight: a text/plain create (a "simple"
// request), requests with a foreign Origin, and, in insecure mode, a
// request to a DNS name the page controls that resolves to loopback
// (rebinding). Each is refused and nothing is created or run; the same
// requests as the SDKs send them work.
func TestSecurityBrowserRequests(t *testing.T) {
	s := startServer(t)
	create, err := json.Marshal(busyboxRequest())
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{apiKeyHeader: s.APIKey}
	withKey := func(h map[string]string) map[string]string {
		for k, v := range key {
			h[k] = v
		}
		return h
	}
	status, hdr, body := secRawRequest(t, http.MethodPost, s.URL+"/v1/sandboxes", "", string(create), withKey(map[string]string{"Content-Type": "text/plain;charset=UTF-8"}))
	secWantError(t, "text/plain create", status, hdr, body, http.StatusUnsupportedMediaType, "GENERAL::")
	status, hdr, body = secRawRequest(t, http.MethodPost, s.URL+"/v1/sandboxes", "", string(create), withKey(map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}))
	secWantError(t, "foreign-Origin create", status, hdr, body, http.StatusForbidden, "GENERAL::")
	if n := secInstanceContainers(t, s); n != 0 {
		t.Fatalf("refused creates made %d container(s)", n)
	}

	box := newExecdBox(t, s, busyboxRequest())
	cmd := `{"command":"touch /tmp/ran"}`
	status, hdr, body = secRawRequest(t, http.MethodPost, s.URL+box.path("/command"), "", cmd, withKey(map[string]string{"Content-Type": "text/plain"}))
	secWantError(t, "text/plain command", status, hdr, body, http.StatusUnsupportedMediaType, "GENERAL::")
	status, hdr, body = secRawRequest(t, http.MethodPost, s.URL+box.path("/command"), "", cmd, withKey(map[string]string{"Content-Type": "application/json", "Origin": "null"}))
	secWantError(t, "foreign-Origin command", status, hdr, body, http.StatusForbidden, "GENERAL::")
	if out, _ := box.secShell(t, "test -e /tmp/ran && echo ran || echo absent"); out != "absent" {
		t.Errorf("a refused command ran: %s", out)
	}
	// Bodiless POSTs as the SDKs send them (no Content-Type) still work.
	for _, p := range []string{"/pause", "/resume"} {
		if status, _, body := secRawRequest(t, http.MethodPost, s.URL+sandboxPath(box.ID, p), "", "", key); status != http.StatusAccepted {
			t.Errorf("bodiless POST %s: %d %s", p, status, body)
		}
		if p == "/pause" {
			waitState(t, s, box.ID, "Paused")
		}
	}
	waitState(t, s, box.ID, "Running")

	// Insecure mode: the Host must name loopback (or the configured host).
	p := secStart(t, `host = "127.0.0.1"`, nil, "--insecure")
	p.waitHealthy(t)
	open := fmt.Sprintf("http://127.0.0.1:%d", p.port)
	status, hdr, body = secRawRequest(t, http.MethodPost, open+"/v1/sandboxes", fmt.Sprintf("rebind.attacker.example:%d", p.port), string(create), map[string]string{"Content-Type": "application/json"})
	secWantError(t, "rebinding Host", status, hdr, body, http.StatusForbidden, "GENERAL::")
	for _, host := range []string{"", fmt.Sprintf("localhost:%d", p.port)} {
		if status, _, body := secRawRequest(t, http.MethodGet, open+"/v1/sandboxes", host, "", nil); status != http.StatusOK {
			t.Errorf("insecure server with Host %q: %d %s", host, status, body)
		}
	}
}

// TestSecurityCreateValidation sends a timeout that overflows (it used to
// make the sandbox expire at once) and malformed image references (they
// used to be 500s from the engine): 400 with the envelope, nothing made.
func TestSecurityCreateValidation(t *testing.T) {
	s := startServer(t)
	for name, req := range map[string]any{
		"overflowing timeout": busyboxWith(map[string]any{"timeout": json.Number("9223372036854775807")}),
		"upper-case image":    busyboxWith(map[string]any{"image": map[string]any{"uri": "SandboxD-Test/BusyBox:latest"}}),
		"malformed image":     busyboxWith(map[string]any{"image": map[string]any{"uri": "busybox:la:test"}}),
	} {
		status, hdr, body := s.do(t, http.MethodPost, "/v1/sandboxes", req, nil)
		secWantError(t, name, status, hdr, body, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
	}
	if n := secInstanceContainers(t, s); n != 0 {
		t.Errorf("refused creates made %d container(s)", n)
	}
}

// TestSecurityAccessLog checks the access log: one INFO line per request
// with method, path, status, bytes, duration, sandbox and request id, and
// neither credentials, the query, nor file contents; none with
// [log] access = false.
func TestSecurityAccessLog(t *testing.T) {
	s := startServer(t)
	box := newExecdBox(t, s, busyboxRequest())
	const content = "file-content-not-for-logs"
	uploadFile(t, s, box.ID, "/tmp/secret.txt", content)
	if got := downloadFile(t, s, box.ID, "/tmp/secret.txt"); got != content {
		t.Fatalf("download = %q", got)
	}
	box.secShell(t, "echo command-output-not-for-logs")
	wants := []string{
		"level=INFO msg=request", "method=POST path=/v1/sandboxes status=202",
		"path=/sandboxes/" + box.ID + "/proxy/44772/command status=200", "path=/sandboxes/" + box.ID + "/proxy/44772/files/download",
		"sandbox_id=" + box.ID, "bytes=", "duration_ms=", "request_id=",
	}
	// A proxied answer goes out before its line is written: wait a little.
	var log string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(pollEvery) {
		data, err := os.ReadFile(s.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		log = string(data)
		if !slices.ContainsFunc(wants, func(w string) bool { return !strings.Contains(log, w) }) || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range wants {
		if !strings.Contains(log, want) {
			t.Errorf("access log lacks %q", want)
		}
	}
	for _, secret := range []string{s.APIKey, box.Headers[execdTokenHeader], content, "command-output-not-for-logs", "secret.txt"} {
		if strings.Contains(log, secret) {
			t.Errorf("sandboxd's log holds %q", secret)
		}
	}

	quiet := startServer(t, withTOML("[log]\naccess = false\n"))
	quiet.doJSON(t, http.MethodGet, "/v1/sandboxes", nil, http.StatusOK, nil)
	if data, err := os.ReadFile(quiet.LogPath); err != nil || strings.Contains(string(data), "msg=request") {
		t.Errorf("access lines with access = false (%v):\n%s", err, data)
	}
}
