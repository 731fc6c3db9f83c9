package api

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
)

func TestProxyAuthorization(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	other := e.create(t)
	own, foreign := e.mgr.Sandboxes.Token(id), e.mgr.Sandboxes.Token(other)
	tests := []struct {
		name    string
		path    string
		headers map[string]string
		status  int
		code    string // for 401s
	}{
		{"no credentials", "/command", map[string]string{headerAPIKey: ""}, 401, "MISSING_API_KEY"},
		{"another sandbox's token", "/command", map[string]string{headerAPIKey: "", lifecycle.TokenHeader: foreign}, 401, "INVALID_API_KEY"},
		{"garbage token", "/command", map[string]string{headerAPIKey: "", lifecycle.TokenHeader: "garbage"}, 401, "INVALID_API_KEY"},
		{"token in the query string", "/command?" + lifecycle.TokenHeader + "=" + own + "&token=" + own, map[string]string{headerAPIKey: ""}, 401, "MISSING_API_KEY"},
		{"token in a cookie", "/command", map[string]string{headerAPIKey: "", "Cookie": lifecycle.TokenHeader + "=" + own}, 401, "MISSING_API_KEY"},
		{"token as a bearer", "/command", map[string]string{headerAPIKey: "", "Authorization": "Bearer " + own}, 401, "MISSING_API_KEY"},
		{"wrong API key", "/command", map[string]string{headerAPIKey: "wrong"}, 401, "INVALID_API_KEY"},
		{"own token", "/command", map[string]string{headerAPIKey: "", lifecycle.TokenHeader: own}, 200, ""},
		{"API key", "/command", nil, 200, ""},
		{"API key in the token header", "/command", map[string]string{headerAPIKey: "", lifecycle.TokenHeader: testKey}, 200, ""},
	}
	for _, tt := range tests {
		for _, prefix := range []string{"", "/v1"} {
			t.Run(tt.name+" "+prefix, func(t *testing.T) {
				before := e.agent.count()
				r := e.do(t, "POST", prefix+"/sandboxes/"+id+"/proxy/44772"+tt.path, `{"command":"ls"}`, tt.headers)
				if tt.code != "" {
					wantError(t, r, tt.status, tt.code)
					if e.agent.count() != before {
						t.Error("a refused request reached the agent")
					}
					return
				}
				if r.status != tt.status {
					t.Fatalf("status = %d %s", r.status, r.body)
				}
				if e.agent.count() != before+1 {
					t.Fatal("the request did not reach the agent")
				}
			})
		}
	}
	// A token opens only its own sandbox, also for one that does not exist.
	r := e.do(t, "GET", "/sandboxes/nope/proxy/44772/ping", "", map[string]string{headerAPIKey: "", lifecycle.TokenHeader: own})
	wantError(t, r, http.StatusUnauthorized, "INVALID_API_KEY")
	r = e.do(t, "GET", "/sandboxes/nope/proxy/44772/ping", "", nil)
	wantError(t, r, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
}

func TestProxyForwarding(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	tok := e.mgr.Sandboxes.Token(id)
	tests := []struct {
		name     string
		path     string // after /sandboxes/{id}/proxy/
		wantURI  string // what the agent sees
		wantHost string
	}{
		{"execd", "44772/command?x=1&y=a%20b", "/command?x=1&y=a%20b", "127.0.0.1:44772"},
		{"execd root", "44772", "/", "127.0.0.1:44772"},
		{"execd encoded path", "44772/files/a%2Fb", "/files/a%2Fb", "127.0.0.1:44772"},
		{"other port", "8000/app/index.html?q=1", "/proxy/8000/app/index.html?q=1", "127.0.0.1:8000"},
		{"other port root", "3000", "/proxy/3000", "127.0.0.1:3000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, "PUT", "/v1/sandboxes/"+id+"/proxy/"+tt.path, `{"k":"v"}`, map[string]string{
				headerAPIKey:               testKey,
				lifecycle.TokenHeader:      tok,
				"Cookie":                   "session=secret",
				"Authorization":            "Bearer secret",
				lifecycle.EgressAuthHeader: "egress-secret",
				"X-Custom":                 "kept",
			})
			if r.status != 200 {
				t.Fatalf("status = %d %s", r.status, r.body)
			}
			if want := `agent PUT ` + tt.wantURI + ` {"k":"v"}`; string(r.body) != want {
				t.Errorf("agent answered %q, want %q", r.body, want)
			}
			got := e.agent.last(t)
			for _, h := range []string{lifecycle.TokenHeader, headerAPIKey, "Cookie", "Authorization", lifecycle.EgressAuthHeader} {
				if v := got.Header.Get(h); v != "" {
					t.Errorf("header %s = %q reached the sandbox", h, v)
				}
			}
			if got.Header.Get("X-Custom") != "kept" || got.Header.Get("X-Forwarded-For") == "" {
				t.Errorf("forwarded headers = %v", got.Header)
			}
			if got.Host != tt.wantHost {
				t.Errorf("Host = %q, want %q", got.Host, tt.wantHost)
			}
		})
	}
}

func TestProxyPortAndState(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	wantError(t, e.do(t, "GET", "/sandboxes/"+id+"/proxy/0/x", "", nil), http.StatusBadRequest, "DOCKER::INVALID_PORT")
	wantError(t, e.do(t, "GET", "/sandboxes/"+id+"/proxy/70000/x", "", nil), http.StatusBadRequest, "DOCKER::INVALID_PORT")
	if r := e.do(t, "POST", "/v1/sandboxes/"+id+"/pause", "", nil); r.status != 202 {
		t.Fatal(r.status)
	}
	wantError(t, e.do(t, "GET", "/sandboxes/"+id+"/proxy/44772/ping", "", nil), http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
}

func TestInsecureModeOpensEverything(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Server.APIKey = "" })
	id := e.create(t)
	noKey := map[string]string{headerAPIKey: ""}
	if r := e.do(t, "GET", "/v1/sandboxes", "", noKey); r.status != 200 {
		t.Errorf("list without a key in insecure mode = %d", r.status)
	}
	if r := e.do(t, "GET", "/sandboxes/"+id+"/proxy/44772/ping", "", noKey); r.status != 200 {
		t.Errorf("proxy without credentials in insecure mode = %d", r.status)
	}
}

// multipartBody builds an upload; parts are (field name, content) pairs.
func multipartBody(t *testing.T, parts ...[2]string) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		switch p[0] {
		case "file":
			h.Set("Content-Disposition", `form-data; name="file"; filename="blob"`)
			h.Set("Content-Type", "application/octet-stream")
		case "metadata":
			h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
			h.Set("Content-Type", "application/json")
		default: // execd counts only file parts
			h.Set("Content-Disposition", `form-data; name="metadata"`)
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = pw.Write([]byte(p[1]))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String(), w.FormDataContentType()
}

// TestTransfersOfRunningSandboxGoToAgent: uploads and downloads of a
// running sandbox are the agent's, body and headers as sent; Docker's
// archive API is not touched. A paused sandbox is refused.
func TestTransfersOfRunningSandboxGoToAgent(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	base := "/sandboxes/" + id + "/proxy/44772"
	puts := e.rt.Puts()
	body, ct := multipartBody(t, [2]string{"metadata", `{"path":"/tmp/a"}`}, [2]string{"file", "data"})
	r := e.do(t, "POST", base+"/files/upload", body, map[string]string{"Content-Type": ct})
	if r.status != 200 || !strings.HasPrefix(string(r.body), "agent POST /files/upload --") || !strings.Contains(string(r.body), "data") {
		t.Errorf("upload = %d %q; want the agent's answer", r.status, r.body)
	}
	r = e.do(t, "GET", base+"/files/download?path=/tmp/a&offset=2", "", map[string]string{"Range": "bytes=1-"})
	if r.status != 200 || string(r.body) != "agent GET /files/download?path=/tmp/a&offset=2 " {
		t.Errorf("download = %d %q; want the agent's answer", r.status, r.body)
	}
	if got := e.agent.last(t).Header.Get("Range"); got != "bytes=1-" {
		t.Errorf("the agent saw Range %q", got)
	}
	if e.rt.Puts() != puts {
		t.Error("an archive write reached a running sandbox")
	}
	if r := e.do(t, "POST", "/v1/sandboxes/"+id+"/pause", "", nil); r.status != 202 {
		t.Fatal(r.status)
	}
	n := e.agent.count()
	wantError(t, e.do(t, "GET", base+"/files/download?path=/tmp/a", "", nil), http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
	wantError(t, e.do(t, "POST", base+"/files/upload", body, map[string]string{"Content-Type": ct}), http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
	if e.agent.count() != n {
		t.Error("a transfer reached the agent of a paused sandbox")
	}
}

// stop makes a sandbox's container exited: its files move through the
// archive API.
func (e *env) stop(t *testing.T, id string) {
	e.rt.Set(t, "sandbox-"+id, func(c *runtime.Container) { c.State = runtime.StateExited })
}

// TestUploadDownload covers the archive API's path, for a stopped sandbox.
func TestUploadDownload(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	e.stop(t, id)
	tok := e.mgr.Sandboxes.Token(id)
	base := "/sandboxes/" + id + "/proxy/44772"
	auth := map[string]string{headerAPIKey: "", lifecycle.TokenHeader: tok}
	upload := func(parts ...[2]string) response {
		body, ct := multipartBody(t, parts...)
		h := map[string]string{"Content-Type": ct}
		for k, v := range auth {
			h[k] = v
		}
		return e.do(t, "POST", base+"/files/upload", body, h)
	}
	tests := []struct {
		name   string
		parts  [][2]string
		status int
		code   string
		files  map[string]string // path → content afterwards
	}{
		{"metadata first", [][2]string{{"metadata", `{"path":"/tmp/a.txt"}`}, {"file", "0123456789"}}, 200, "", map[string]string{"/tmp/a.txt": "0123456789"}},
		{"file first", [][2]string{{"file", "bbb"}, {"metadata", `{"path":"/tmp/b.txt","mode":600}`}}, 200, "", map[string]string{"/tmp/b.txt": "bbb"}},
		{"two files", [][2]string{{"metadata", `{"path":"/tmp/c1"}`}, {"file", "c1"}, {"metadata", `{"path":"/tmp/c2"}`}, {"file", "c2"}}, 200, "", map[string]string{"/tmp/c1": "c1", "/tmp/c2": "c2"}},
		{"metadata without file", [][2]string{{"metadata", `{"path":"/tmp/d"}`}}, 400, "INVALID_FILE_CONTENT", nil},
		{"no parts", nil, 400, "INVALID_FILE_METADATA", nil},
		{"metadata as a plain field", [][2]string{{"field", `{"path":"/tmp/f"}`}, {"file", "x"}}, 400, "INVALID_FILE_METADATA", nil},
		{"more files than metadata", [][2]string{{"metadata", `{"path":"/tmp/g"}`}, {"file", "x"}, {"file", "y"}}, 400, "INVALID_FILE", nil},
		{"bad metadata", [][2]string{{"metadata", `not json`}, {"file", "x"}}, 400, "INVALID_FILE_METADATA", nil},
		{"relative path", [][2]string{{"metadata", `{"path":"rel"}`}, {"file", "x"}}, 400, "INVALID_FILE_METADATA", nil},
		{"bad mode", [][2]string{{"metadata", `{"path":"/tmp/e","mode":999}`}, {"file", "x"}}, 400, "INVALID_FILE_METADATA", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := upload(tt.parts...)
			if tt.code != "" {
				wantError(t, r, tt.status, tt.code)
				return
			}
			if r.status != tt.status {
				t.Fatalf("upload = %d %s", r.status, r.body)
			}
			for p, want := range tt.files {
				got := e.do(t, "GET", base+"/files/download?path="+p, "", auth)
				if got.status != 200 || string(got.body) != want {
					t.Errorf("download %s = %d %q, want %q", p, got.status, got.body, want)
				}
			}
		})
	}
	if r := e.do(t, "POST", base+"/files/upload", "plain", auth); r.status != 400 {
		t.Errorf("non-multipart upload = %d", r.status)
	}

	r := e.do(t, "GET", base+"/files/download?path=/tmp/a.txt", "", auth)
	if r.status != 200 || string(r.body) != "0123456789" || r.header.Get("Content-Length") != "10" || !strings.Contains(r.header.Get("Content-Disposition"), `filename=a.txt`) {
		t.Errorf("download = %d %q %v", r.status, r.body, r.header)
	}
	// Ranges and lines would make dockerd read what comes before them.
	for _, q := range []struct{ query, rng string }{{"", "bytes=1-2"}, {"&offset=1", ""}, {"&limit=1", ""}} {
		h := map[string]string{"Range": q.rng}
		for k, v := range auth {
			h[k] = v
		}
		wantError(t, e.do(t, "GET", base+"/files/download?path=/tmp/a.txt"+q.query, "", h), http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
	}
	wantError(t, e.do(t, "GET", base+"/files/download?path=/tmp/missing", "", auth), http.StatusNotFound, "FILE_NOT_FOUND")
	wantError(t, e.do(t, "GET", base+"/files/download", "", auth), http.StatusBadRequest, "MISSING_QUERY")
	wantError(t, e.do(t, "GET", base+"/files/download?path=/tmp/a.txt", "", map[string]string{headerAPIKey: ""}), http.StatusUnauthorized, "MISSING_API_KEY")
}

func TestProxyRest(t *testing.T) {
	tests := []struct{ escaped, port, want string }{
		{"/sandboxes/a/proxy/44772/command", "44772", "/command"},
		{"/v1/sandboxes/a/proxy/44772", "44772", ""},
		{"/sandboxes/a/proxy/8000/x%2Fy?z", "8000", "/x%2Fy?z"},
		{"/sandboxes/a/other", "1", ""},
	}
	for _, tt := range tests {
		if got := proxyRest(tt.escaped, tt.port); got != tt.want {
			t.Errorf("proxyRest(%q, %q) = %q, want %q", tt.escaped, tt.port, got, tt.want)
		}
	}
}

// proxyRoute takes exactly the paths the router's proxy patterns took.
func TestProxyRouteMatchesRouterPatterns(t *testing.T) {
	router := mux.NewRouter()
	router.UseEncodedPath()
	router.SkipClean(true)
	for _, prefix := range []string{"", "/v1"} {
		router.Handle(prefix+"/sandboxes/{id}/proxy/{port:[0-9]+}", http.NotFoundHandler())
		router.Handle(prefix+"/sandboxes/{id}/proxy/{port:[0-9]+}/{rest:.*}", http.NotFoundHandler())
	}
	for _, p := range []string{
		"/sandboxes/a/proxy/44772", "/sandboxes/a/proxy/44772/", "/sandboxes/a/proxy/44772/command",
		"/v1/sandboxes/a/proxy/8000/x/y", "/sandboxes/a%2Fb/proxy/1/z", "/sandboxes/a/proxy/44772//ping",
		"/sandboxes/a/proxy/0", "/sandboxes/a/proxy/99999999999/x", "/sandboxes/a/proxy/44a72", "/sandboxes/a/proxy/",
		"/sandboxes/a/proxy", "/sandboxes//proxy/1", "/sandboxes/a/b/proxy/1", "/v1sandboxes/a/proxy/1", "/v1/v1/sandboxes/a/proxy/1",
		"/sandboxes/a/proxy/-1", "/sandboxes/a/proxy/+1", "/sandboxes/a", "/sandboxes/a/pause", "/health", "/", "",
		"/sandboxes/a/proxy/1%2F2", "/SANDBOXES/a/proxy/1", "/sandboxes/a/Proxy/1",
	} {
		var m mux.RouteMatch
		u := &url.URL{Path: p}
		if raw, err := url.PathUnescape(p); err == nil {
			u = &url.URL{Path: raw, RawPath: p}
		}
		want := router.Match(&http.Request{Method: http.MethodGet, URL: u}, &m)
		id, port, got := proxyRoute(u.EscapedPath())
		if got != want {
			t.Errorf("%q: proxyRoute %v, router %v", p, got, want)
			continue
		}
		if got && (id != m.Vars["id"] || port != m.Vars["port"]) {
			t.Errorf("%q: proxyRoute %q %q, router %v", p, id, port, m.Vars)
		}
	}
}

// flushCounter is a ResponseWriter that counts flushes.
type flushCounter struct {
	http.ResponseWriter
	flushes int
}

func (f *flushCounter) Flush() { f.flushes++ }

// A response of known length is flushed only while part of its body is
// out; one of unknown length at every flush, as ReverseProxy asks.
func TestProxyWriterFlushes(t *testing.T) {
	for _, tt := range []struct {
		name   string
		length string
		writes []string
		want   []int // flushes after the headers and after each write
	}{
		{"whole at once", "5", []string{"hello"}, []int{0, 0}},
		{"empty", "0", nil, []int{0}},
		{"in pieces", "5", []string{"he", "llo"}, []int{0, 1, 1}},
		{"unknown length", "", []string{"he", "llo"}, []int{1, 2, 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fc := &flushCounter{ResponseWriter: httptest.NewRecorder()}
			w := &proxyWriter{ResponseWriter: fc, length: -1}
			if tt.length != "" {
				w.Header().Set("Content-Length", tt.length)
			}
			w.WriteHeader(http.StatusOK)
			rc := http.NewResponseController(w)
			var got []int
			for i := 0; ; i++ {
				if err := rc.Flush(); err != nil {
					t.Fatal(err)
				}
				got = append(got, fc.flushes)
				if i == len(tt.writes) {
					break
				}
				_, _ = w.Write([]byte(tt.writes[i]))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("flushes %v, want %v", got, tt.want)
			}
		})
	}
}

// A body cut short of its Content-Length never reaches the agent.
func TestProxyShortBody(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	before := e.agent.count()
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /sandboxes/%s/proxy/44772/command HTTP/1.1\r\nHost: x\r\n%s: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"command\":", id, headerAPIKey, testKey)
	_ = conn.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), codeInvalidRequestBody) {
		t.Errorf("status %d %s", resp.StatusCode, body)
	}
	if e.agent.count() != before {
		t.Error("the cut request reached the agent")
	}
}

// logGate is a log handler whose access log line for a proxied request
// waits until the client has its answer, and reports whether it came.
type logGate struct {
	answered chan struct{}
	logged   chan bool
}

func (g logGate) Enabled(context.Context, slog.Level) bool { return true }
func (g logGate) WithAttrs([]slog.Attr) slog.Handler       { return g }
func (g logGate) WithGroup(string) slog.Handler            { return g }
func (g logGate) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "request" {
		return nil
	}
	select {
	case <-g.answered:
		g.logged <- true
	case <-time.After(5 * time.Second):
		g.logged <- false
	}
	return nil
}

// A proxied answer of known length reaches the client before sandboxd
// writes the request's access log line: the log is not on a command's path.
func TestProxyAnswersBeforeLogging(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t)
	e.rt.SetAgent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "ok")
	}))
	gate := logGate{answered: make(chan struct{}), logged: make(chan bool, 1)}
	cfg := config.Default()
	cfg.Server.APIKey = testKey
	srv := httptest.NewServer(New(cfg, backendsOf(e.mgr), e.rt, slog.New(gate)))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/sandboxes/"+id+"/proxy/44772/ping", nil)
	req.Header.Set(headerAPIKey, testKey)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	close(gate.answered)
	if string(body) != "ok" {
		t.Fatalf("answer %q", body)
	}
	if !<-gate.logged {
		t.Error("the answer came only after the access log line")
	}
}
