//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// codeEvent is a decoded /code stream event.
type codeEvent struct {
	Type           string                     `json:"type"`
	Text           string                     `json:"text"`
	ExecutionCount int                        `json:"execution_count"`
	Timestamp      int64                      `json:"timestamp"`
	Results        map[string]json.RawMessage `json:"results"`
	Error          *codeError                 `json:"error"`
}

// parseCodeStream splits a /code stream into its events, pings left out.
func parseCodeStream(t *testing.T, body []byte) []codeEvent {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", tail(body))
	}
	var evs []codeEvent
	for _, chunk := range bytes.Split(bytes.TrimSuffix(body, []byte("\n\n")), []byte("\n\n")) {
		var ev codeEvent
		if err := json.Unmarshal(chunk, &ev); err != nil {
			t.Fatalf("event %q: %v", tail(chunk), err)
		}
		if ev.Timestamp < 1e12 {
			t.Fatalf("event %q has no millisecond timestamp", tail(chunk))
		}
		if ev.Type != evPing {
			evs = append(evs, ev)
		}
	}
	return evs
}

func types(evs []codeEvent) string {
	var s []string
	for _, ev := range evs {
		s = append(s, ev.Type)
	}
	return strings.Join(s, " ")
}

func msg(typ, content string) kernelMsg {
	return kernelMsg{msgType: typ, content: json.RawMessage(content)}
}

func TestCodeRunEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		msgs []kernelMsg
		err  error
		want string
		// check looks at the events beyond their types.
		check func(t *testing.T, evs []codeEvent)
	}{
		{name: "no value", want: "execution_complete"},
		{name: "reply ok", msgs: []kernelMsg{msg("execute_reply", `{"status":"ok"}`)}, want: "execution_complete"},
		{
			// A second interrupt in IPython's traceback printing: no error
			// message, only the reply says the cell failed.
			name: "failed reply without an error",
			msgs: []kernelMsg{
				msg("stream", `{"name":"stderr","text":"\nKeyboardInterrupt\n"}`),
				msg("execute_reply", `{"status":"error","ename":"KeyboardInterrupt","evalue":"","traceback":[]}`),
			},
			want: "stderr status error",
			check: func(t *testing.T, evs []codeEvent) {
				if evs[2].Error.EName != "KeyboardInterrupt" {
					t.Errorf("error %+v", evs[2].Error)
				}
			},
		},
		{name: "aborted reply", msgs: []kernelMsg{msg("execute_reply", `{"status":"aborted"}`)}, want: "status error"},
		{
			name: "failed reply after its error",
			msgs: []kernelMsg{
				msg("error", `{"ename":"ValueError","evalue":"x","traceback":[]}`),
				msg("execute_reply", `{"status":"error","ename":"ValueError","evalue":"x","traceback":[]}`),
			},
			want: "status error",
		},
		{
			name: "output and value",
			msgs: []kernelMsg{
				msg("stream", `{"name":"stdout","text":"a\nb\n"}`),
				msg("stream", `{"name":"stdout","text":""}`),
				msg("stream", `{"name":"stderr","text":"warn"}`),
				msg("execute_input", `{"code":"x"}`),
				msg("execute_result", `{"execution_count":3,"data":{"text/plain":"4","text/html":"<b>4</b>"},"metadata":{}}`),
			},
			want: "stdout stderr execution_count result execution_complete",
			check: func(t *testing.T, evs []codeEvent) {
				if evs[0].Text != "a\nb\n" || evs[1].Text != "warn" {
					t.Errorf("chunks %q %q, want them whole", evs[0].Text, evs[1].Text)
				}
				if evs[2].ExecutionCount != 3 {
					t.Errorf("execution_count = %d", evs[2].ExecutionCount)
				}
				r := evs[3].Results
				if string(r["text"]) != `"4"` || string(r["text/html"]) != `"\u003cb\u003e4\u003c/b\u003e"` || r["text/plain"] != nil {
					t.Errorf("results = %s", mustJSON(r))
				}
			},
		},
		{
			name: "display data follows the value",
			msgs: []kernelMsg{
				msg("display_data", `{"data":{"text/plain":"<Figure>","image/png":"iVBOR"}}`),
				msg("execute_result", `{"execution_count":1,"data":{"text/plain":"1"}}`),
				msg("display_data", `{"data":{}}`),
			},
			want: "execution_count result result execution_complete",
			check: func(t *testing.T, evs []codeEvent) {
				if string(evs[1].Results["text"]) != `"1"` || string(evs[2].Results["image/png"]) != `"iVBOR"` {
					t.Errorf("results %s then %s", mustJSON(evs[1].Results), mustJSON(evs[2].Results))
				}
			},
		},
		{
			name: "display data beyond the bound is not held back",
			msgs: []kernelMsg{
				msg("display_data", `{"data":{"image/png":"`+strings.Repeat("A", maxHeldDisplays)+`"}}`),
				msg("stream", `{"name":"stdout","text":"after"}`),
				msg("execute_result", `{"execution_count":1,"data":{"text/plain":"1"}}`),
			},
			want: "result stdout execution_count result execution_complete",
		},
		{
			name: "display data without a value",
			msgs: []kernelMsg{msg("display_data", `{"data":{"image/png":"iVBOR"}}`)},
			want: "result execution_complete",
		},
		{
			name: "error is the last event",
			msgs: []kernelMsg{
				msg("stream", `{"name":"stdout","text":"x"}`),
				msg("error", `{"ename":"ZeroDivisionError","evalue":"division by zero","traceback":["a","b"]}`),
				msg("error", `{"ename":"Second","evalue":"","traceback":[]}`),
			},
			want: "stdout status error",
			check: func(t *testing.T, evs []codeEvent) {
				if evs[1].Text != "error" {
					t.Errorf("status text %q", evs[1].Text)
				}
				if e := evs[2].Error; e == nil || e.EName != "ZeroDivisionError" || e.EValue != "division by zero" || len(e.Traceback) != 2 {
					t.Errorf("error = %+v", e)
				}
			},
		},
		{
			name: "kernel lost",
			msgs: []kernelMsg{msg("stream", `{"name":"stdout","text":"x"}`)},
			err:  errKernelDead,
			want: "stdout status error",
			check: func(t *testing.T, evs []codeEvent) {
				if e := evs[2].Error; e.EName != "KernelError" || e.EValue != errKernelDead.Error() || e.Traceback == nil {
					t.Errorf("error = %+v", e)
				}
			},
		},
		{
			name: "malformed messages are dropped",
			msgs: []kernelMsg{msg("stream", `[]`), msg("execute_result", `1`), msg("error", `"x"`)},
			want: "execution_complete",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			run := newCodeRun(newEventStream(rec))
			for _, m := range tc.msgs {
				run.handle(m)
			}
			run.finish(tc.err)
			evs := parseCodeStream(t, rec.Body.Bytes())
			if got := types(evs); got != tc.want {
				t.Fatalf("events %q, want %q", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, evs)
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestAppendJSONValueEscapesNEL(t *testing.T) {
	got := string(appendJSONValue(nil, map[string]string{"a": "x\u0085y\u2028<"}))
	if want := `{"a":"x\u0085y\u2028\u003c"}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestRunSlot(t *testing.T) {
	var s runSlot
	var got []string
	done := s.begin("a", func(m kernelMsg) { got = append(got, m.msgType) })
	s.deliver("b", msg("stream", `{}`)) // another request's output
	s.deliver("a", msg("stream", `{}`))
	s.deliver("b", msg("status", `{"execution_state":"idle"}`)) // a stray idle
	s.deliver("a", msg("status", `{"execution_state":"busy"}`))
	select {
	case err := <-done:
		t.Fatalf("run ended early: %v", err)
	default:
	}
	s.deliver("a", msg("status", `{"execution_state":"idle"}`))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.deliver("a", msg("stream", `{}`)) // after the end
	if strings.Join(got, " ") != "stream" {
		t.Fatalf("handled %q", got)
	}
	s.fail(errKernelDead) // no run: nothing to end

	done = s.begin("c", func(kernelMsg) {})
	s.fail(errKernelDead)
	if err := <-done; !errors.Is(err, errKernelDead) {
		t.Fatalf("failed run ended with %v", err)
	}
}

// newPythonAgent is a test agent whose /code runs on the Python driver.
func newPythonAgent(t *testing.T) *testAgent {
	t.Helper()
	if _, err := findPython(); err != nil {
		t.Skip("no python3")
	}
	a := newTestAgent(t)
	a.findJupyter = func() (*jupyterServer, error) { return nil, nil } // no Jupyter
	return a
}

func (a *testAgent) newCodeContext(t *testing.T) string {
	t.Helper()
	c := decode[codeContextJSON](t, a.post(t, "/code/context", map[string]string{"language": "python"}), http.StatusOK)
	if c.ID == "" || c.Language != "python" {
		t.Fatalf("context = %+v", c)
	}
	return c.ID
}

// runCode runs code in context id and returns its events after init.
func (a *testAgent) runCode(t *testing.T, id, code string) []codeEvent {
	t.Helper()
	resp := a.post(t, "/code", map[string]any{"code": code, "context": map[string]string{"id": id, "language": "python"}})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /code: %s %s", resp.Status, body)
	}
	evs := parseCodeStream(t, body)
	if len(evs) == 0 || evs[0].Type != evInit || evs[0].Text != id {
		t.Fatalf("stream %q does not start with init %s", types(evs), id)
	}
	return evs[1:]
}

func stdout(evs []codeEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == evStdout {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

func TestPythonContext(t *testing.T) {
	t.Parallel()
	a := newPythonAgent(t)
	id := a.newCodeContext(t)

	if evs := a.runCode(t, id, "x = 41\nimport sys"); types(evs) != "execution_complete" {
		t.Fatalf("assignment: %q", types(evs))
	}
	evs := a.runCode(t, id, "print('hi')\nprint('err', file=sys.stderr)\nx + 1")
	if got := types(evs); got != "stdout stderr execution_count result execution_complete" {
		t.Fatalf("events %q: %+v", got, evs)
	}
	if evs[0].Text != "hi\n" || string(evs[3].Results["text"]) != `"42"` || evs[2].ExecutionCount != 2 {
		t.Fatalf("events %+v", evs)
	}
	// Output of child processes is streamed too, in order.
	if got := stdout(a.runCode(t, id, "import os\nprint('a', flush=True)\nos.system('echo b')\nprint('c')")); got != "a\nb\nc\n" {
		t.Fatalf("stdout %q", got)
	}
	// Rich values: _repr_html_ becomes text/html.
	evs = a.runCode(t, id, "class T:\n  def _repr_html_(self): return '<i>t</i>'\n  def __repr__(self): return 'T'\nT()")
	if r := evs[len(evs)-2].Results; string(r["text"]) != `"T"` || string(r["text/html"]) != `"\u003ci\u003et\u003c/i\u003e"` {
		t.Fatalf("results %s", mustJSON(r))
	}

	evs = a.runCode(t, id, "def f():\n  return 1/0\nf()")
	if got := types(evs); got != "status error" {
		t.Fatalf("error run: %q", got)
	}
	e := evs[1].Error
	if e.EName != "ZeroDivisionError" || e.EValue != "division by zero" || !strings.Contains(strings.Join(e.Traceback, ""), "return 1/0") {
		t.Fatalf("error %+v", e)
	}
	if evs = a.runCode(t, id, "x ="); types(evs) != "status error" || evs[1].Error.EName != "SyntaxError" {
		t.Fatalf("syntax error: %+v", evs)
	}
	// The state survived the errors; a second context has its own.
	if evs = a.runCode(t, id, "x"); string(evs[1].Results["text"]) != `"41"` {
		t.Fatalf("x = %s", mustJSON(evs))
	}
	other := a.newCodeContext(t)
	if evs = a.runCode(t, other, "x"); types(evs) != "status error" || evs[1].Error.EName != "NameError" {
		t.Fatalf("x in another context: %+v", evs)
	}

	list := decode[[]codeContextJSON](t, a.do(t, http.MethodGet, "/code/contexts?language=python", nil), http.StatusOK)
	if len(list) != 2 {
		t.Fatalf("list = %+v", list)
	}
	if c := decode[codeContextJSON](t, a.do(t, http.MethodGet, "/code/contexts/"+id, nil), http.StatusOK); c.ID != id || c.Language != "python" {
		t.Fatalf("get = %+v", c)
	}
	if resp := a.do(t, http.MethodDelete, "/code/contexts/"+other, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %s", resp.Status)
	}
	wantError(t, a.do(t, http.MethodGet, "/code/contexts/"+other, nil), http.StatusNotFound, codeContextNotFound)
	wantError(t, a.do(t, http.MethodDelete, "/code/contexts/"+other, nil), http.StatusNotFound, codeContextNotFound)
	wantError(t, a.post(t, "/code", map[string]any{"code": "1", "context": map[string]string{"id": other, "language": "python"}}), http.StatusNotFound, codeContextNotFound)
	wantError(t, a.post(t, "/code/context", map[string]string{"language": "ruby"}), http.StatusBadRequest, codeInvalidRequest)
	wantError(t, a.post(t, "/code", map[string]any{"code": "1", "context": map[string]string{"language": "ruby"}}), http.StatusBadRequest, codeInvalidRequest)
	wantError(t, a.post(t, "/code", map[string]any{"context": map[string]string{"language": "python"}}), http.StatusBadRequest, codeInvalidRequest)
	wantError(t, a.do(t, http.MethodDelete, "/code/contexts", nil), http.StatusBadRequest, codeMissingQuery)
	wantError(t, a.do(t, http.MethodDelete, "/code", nil), http.StatusBadRequest, codeMissingQuery)
	wantError(t, a.do(t, http.MethodDelete, "/code?id=nope", nil), http.StatusNotFound, codeContextNotFound)
}

func TestPythonDefaultContextAndCommand(t *testing.T) {
	t.Parallel()
	a := newPythonAgent(t)
	run := func(body any) []codeEvent {
		resp := a.post(t, "/code", body)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /code: %s %s", resp.Status, b)
		}
		return parseCodeStream(t, b)
	}
	first := run(map[string]any{"code": "y = 5", "context": map[string]string{"language": "python"}})
	second := run(map[string]any{"code": "y", "context": map[string]string{"language": "python"}})
	if first[0].Text != second[0].Text || string(second[2].Results["text"]) != `"5"` {
		t.Fatalf("default context: %+v then %+v", first, second)
	}
	if list := decode[[]codeContextJSON](t, a.do(t, http.MethodGet, "/code/contexts", nil), http.StatusOK); len(list) != 1 || list[0].ID != first[0].Text {
		t.Fatalf("list = %+v", list)
	}
	if resp := a.do(t, http.MethodDelete, "/code/contexts?language=python", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("delete by language: %s", resp.Status)
	}
	if list := decode[[]codeContextJSON](t, a.do(t, http.MethodGet, "/code/contexts", nil), http.StatusOK); len(list) != 0 {
		t.Fatalf("list after delete = %+v", list)
	}
	// Without a language the code is a command, whatever the id says.
	evs := run(map[string]any{"code": "echo one; echo two", "context": map[string]string{"id": "whatever"}})
	if types(evs) != "init stdout stdout execution_complete" || evs[1].Text != "one" {
		t.Fatalf("command: %+v", evs)
	}
}

// startCode starts a run and returns once init has arrived.
func (a *testAgent) startCode(t *testing.T, ctx context.Context, id, code string) *bufio.Reader {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"code": code, "context": map[string]string{"id": id, "language": "python"}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/code", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	r := bufio.NewReader(resp.Body)
	if ev := nextEvent(t, r); ev.Type != evInit || ev.Text != id {
		t.Fatalf("first event %+v", ev)
	}
	return r
}

func TestPythonInterruptBusyAndDisconnect(t *testing.T) {
	t.Parallel()
	a := newPythonAgent(t)
	id := a.newCodeContext(t)
	activity := func() int {
		return decode[map[string]int](t, a.do(t, http.MethodGet, "/_sandboxd/activity", nil), http.StatusOK)["running"]
	}

	r := a.startCode(t, context.Background(), id, "import time\nprint('go', flush=True)\nwhile True: time.sleep(0.05)")
	if ev := nextEvent(t, r); ev.Text != "go\n" {
		t.Fatalf("event %+v", ev)
	}
	if n := activity(); n != 1 {
		t.Fatalf("activity = %d during a run", n)
	}
	wantError(t, a.post(t, "/code", map[string]any{"code": "1", "context": map[string]string{"id": id, "language": "python"}}), http.StatusConflict, codeContextBusy)
	if resp := a.do(t, http.MethodDelete, "/code?id="+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("interrupt: %s", resp.Status)
	}
	if ev := finalEvent(t, r); ev.Type != evStatus {
		t.Fatalf("after interrupt: %+v", ev)
	}
	if ev := nextEvent(t, r); ev.Type != evError || ev.Error.EName != "KeyboardInterrupt" {
		t.Fatalf("after interrupt: %+v", ev)
	}
	if rest, _ := io.ReadAll(r); len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("events after the error: %q", rest)
	}
	if evs := a.runCode(t, id, "'alive'"); string(evs[1].Results["text"]) != `"'alive'"` {
		t.Fatalf("after interrupt: %+v", evs)
	}

	// A client that goes away interrupts its run.
	ctx, cancel := context.WithCancel(context.Background())
	r = a.startCode(t, ctx, id, "import time\nprint('go', flush=True)\nwhile True: time.sleep(0.05)")
	nextEvent(t, r)
	cancel()
	eventually(t, "the abandoned run to end", func() bool { return activity() == 0 })
	if evs := a.runCode(t, id, "1"); types(evs) != "execution_count result execution_complete" {
		t.Fatalf("after disconnect: %q", types(evs))
	}
	if n := activity(); n != 0 {
		t.Fatalf("activity = %d when idle", n)
	}
}

func TestPythonFloodAndDeath(t *testing.T) {
	t.Parallel()
	a := newPythonAgent(t)
	id := a.newCodeContext(t)

	// 8 MiB of output arrive whole, as chunks, before the end.
	if got := len(stdout(a.runCode(t, id, "import sys\nfor _ in range(8192): sys.stdout.write('x' * 1023 + '\\n')"))); got != 8<<20 {
		t.Fatalf("got %d bytes of stdout", got)
	}

	evs := a.runCode(t, id, "import os\nos._exit(3)")
	if types(evs) != "status error" || !strings.Contains(evs[1].Error.EValue, "exit status 3") {
		t.Fatalf("driver death: %+v", evs)
	}
	if evs = a.runCode(t, id, "1"); types(evs) != "status error" || !strings.Contains(evs[1].Error.EValue, "has died") {
		t.Fatalf("run on a dead context: %+v", evs)
	}
	if evs = a.runCode(t, a.newCodeContext(t), "1"); string(evs[1].Results["text"]) != `"1"` {
		t.Fatalf("new context: %+v", evs)
	}
}

func TestAnnouncedJupyterThatDoesNotRun(t *testing.T) {
	if _, err := findPython(); err != nil {
		t.Skip("no python3")
	}
	if jupyterRunning() {
		t.Skip("a jupyter process runs on this machine")
	}
	// Nothing listens on port 1: with no Jupyter process either, /code
	// falls back to the Python driver after a short grace instead of
	// waiting for the start timeout.
	t.Setenv("JUPYTER_HOST", "http://127.0.0.1:1")
	a := newTestAgent(t)
	a.delays.jupyterAbsent, a.delays.jupyterPoll = 50*time.Millisecond, 5*time.Millisecond
	if evs := a.runCode(t, a.newCodeContext(t), "'driver'"); string(evs[1].Results["text"]) != `"'driver'"` {
		t.Fatalf("events %+v", evs)
	}
	if !a.code.noJupyter.Load() {
		t.Fatal("the absent Jupyter is not remembered: every context would wait for it")
	}
	t.Setenv("JUPYTER_HOST", "ftp://x")
	wantError(t, a.post(t, "/code/context", map[string]string{"language": "python"}), http.StatusInternalServerError, codeRuntimeError)
}

// JUPYTER_HOST set and empty says there is no Jupyter, whatever PID 1's
// environment announces.
func TestJupyterHostEmpty(t *testing.T) {
	t.Setenv("JUPYTER_HOST", "")
	if j, err := jupyterFromEnv(); j != nil || err != nil {
		t.Fatalf("jupyterFromEnv = %+v, %v; want none", j, err)
	}
}
