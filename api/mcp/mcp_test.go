package mcp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// fakeAPI is a stand-in for sandboxd's API: routes answer from the test,
// and every request's key is recorded.
type fakeAPI struct {
	mu    sync.Mutex
	keys  []string
	hosts []string
	mux   *http.ServeMux
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{mux: http.NewServeMux()}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.keys = append(f.keys, r.Header.Get(headerAPIKey))
	f.hosts = append(f.hosts, r.Host)
	f.mu.Unlock()
	f.mux.ServeHTTP(w, r)
}

func (f *fakeAPI) seenKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.keys)
}

// events writes an execd event stream.
func events(w http.ResponseWriter, evs ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range evs {
		fmt.Fprint(w, e+"\n\n")
	}
}

// connect serves the tools over an in-memory transport against api and
// returns a client session.
func connect(t *testing.T, h http.Handler, opts Options) *sdk.ClientSession {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	base, _ := url.Parse(ts.URL)
	srv := New(&API{Base: base, Key: "the-key"}, opts)
	st, ct := sdk.NewInMemoryTransports()
	ctx := t.Context()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool; a protocol error fails the test.
func call(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	return res
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// structured decodes a result's structured content.
func structured[T any](t *testing.T, res *sdk.CallToolResult) T {
	t.Helper()
	var v T
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return v
}

// Upstream opensandbox-mcp's 19 tools keep their names, so prompts and
// configs written for it work; every tool says what it does and how it
// behaves.
func TestToolsList(t *testing.T) {
	cs := connect(t, newFakeAPI(), Options{})
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 || tool.Annotations == nil {
			t.Errorf("%s: description %q, annotations %v", tool.Name, tool.Description, tool.Annotations)
		}
	}
	for _, want := range []string{
		"sandbox_create", "sandbox_connect", "sandbox_kill", "sandbox_get_info", "sandbox_list", "sandbox_renew",
		"sandbox_get_metrics", "sandbox_healthcheck", "sandbox_get_endpoint", "command_run", "command_interrupt",
		"file_read", "file_write", "file_delete", "file_search", "file_create_directories", "file_delete_directories",
		"file_move", "file_replace_contents",
		"code_run", "code_context_create", "sandbox_pause", "sandbox_resume", "file_upload", "file_download",
		"snapshot_create", "snapshot_restore",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("tool %s missing from %v", want, names)
		}
	}

	// Without create, no tool makes a sandbox.
	res, err = connect(t, newFakeAPI(), Options{NoCreate: true}).ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name == "sandbox_create" || tool.Name == "snapshot_restore" {
			t.Errorf("NoCreate still lists %s", tool.Name)
		}
	}
}

// Bad arguments are tool errors the model can read, never protocol errors.
func TestBadArgumentsAreToolErrors(t *testing.T) {
	api := newFakeAPI()
	cs := connect(t, api, Options{})
	for _, tt := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"sandbox_get_info", map[string]any{}, "sandbox_id"},
		{"command_run", map[string]any{"sandbox_id": "s", "command": 5}, "command"},
		{"command_run", map[string]any{"sandbox_id": "s", "command": "  "}, "command must not be empty"},
		{"command_run", map[string]any{"sandbox_id": "s", "command": "ls", "bogus": 1}, "bogus"},
		{"file_upload", map[string]any{"sandbox_id": "s", "path": "/a", "data_base64": "!!"}, "not valid base64"},
		{"file_upload", map[string]any{"sandbox_id": "s", "path": "rel", "data_base64": ""}, "must be absolute"},
		{"sandbox_create", map[string]any{"image": "x", "auth_username": "u"}, "auth_username and auth_password must be provided together"},
		{"sandbox_get_endpoint", map[string]any{"sandbox_id": "s", "port": 70000}, "between 1 and 65535"},
		{"sandbox_renew", map[string]any{"sandbox_id": "s", "timeout_seconds": -1}, "positive"},
		{"file_read", map[string]any{"sandbox_id": "s", "path": "/a", "encoding": "latin-1"}, "not supported"},
		{"code_run", map[string]any{"sandbox_id": "s", "code": ""}, "code must not be empty"},
		{"sandbox_kill", map[string]any{"sandbox_id": ".."}, "is not an id"},
		{"command_run", map[string]any{"sandbox_id": "", "command": "id"}, "is not an id"},
		{"snapshot_restore", map[string]any{"snapshot_id": "."}, "is not an id"},
	} {
		res := call(t, cs, tt.tool, tt.args)
		if !res.IsError || !strings.Contains(text(res), tt.want) {
			t.Errorf("%s %v: isError %v, %q; want an error with %q", tt.tool, tt.args, res.IsError, text(res), tt.want)
		}
	}
	if keys := api.seenKeys(); len(keys) != 0 {
		t.Errorf("bad arguments reached the API %d times", len(keys))
	}
}

// An error of the API is a tool error naming its status and code.
func TestAPIErrorIsToolError(t *testing.T) {
	api := newFakeAPI()
	api.mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"Sandbox gone not found."}`)
	})
	res := call(t, connect(t, api, Options{}), "sandbox_get_info", map[string]any{"sandbox_id": "gone"})
	if !res.IsError || !strings.Contains(text(res), "HTTP 404") || !strings.Contains(text(res), "SANDBOX_NOT_FOUND") {
		t.Errorf("isError %v, %q", res.IsError, text(res))
	}
}

// sandbox_create sends upstream's defaults the SDKs send (timeout 600,
// entrypoint tail -f /dev/null), leaves everything else to the server's
// defaults, passes volumes through for the server to check, and waits
// until the sandbox answers.
func TestSandboxCreate(t *testing.T) {
	api := newFakeAPI()
	var body map[string]any
	pings := 0
	api.mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{"id":"sb1","status":{"state":"Running"},"entrypoint":["tail"],"createdAt":"2026-01-01T00:00:00Z"}`)
	})
	api.mux.HandleFunc("GET /sandboxes/sb1/proxy/44772/ping", func(w http.ResponseWriter, r *http.Request) {
		if pings++; pings < 3 {
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	api.mux.HandleFunc("GET /v1/sandboxes/sb1", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"sb1","image":{"uri":"busybox:latest"},"status":{"state":"Running","lastTransitionAt":"2026-01-01T00:00:00Z"},"entrypoint":["tail"],"createdAt":"2026-01-01T00:00:00Z","expiresAt":"2026-01-01T00:10:00Z","metadata":{"a":"b"}}`)
	})
	res := call(t, connect(t, api, Options{}), "sandbox_create", map[string]any{
		"image": "busybox", "health_check_polling_interval_ms": 1,
		"volumes": []any{map[string]any{"name": "h", "mountPath": "/h", "host": map[string]any{"path": "/etc"}}},
	})
	if res.IsError {
		t.Fatal(text(res))
	}
	out := structured[CreateResult](t, res)
	if out.SandboxID != "sb1" || out.Info.Image == nil || out.Info.Image.Image != "busybox:latest" || out.Info.ExpiresAt == "" || out.Info.Status.LastTransitionAt == "" || out.Info.Metadata["a"] != "b" {
		t.Errorf("result %+v", out)
	}
	if pings != 3 {
		t.Errorf("%d pings, want 3 (until the sandbox answered)", pings)
	}
	want := `{"entrypoint":["tail","-f","/dev/null"],"image":{"uri":"busybox"},"timeout":600,"volumes":[{"host":{"path":"/etc"},"mountPath":"/h","name":"h"}]}`
	if got, _ := json.Marshal(body); string(got) != want {
		t.Errorf("create body\n got %s\nwant %s", got, want)
	}
	for _, k := range api.seenKeys() {
		if k != "the-key" {
			t.Errorf("request with key %q", k)
		}
	}
}

// command_run turns execd's stream into upstream's Execution, with the
// exit code of a failed command.
func TestCommandRun(t *testing.T) {
	api := newFakeAPI()
	var body map[string]any
	api.mux.HandleFunc("POST /sandboxes/sb/proxy/44772/command", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&body)
		events(w, `{"type":"init","text":"cmd1","timestamp":1}`,
			`{"type":"stdout","text":"hello","timestamp":2}`,
			`{"type":"stdout","text":"world","timestamp":3}`,
			`{"type":"stderr","text":"oops","timestamp":4}`,
			`{"type":"error","error":{"ename":"CommandExecError","evalue":"3","traceback":["exit status 3"]},"timestamp":5}`)
	})
	res := call(t, connect(t, api, Options{}), "command_run", map[string]any{"sandbox_id": "sb", "command": "x", "timeout_seconds": 1.5, "env": map[string]string{"A": "1"}, "working_directory": "/tmp"})
	if res.IsError {
		t.Fatal(text(res))
	}
	ex := structured[Execution](t, res)
	if ex.ID != "cmd1" || ex.ExitCode == nil || *ex.ExitCode != 3 || ex.Error == nil || ex.Error.Value != "3" {
		t.Errorf("execution %+v", ex)
	}
	if len(ex.Logs.Stdout) != 1 || ex.Logs.Stdout[0].Text != "hello\nworld\n" || len(ex.Logs.Stderr) != 1 || ex.Logs.Stderr[0].Text != "oops\n" || !ex.Logs.Stderr[0].IsError {
		t.Errorf("logs %+v", ex.Logs)
	}
	if body["timeout"] != 1500.0 || body["cwd"] != "/tmp" || body["envs"].(map[string]any)["A"] != "1" {
		t.Errorf("command body %v", body)
	}
}

// Arguments that are not strings but came as JSON text (Claude Desktop
// sends some so) are taken as that JSON; strings stay strings.
func TestArgumentsAsJSONText(t *testing.T) {
	api := newFakeAPI()
	var body map[string]any
	api.mux.HandleFunc("POST /sandboxes/sb/proxy/44772/command", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&body)
		events(w, `{"type":"init","text":"c","timestamp":1}`, `{"type":"execution_complete","execution_time":1,"timestamp":2}`)
	})
	cs := connect(t, api, Options{})
	res := call(t, cs, "command_run", map[string]any{"sandbox_id": "sb", "command": "[1]", "background": "true", "timeout_seconds": "2", "env": `{"A":"1"}`})
	if res.IsError {
		t.Fatal(text(res))
	}
	if body["command"] != "[1]" || body["background"] != true || body["timeout"] != 2000.0 || body["envs"].(map[string]any)["A"] != "1" {
		t.Errorf("command body %v", body)
	}
	if res := call(t, cs, "command_run", map[string]any{"sandbox_id": "sb", "command": "x", "background": "yes"}); !res.IsError {
		t.Error("background \"yes\" was taken")
	}
}

// Long output keeps its start and end within the bound and says where the
// rest is.
func TestCommandRunClipsOutput(t *testing.T) {
	api := newFakeAPI()
	api.mux.HandleFunc("POST /sandboxes/sb/proxy/44772/command", func(w http.ResponseWriter, r *http.Request) {
		evs := []string{`{"type":"init","text":"c","timestamp":1}`, `{"type":"stdout","text":"FIRST","timestamp":1}`}
		for range 5000 {
			evs = append(evs, `{"type":"stdout","text":"`+strings.Repeat("x", 99)+`","timestamp":1}`)
		}
		evs = append(evs, `{"type":"stdout","text":"LAST","timestamp":1}`, `{"type":"execution_complete","execution_time":1,"timestamp":2}`)
		events(w, evs...)
	})
	res := call(t, connect(t, api, Options{}), "command_run", map[string]any{"sandbox_id": "sb", "command": "x"})
	ex := structured[Execution](t, res)
	out := ex.Logs.Stdout[0].Text
	if len(out) > maxStreamText+1024 || !strings.HasPrefix(out, "FIRST\n") || !strings.HasSuffix(out, "LAST\n") || !strings.Contains(out, "bytes of stdout left out") || !strings.Contains(out, "file_read") {
		t.Errorf("clipped output of %d bytes: %.200q ... %.200q", len(out), out, out[max(0, len(out)-200):])
	}
	if ex.ExitCode == nil || *ex.ExitCode != 0 || ex.Complete == nil {
		t.Errorf("execution %+v", ex)
	}
}

// code_run makes a context when none is given and returns its id, returns
// images as image content, and an exception as a tool error with its
// traceback (without terminal colours).
func TestCodeRun(t *testing.T) {
	api := newFakeAPI()
	png := []byte("\x89PNG\r\n\x1a\n\x00\xffpixels")
	var bodies []map[string]any
	api.mux.HandleFunc("POST /sandboxes/sb/proxy/44772/code/context", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"ctx1","language":"python"}`)
	})
	api.mux.HandleFunc("POST /sandboxes/sb/proxy/44772/code", func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		bodies = append(bodies, b)
		if b["code"] == "boom" {
			events(w, `{"type":"init","text":"x","timestamp":1}`,
				`{"type":"error","error":{"ename":"ZeroDivisionError","evalue":"division by zero","traceback":["\u001b[0;31mZeroDivisionError\u001b[0m","line 1"]},"timestamp":2}`)
			return
		}
		events(w, `{"type":"init","text":"x","timestamp":1}`,
			`{"type":"stdout","text":"hi\n","timestamp":1}`,
			`{"type":"execution_count","execution_count":2,"timestamp":1}`,
			`{"type":"result","results":{"text":"4"},"timestamp":1}`,
			`{"type":"result","results":{"text":"<Figure>","image/png":"`+base64.StdEncoding.EncodeToString(png)+`"},"timestamp":1}`,
			`{"type":"execution_complete","execution_time":1,"timestamp":2}`)
	})
	cs := connect(t, api, Options{})
	res := call(t, cs, "code_run", map[string]any{"sandbox_id": "sb", "code": "2+2"})
	if res.IsError {
		t.Fatal(text(res))
	}
	out := structured[CodeResult](t, res)
	if out.ContextID != "ctx1" || out.Stdout != "hi\n" || out.ExecutionCount != 2 || len(out.Results) != 2 || out.Results[0]["text/plain"] != "4" {
		t.Errorf("result %+v", out)
	}
	var imgs []*sdk.ImageContent
	for _, c := range res.Content {
		if img, ok := c.(*sdk.ImageContent); ok {
			imgs = append(imgs, img)
		}
	}
	if len(imgs) != 1 || !bytes.Equal(imgs[0].Data, png) || imgs[0].MIMEType != "image/png" {
		t.Errorf("images %v", imgs)
	}

	res = call(t, cs, "code_run", map[string]any{"sandbox_id": "sb", "code": "boom", "context_id": "ctx1"})
	if !res.IsError || !strings.Contains(text(res), "ZeroDivisionError: division by zero") || strings.Contains(text(res), "\x1b") {
		t.Errorf("isError %v, %q", res.IsError, text(res))
	}
	if ctx := bodies[1]["context"].(map[string]any); ctx["id"] != "ctx1" || ctx["language"] != "python" {
		t.Errorf("second run's context %v", ctx)
	}
}

// file_upload and file_download carry any bytes; download reads by range
// and says when the file goes on.
func TestUploadDownloadBinary(t *testing.T) {
	api := newFakeAPI()
	files := map[string][]byte{}
	api.mux.HandleFunc("POST /sandboxes/sb/proxy/44772/files/upload", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			t.Error(err)
			return
		}
		var meta struct {
			Path string `json:"path"`
			Mode int    `json:"mode"`
		}
		mf, _ := r.MultipartForm.File["metadata"][0].Open()
		_ = json.NewDecoder(mf).Decode(&meta)
		f, _ := r.MultipartForm.File["file"][0].Open()
		files[meta.Path], _ = io.ReadAll(f)
		if meta.Mode != 644 {
			t.Errorf("mode %d", meta.Mode)
		}
	})
	api.mux.HandleFunc("GET /sandboxes/sb/proxy/44772/files/download", func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[r.URL.Query().Get("path")]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"code":"FILE_NOT_FOUND","message":"no such file"}`)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	})
	cs := connect(t, api, Options{})
	data := make([]byte, 3000)
	for i := range data {
		data[i] = byte(i)
	}
	res := call(t, cs, "file_upload", map[string]any{"sandbox_id": "sb", "path": "/bin.dat", "data_base64": base64.StdEncoding.EncodeToString(data)})
	if res.IsError || !bytes.Equal(files["/bin.dat"], data) {
		t.Fatalf("upload: %s", text(res))
	}
	var got []byte
	for off := int64(0); ; {
		res = call(t, cs, "file_download", map[string]any{"sandbox_id": "sb", "path": "/bin.dat", "offset": off, "max_bytes": 1024})
		out := structured[FileDownloadResult](t, res)
		part, _ := base64.StdEncoding.DecodeString(out.ContentBase64)
		got = append(got, part...)
		if out.TotalSize != 3000 || out.Offset != off {
			t.Fatalf("download %+v", out)
		}
		if !out.Truncated {
			break
		}
		off += out.Size
	}
	if !bytes.Equal(got, data) {
		t.Errorf("downloaded %d bytes, not the uploaded ones", len(got))
	}
	res = call(t, cs, "file_download", map[string]any{"sandbox_id": "sb", "path": "/missing"})
	if !res.IsError || !strings.Contains(text(res), "FILE_NOT_FOUND") {
		t.Errorf("missing file: %v %q", res.IsError, text(res))
	}
}

// file_read cuts long text and names the range to read on with.
func TestFileReadBounded(t *testing.T) {
	api := newFakeAPI()
	content := strings.Repeat("é", maxReadText) // two bytes each
	api.mux.HandleFunc("GET /sandboxes/sb/proxy/44772/files/download", func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(content))
	})
	cs := connect(t, api, Options{})
	out := structured[FileReadResult](t, call(t, cs, "file_read", map[string]any{"sandbox_id": "sb", "path": "/t"}))
	want := fmt.Sprintf(`range_header "bytes=%d-"`, maxReadText)
	if !out.Truncated || !strings.Contains(out.Content, want) {
		t.Errorf("truncated %v, tail %q", out.Truncated, out.Content[len(out.Content)-80:])
	}
	out = structured[FileReadResult](t, call(t, cs, "file_read", map[string]any{"sandbox_id": "sb", "path": "/t", "range_header": "bytes=2-5"}))
	if out.Content != "éé" || out.Truncated {
		t.Errorf("range read %+v", out)
	}
}

// Over HTTP, each call reaches the API with the key its own request
// carried (bearer or the SDKs' header), never with another; the endpoint
// names the address the client used.
func TestHandlerUsesCallersKey(t *testing.T) {
	api := newFakeAPI()
	api.mux.HandleFunc("GET /v1/sandboxes/{id}/endpoints/{port}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"endpoint":"%s/sandboxes/%s/proxy/%s","headers":{"X-Token":"t"}}`, r.Host, r.PathValue("id"), r.PathValue("port"))
	})
	ts := httptest.NewServer(Handler(api, Options{}, nil))
	defer ts.Close()
	for _, tt := range []struct {
		header, value, want string
	}{
		{"Authorization", "Bearer key-a", "key-a"},
		{headerAPIKey, "key-b", "key-b"},
		{"", "", ""},
	} {
		hc := &http.Client{Transport: headerTransport{tt.header, tt.value}}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: hc}, nil)
		if err != nil {
			t.Fatal(err)
		}
		res := call(t, cs, "sandbox_get_endpoint", map[string]any{"sandbox_id": "sb", "port": 8000})
		cs.Close()
		keys := api.seenKeys()
		if res.IsError || keys[len(keys)-1] != tt.want {
			t.Errorf("%s %q: API saw key %q (want %q); %s", tt.header, tt.value, keys[len(keys)-1], tt.want, text(res))
		}
		out := structured[EndpointResult](t, res)
		host := strings.TrimPrefix(ts.URL, "http://")
		if out.URL != "http://"+host+"/sandboxes/sb/proxy/8000" || out.Headers["X-Token"] != "t" {
			t.Errorf("endpoint %+v", out)
		}
	}
}

// headerTransport adds one header to every request.
type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.name != "" {
		r = r.Clone(r.Context())
		r.Header.Set(h.name, h.value)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// The in-process transport streams: the first event arrives while the
// handler still runs, and closing the body frees a handler that writes on.
func TestHandlerTransportStreams(t *testing.T) {
	release := make(chan struct{})
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "1")
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, "first\n")
		<-release
		var err error
		for err == nil {
			_, err = w.Write([]byte("more\n"))
		}
		done <- err
	})
	res, err := (&http.Client{Transport: handlerTransport{h}}).Get("http://in-process/x")
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusTeapot || res.Header.Get("X-A") != "1" {
		t.Errorf("status %d, header %v", res.StatusCode, res.Header)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "first\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	close(release)
	res.Body.Close()
	if err := <-done; err == nil {
		t.Error("the handler's writes did not fail after the body was closed")
	}
}

// TestCodeRunBoundsResults: code in the sandbox decides how many results it
// displays; a run keeps at most maxResultBytes of them, however many come.
func TestCodeRunBoundsResults(t *testing.T) {
	api := newFakeAPI()
	img := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, 1<<20))
	obj := `{"k":[` + strings.Repeat(`"xxxxxxxxxxxxxxxx",`, 1<<16) + `"x"]}`
	api.mux.HandleFunc("POST /sandboxes/sb/proxy/44772/code", func(w http.ResponseWriter, r *http.Request) {
		evs := []string{`{"type":"init","text":"x","timestamp":1}`}
		for range 24 {
			evs = append(evs, `{"type":"result","results":{"image/png":"`+img+`"},"timestamp":1}`,
				`{"type":"result","results":{"application/json":`+obj+`},"timestamp":1}`)
		}
		events(w, append(evs, `{"type":"execution_complete","execution_time":1,"timestamp":2}`)...)
	})
	res := call(t, connect(t, api, Options{}), "code_run", map[string]any{"sandbox_id": "sb", "code": "x", "context_id": "c"})
	if res.IsError {
		t.Fatal(text(res))
	}
	out := structured[CodeResult](t, res)
	held := 0
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.ImageContent:
			held += len(c.Data)
		case *sdk.TextContent:
			held += len(c.Text)
		}
	}
	if held > maxResultBytes+1<<20 || out.OmittedResults == 0 || len(out.Results) == 0 {
		t.Errorf("held %d bytes of results, %d kept, %d omitted", held, len(out.Results), out.OmittedResults)
	}
}

// TestStreamSkipsOverlongEvents: an event line longer than maxEventLine (a
// replaced agent can send one of any length) is read away and left out;
// the run goes on and nothing of it is held.
func TestStreamSkipsOverlongEvents(t *testing.T) {
	api := newFakeAPI()
	api.mux.HandleFunc("POST /sandboxes/sb/proxy/44772/command", func(w http.ResponseWriter, r *http.Request) {
		events(w, `{"type":"init","text":"c","timestamp":1}`, `{"type":"stdout","text":"FIRST\n","timestamp":1}`,
			`{"type":"stdout","text":"`+strings.Repeat("x", 40<<20)+`","timestamp":1}`,
			`{"type":"stdout","text":"LAST\n","timestamp":1}`, `{"type":"execution_complete","execution_time":1,"timestamp":2}`)
	})
	res := call(t, connect(t, api, Options{}), "command_run", map[string]any{"sandbox_id": "sb", "command": "x"})
	if res.IsError {
		t.Fatal(text(res))
	}
	ex := structured[Execution](t, res)
	if out := ex.Logs.Stdout[0].Text; out != "FIRST\nLAST\n" || ex.Complete == nil {
		t.Errorf("stdout %.100q, execution %+v", out, ex)
	}
}
