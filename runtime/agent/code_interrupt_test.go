//go:build linux

package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// An interrupt stops a run at any moment after its start, on a new context
// too, where the kernel has not taken the code up yet (it ignores
// interrupts between cells).

// interruptDelays are the moments after the run's init that an interrupt
// is sent at.
var interruptDelays = []time.Duration{0, 10 * time.Millisecond, 100 * time.Millisecond, time.Second}

// interruptRun starts code in context id, interrupts it after delay and
// returns the rest of its events.
func (a *testAgent) interruptRun(t *testing.T, id, code string, delay time.Duration) []codeEvent {
	t.Helper()
	r := a.startCode(t, context.Background(), id, code)
	time.Sleep(delay)
	if resp := a.do(t, http.MethodDelete, "/code?id="+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("interrupt: %s", resp.Status)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) == 0 {
		t.Fatal("the stream ended without an event")
	}
	return parseCodeStream(t, rest)
}

// wantInterrupted checks that a run ended with KeyboardInterrupt.
func wantInterrupted(t *testing.T, evs []codeEvent) {
	t.Helper()
	n := len(evs)
	if n < 2 || evs[n-2].Type != evStatus || evs[n-1].Type != evError || evs[n-1].Error.EName != "KeyboardInterrupt" {
		t.Fatalf("events %q (last %+v), want status and error KeyboardInterrupt", types(evs), evs[n-1])
	}
	if strings.Contains(stdout(evs), "completed") {
		t.Fatalf("the code ran to completion: %q", stdout(evs))
	}
}

func TestPythonInterruptAnyMoment(t *testing.T) {
	t.Parallel()
	a := newPythonAgent(t)
	const loop = "import time\nfor _ in range(200): time.sleep(0.05)\nprint('completed')"
	for _, delay := range interruptDelays {
		t.Run(delay.String(), func(t *testing.T) {
			// A new context each time: its driver is still starting.
			id := a.newCodeContext(t)
			wantInterrupted(t, a.interruptRun(t, id, loop, delay))
			// The next run on the context is not interrupted.
			if evs := a.runCode(t, id, "'after'"); !strings.Contains(types(evs), evComplete) {
				t.Fatalf("run after the interrupt: %q %+v", types(evs), evs)
			}
		})
	}
	// A context that ran a cell, too.
	id := a.newCodeContext(t)
	a.runCode(t, id, "1")
	for _, delay := range interruptDelays {
		wantInterrupted(t, a.interruptRun(t, id, loop, delay))
	}
}

// slowJupyter is a Jupyter server whose kernels behave as ipykernel's do
// for interrupts: a kernel takes up a cell after takeUp (the start of a new
// kernel), ignores interrupts until it has sent execute_input, gives up the
// request without a reply or an error if one comes in the next 50 ms (its
// handler, before the cell's code), then runs the cell for 10 s unless
// interrupted.
func slowJupyter(t *testing.T, takeUp time.Duration) (url string, ignored *atomic.Int32) {
	ignored = new(atomic.Int32)
	var mu sync.Mutex
	running := map[string]chan struct{}{} // kernel id -> interrupts of the cell it runs
	var n atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/kernelspecs", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"kernelspecs":{"python3":{"spec":{"language":"python"}}}}`))
	})
	mux.HandleFunc("POST /api/sessions", func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"sess-%d","kernel":{"id":"k-%d"}}`, i, i)
	})
	mux.HandleFunc("POST /api/kernels/{k}/interrupt", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ch := running[r.PathValue("k")]
		mu.Unlock()
		if ch == nil {
			ignored.Add(1)
		} else {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /api/kernels/{k}/channels", func(w http.ResponseWriter, r *http.Request) {
		ws, err := new(websocket.Upgrader).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		kid := r.PathValue("k")
		for {
			var req struct {
				Header struct {
					MsgID string `json:"msg_id"`
				} `json:"header"`
			}
			if ws.ReadJSON(&req) != nil {
				return
			}
			send := func(typ, content string) {
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"channel":"iopub","header":{"msg_type":"`+typ+`"},"parent_header":{"msg_id":"`+req.Header.MsgID+`"},"content":`+content+`}`))
			}
			time.Sleep(takeUp)
			interrupts := make(chan struct{}, 1)
			mu.Lock()
			running[kid] = interrupts
			mu.Unlock()
			send("status", `{"execution_state":"busy"}`)
			send("execute_input", `{"execution_count":1}`)
			reply := true
			select {
			case <-interrupts:
				// Still in the kernel's handler, before the cell's code:
				// ipykernel logs the interrupt and goes idle, no reply.
				reply = false
			case <-time.After(50 * time.Millisecond):
				select {
				case <-interrupts:
					send("error", `{"ename":"KeyboardInterrupt","evalue":"","traceback":[]}`)
				case <-time.After(10 * time.Second):
					send("stream", `{"name":"stdout","text":"completed\n"}`)
				}
			}
			mu.Lock()
			delete(running, kid)
			mu.Unlock()
			if reply {
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"channel":"shell","header":{"msg_type":"execute_reply"},"parent_header":{"msg_id":"`+req.Header.MsgID+`"},"content":{"status":"ok"}}`))
			}
			send("status", `{"execution_state":"idle"}`)
		}
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL, ignored
}

func TestJupyterInterruptAnyMoment(t *testing.T) {
	url, ignored := slowJupyter(t, 300*time.Millisecond)
	t.Setenv("JUPYTER_HOST", url)
	t.Setenv("JUPYTER_TOKEN", "")
	a := newTestAgent(t)
	for _, delay := range interruptDelays {
		t.Run(delay.String(), func(t *testing.T) {
			c := decode[codeContextJSON](t, a.post(t, "/code/context", map[string]string{"language": "python"}), http.StatusOK)
			before := ignored.Load()
			wantInterrupted(t, a.interruptRun(t, c.ID, "loop", delay))
			if delay < 300*time.Millisecond && ignored.Load() == before {
				t.Errorf("the interrupt at %v reached the kernel only once it ran the cell: the test proves nothing", delay)
			}
		})
	}
	// An idle context's interrupt goes to the kernel, which ignores it.
	c := decode[codeContextJSON](t, a.post(t, "/code/context", map[string]string{"language": "python"}), http.StatusOK)
	before := ignored.Load()
	if resp := a.do(t, http.MethodDelete, "/code?id="+c.ID, nil); resp.StatusCode != http.StatusOK || ignored.Load() != before+1 {
		t.Fatalf("idle interrupt: %s, %d ignored", resp.Status, ignored.Load()-before)
	}
}

// An interrupt of a new, idle context leaves its driver alive, even one
// still starting (a SIGINT before its handler is set would end it).
func TestPythonInterruptIdleContext(t *testing.T) {
	t.Parallel()
	a := newPythonAgent(t)
	for range 5 {
		id := a.newCodeContext(t)
		if resp := a.do(t, http.MethodDelete, "/code?id="+id, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("interrupt: %s", resp.Status)
		}
		if evs := a.runCode(t, id, "6 * 7"); !strings.Contains(types(evs), evComplete) {
			t.Fatalf("after an idle interrupt: %q %+v", types(evs), evs)
		}
	}
}
