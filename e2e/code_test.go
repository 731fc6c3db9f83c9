//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// codeImage is the image of the /code tests: one with a Jupyter server and
// python3 (images/code-interpreter). SANDBOXD_E2E_CODE_IMAGE overrides it.
func codeImage() string {
	if img := os.Getenv("SANDBOXD_E2E_CODE_IMAGE"); img != "" {
		return img
	}
	return imageCodeInterpreter
}

// codeBox creates a code-interpreter sandbox. With jupyter false it
// announces no Jupyter server (JUPYTER_HOST set empty), so that /code runs
// on the agent's Python driver.
func codeBox(t *testing.T, s *Server, jupyter bool) *codeClient {
	req := codeInterpreterRequest()
	req["image"] = map[string]any{"uri": codeImage()}
	req["resourceLimits"] = map[string]string{"cpu": "1", "memory": "1Gi"}
	if !jupyter {
		req["env"] = map[string]string{"JUPYTER_HOST": ""}
	}
	return &codeClient{newExecdBox(t, s, req)}
}

// codeClient drives /code as upstream's code-interpreter SDKs do
// (reference code-interpreter.md §8): the same requests, and the stream
// parsed line by line, blank lines skipped, a data: prefix stripped, every
// event needing a type and an integer timestamp.
type codeClient struct{ *execdBox }

type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
}

type codeEvent struct {
	Type           string                     `json:"type"`
	Text           string                     `json:"text"`
	Timestamp      *int64                     `json:"timestamp"`
	ExecutionCount int                        `json:"execution_count"`
	ExecutionTime  *int64                     `json:"execution_time"`
	Results        map[string]json.RawMessage `json:"results"`
	Error          *struct {
		Ename     string   `json:"ename"`
		Evalue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

// execution is what the SDKs build from a stream.
type execution struct {
	ID       string
	Inits    int
	Stdout   string
	Stderr   string
	Results  []map[string]json.RawMessage
	Count    int
	Error    *codeEvent
	Complete int
	Types    []string // every event but ping, in order
}

// text is result i's text/plain, as the SDKs read it.
func (e *execution) text(i int) string {
	if i >= len(e.Results) {
		return ""
	}
	var s string
	_ = json.Unmarshal(e.Results[i]["text"], &s)
	return s
}

func (c *codeClient) createContext(t *testing.T, language string) codeContext {
	t.Helper()
	status, _, body := c.do(t, http.MethodPost, "/code/context", map[string]string{"language": language}, nil)
	if status != http.StatusOK {
		t.Fatalf("create context %s: %d %s", language, status, body)
	}
	ctx := decodeJSON[codeContext](t, body)
	if ctx.ID == "" || ctx.Language != language {
		t.Fatalf("create context: %s", body)
	}
	return ctx
}

// run posts code and parses the whole stream; the status must be 200.
func (c *codeClient) run(t *testing.T, ctx codeContext, code string) *execution {
	t.Helper()
	status, _, body := c.do(t, http.MethodPost, "/code", c.runBody(ctx, code), nil)
	if status != http.StatusOK {
		t.Fatalf("run %q: status %d: %s", code, status, body)
	}
	e := &execution{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		e.add(t, sc.Bytes())
	}
	if e.Inits != 1 || e.ID == "" {
		t.Fatalf("run %q: %d init events, id %q: %s", code, e.Inits, e.ID, execdTail(body))
	}
	return e
}

func (c *codeClient) runBody(ctx codeContext, code string) map[string]any {
	ref := map[string]string{"language": ctx.Language}
	if ctx.ID != "" {
		ref["id"] = ctx.ID
	}
	return map[string]any{"code": code, "context": ref}
}

func (e *execution) add(t *testing.T, line []byte) {
	line = bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data:"))
	if len(line) == 0 {
		return
	}
	var ev codeEvent
	if err := json.Unmarshal(line, &ev); err != nil || ev.Type == "" || ev.Timestamp == nil {
		t.Fatalf("not an SDK event: %q", line)
	}
	if ev.Type == "ping" {
		return
	}
	e.Types = append(e.Types, ev.Type)
	switch ev.Type {
	case "init":
		e.Inits++
		e.ID = ev.Text
	case "stdout":
		e.Stdout += ev.Text
	case "stderr":
		e.Stderr += ev.Text
	case "result":
		e.Results = append(e.Results, ev.Results)
	case "execution_count":
		e.Count = ev.ExecutionCount
	case "error":
		e.Error = &ev
	case "execution_complete":
		e.Complete++
	}
}

// wantEnd checks the end of a run: execution_complete and no error, or an
// error as the last event.
func (e *execution) wantOK(t *testing.T) {
	t.Helper()
	if e.Error != nil || e.Complete != 1 || e.Types[len(e.Types)-1] != "execution_complete" {
		t.Fatalf("run did not complete cleanly: %v, error %s", e.Types, e.errText())
	}
}

func (e *execution) errText() string {
	if e.Error == nil || e.Error.Error == nil {
		return "none"
	}
	x := e.Error.Error
	return x.Ename + ": " + x.Evalue + "\n" + strings.Join(x.Traceback, "\n")
}

func (e *execution) wantError(t *testing.T, ename string) {
	t.Helper()
	if e.Error == nil || e.Error.Error.Ename != ename || e.Complete != 0 || e.Types[len(e.Types)-1] != "error" {
		t.Fatalf("run should end with error %s: %v, error %s", ename, e.Types, e.errText())
	}
}

func TestCodeJupyter(t *testing.T) {
	s := startServer(t)
	testCodeEngine(t, s, codeBox(t, s, true))
}

func TestCodePythonDriver(t *testing.T) {
	s := startServer(t)
	testCodeEngine(t, s, codeBox(t, s, false))
}

// testCodeEngine runs the same checks on either engine.
func testCodeEngine(t *testing.T, s *Server, c *codeClient) {
	py := c.createContext(t, "python")

	e := c.run(t, py, "x = 42")
	e.wantOK(t)
	if e.ID != py.ID || len(e.Results) != 0 {
		t.Fatalf("x = 42: id %s, results %v", e.ID, e.Results)
	}
	e = c.run(t, py, "print('Hello from Python!')\nx + 1")
	e.wantOK(t)
	if e.Stdout != "Hello from Python!\n" || e.text(0) != "43" || e.Count == 0 {
		t.Fatalf("stdout %q, result %q, count %d", e.Stdout, e.text(0), e.Count)
	}
	if got := strings.Join(e.Types, " "); got != "init stdout execution_count result execution_complete" {
		t.Fatalf("events %s", got)
	}

	e = c.run(t, py, "print(undefined_variable)")
	e.wantError(t, "NameError")
	if !strings.Contains(e.Error.Error.Evalue, "undefined_variable") || len(e.Error.Error.Traceback) == 0 {
		t.Fatalf("error %+v", e.Error.Error)
	}

	// A second context has its own state; the default context of a language
	// is used when no id is sent.
	other := c.createContext(t, "python")
	c.run(t, other, "x").wantError(t, "NameError")
	def := c.run(t, codeContext{Language: "python"}, "result = 2 + 2\nresult")
	def.wantOK(t)
	if def.text(0) != "4" || def.ID == py.ID || def.ID == other.ID {
		t.Fatalf("default context: id %s, result %q", def.ID, def.text(0))
	}

	// Contexts survive a restart of sandboxd: the agent daemon holds them.
	s.Restart()
	e = c.run(t, py, "x")
	e.wantOK(t)
	if e.text(0) != "42" {
		t.Fatalf("after a restart of sandboxd: %q", e.text(0))
	}

	t.Run("context routes", func(t *testing.T) {
		status, _, body := c.do(t, http.MethodGet, "/code/contexts/"+url.PathEscape(other.ID), nil, nil)
		if got := decodeJSON[codeContext](t, body); status != http.StatusOK || got != other {
			t.Fatalf("get: %d %s", status, body)
		}
		_, _, body = c.do(t, http.MethodGet, "/code/contexts?language=python", nil, nil)
		if list := decodeJSON[[]codeContext](t, body); len(list) != 3 {
			t.Fatalf("list: %s", body)
		}
		if status, _, body := c.do(t, http.MethodDelete, "/code/contexts/"+url.PathEscape(other.ID), nil, nil); status != http.StatusOK {
			t.Fatalf("delete: %d %s", status, body)
		}
		wantExecdError(t, c, http.MethodGet, "/code/contexts/"+url.PathEscape(other.ID), nil, http.StatusNotFound, "CONTEXT_NOT_FOUND")
		wantExecdError(t, c, http.MethodPost, "/code", c.runBody(other, "1"), http.StatusNotFound, "CONTEXT_NOT_FOUND")
		wantExecdError(t, c, http.MethodPost, "/code/context", map[string]string{"language": "cobol"}, http.StatusBadRequest, "INVALID_REQUEST_BODY")
		wantExecdError(t, c, http.MethodPost, "/code", map[string]any{"code": "1", "context": map[string]string{"language": "cobol"}}, http.StatusBadRequest, "INVALID_REQUEST_BODY")
		wantExecdError(t, c, http.MethodPost, "/code", map[string]any{"code": "", "context": map[string]string{"language": "python"}}, http.StatusBadRequest, "INVALID_REQUEST_BODY")
		wantExecdError(t, c, http.MethodDelete, "/code?id=fake-1", nil, http.StatusNotFound, "CONTEXT_NOT_FOUND")
		wantExecdError(t, c, http.MethodDelete, "/code/contexts", nil, http.StatusBadRequest, "MISSING_QUERY")

		// Without a language, the code is a shell command.
		e := c.run(t, codeContext{}, "echo from-shell")
		if e.Stdout != "from-shell" || e.Complete != 1 {
			t.Fatalf("command: %+v", e)
		}
	})

	t.Run("interrupt and busy", func(t *testing.T) {
		stream := c.start(t, t.Context(), py, "import time\nprint('started', flush=True)\nfor i in range(600):\n    time.sleep(0.2)")
		stream.waitFor(t, "stdout")
		wantExecdError(t, c, http.MethodPost, "/code", c.runBody(py, "1"), http.StatusConflict, "CONTEXT_BUSY")
		if status, _, body := c.do(t, http.MethodDelete, "/code?id="+url.QueryEscape(py.ID), nil, nil); status != http.StatusOK {
			t.Fatalf("interrupt: %d %s", status, body)
		}
		e := stream.finish(t)
		e.wantError(t, "KeyboardInterrupt")
		c.run(t, py, "x").wantOK(t)

		// A client that goes away interrupts its run: the context is free
		// for the next one without an explicit interrupt.
		ctx, cancel := context.WithCancel(t.Context())
		stream = c.start(t, ctx, py, "import time\nprint('started', flush=True)\nfor i in range(600):\n    time.sleep(0.2)")
		stream.waitFor(t, "stdout")
		cancel()
		waitUntil(t, time.Minute, "the abandoned run to be interrupted", func() bool {
			status, _, _ := c.do(t, http.MethodPost, "/code", c.runBody(py, "1"), nil)
			return status == http.StatusOK
		})
	})

	t.Run("dead kernel", func(t *testing.T) {
		dying := c.createContext(t, "python")
		e := c.run(t, dying, "import os\nos._exit(1)")
		e.wantError(t, "KernelError")
		fresh := c.createContext(t, "python")
		if e := c.run(t, fresh, "6 * 7"); e.text(0) != "42" {
			t.Fatalf("a new context after a kernel died: %v %s", e.Types, e.errText())
		}
	})

	t.Run("deep agents flow", func(t *testing.T) {
		csv := "region,revenue\nnorth,120\nsouth,95\neast,143\nwest,88\n"
		if r := c.execdBox.run(t, map[string]any{"command": "printf '" + csv + "' > /tmp/sales.csv"}); r.last().Type != "execution_complete" {
			t.Fatalf("write the CSV: %s", r.Raw)
		}
		data := c.createContext(t, "python")
		e := c.run(t, data, "import pandas as pd\ndf = pd.read_csv('/tmp/sales.csv')\ndf.describe()")
		e.wantOK(t)
		if len(e.Results) != 1 || !strings.Contains(e.text(0), "revenue") || e.Results[0]["text/html"] == nil {
			t.Fatalf("describe: %v", e.Results)
		}
		e = c.run(t, data, "import seaborn as sns\nimport matplotlib.pyplot as plt\nsns.barplot(data=df, x='region', y='revenue')\nplt.title('Revenue')\nplt.show()")
		e.wantOK(t)
		var png string
		for _, r := range e.Results {
			if r["image/png"] != nil {
				_ = json.Unmarshal(r["image/png"], &png)
			}
		}
		raw, err := base64.StdEncoding.DecodeString(png)
		if err != nil || !bytes.HasPrefix(raw, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("no PNG chart in %d results (err %v)", len(e.Results), err)
		}
	})
}

// codeStream is a run whose events are read as they come.
type codeStream struct {
	resp *http.Response
	sc   *bufio.Scanner
	e    execution
}

func (c *codeClient) start(t *testing.T, ctx context.Context, cc codeContext, code string) *codeStream {
	t.Helper()
	b, _ := json.Marshal(c.runBody(cc, code))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.s.URL+c.path("/code"), bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.Headers {
		req.Header.Set(k, v)
	}
	resp, err := c.s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("run: status %d", resp.StatusCode)
	}
	st := &codeStream{resp: resp, sc: bufio.NewScanner(resp.Body)}
	st.sc.Buffer(nil, 64<<20)
	return st
}

// waitFor reads events until one of type typ has arrived.
func (st *codeStream) waitFor(t *testing.T, typ string) {
	t.Helper()
	for st.sc.Scan() {
		st.e.add(t, st.sc.Bytes())
		if n := len(st.e.Types); n > 0 && st.e.Types[n-1] == typ {
			return
		}
	}
	t.Fatalf("stream ended without %s: %v", typ, st.e.Types)
}

// finish reads the rest of the stream.
func (st *codeStream) finish(t *testing.T) *execution {
	t.Helper()
	for st.sc.Scan() {
		st.e.add(t, st.sc.Bytes())
	}
	return &st.e
}

func wantExecdError(t *testing.T, c *codeClient, method, path string, body any, status int, code string) {
	t.Helper()
	got, _, b := c.do(t, method, path, body, nil)
	var e struct{ Code, Message string }
	_ = json.Unmarshal(b, &e)
	if got != status || e.Code != code || e.Message == "" {
		t.Fatalf("%s %s: %d %s, want %d %s", method, path, got, b, status, code)
	}
}
