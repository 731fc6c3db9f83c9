//go:build linux

package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gorilla/websocket"
)

// fakeJupyter serves the part of Jupyter's API that the agent uses. Its
// kernel answers every execute_request with the messages of another
// request around its own, and "die" with the restart of a dead kernel.
func fakeJupyter(t *testing.T) (url string, interrupts *atomic.Int32) {
	interrupts = new(atomic.Int32)
	auth := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "token tok" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return false
		}
		return true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/kernelspecs", func(w http.ResponseWriter, r *http.Request) {
		if auth(w, r) {
			_, _ = w.Write([]byte(`{"default":"python3","kernelspecs":{"python3":{"spec":{"language":"python"}},"ir":{"spec":{"language":"R"}}}}`))
		}
	})
	mux.HandleFunc("POST /api/sessions", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Kernel struct{ Name string } }
		if auth(w, r) && json.NewDecoder(r.Body).Decode(&req) == nil && req.Kernel.Name == "python3" {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"sess-1","kernel":{"id":"k-1"}}`))
		}
	})
	mux.HandleFunc("DELETE /api/sessions/sess-1", func(w http.ResponseWriter, r *http.Request) {
		if auth(w, r) {
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("POST /api/kernels/k-1/interrupt", func(w http.ResponseWriter, r *http.Request) {
		if auth(w, r) {
			interrupts.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("GET /api/kernels/k-1/channels", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r) {
			return
		}
		ws, err := new(websocket.Upgrader).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			var req struct {
				Header struct {
					MsgID string `json:"msg_id"`
				} `json:"header"`
				Content struct{ Code string } `json:"content"`
			}
			if ws.ReadJSON(&req) != nil {
				return
			}
			send := func(channel, typ, parent, content string) {
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"channel":"`+channel+`","header":{"msg_type":"`+typ+`"},"parent_header":{"msg_id":"`+parent+`"},"content":`+content+`}`))
			}
			id := req.Header.MsgID
			if req.Content.Code == "die" {
				send("iopub", "status", "", `{"execution_state":"restarting"}`)
				continue
			}
			send("iopub", "status", "other", `{"execution_state":"idle"}`)
			send("iopub", "status", id, `{"execution_state":"busy"}`)
			send("iopub", "stream", "other", `{"name":"stdout","text":"not mine"}`)
			send("iopub", "stream", id, `{"name":"stdout","text":"mine\n"}`)
			send("iopub", "display_data", id, `{"data":{"image/png":"iVBOR"}}`)
			send("iopub", "execute_result", id, `{"execution_count":1,"data":{"text/plain":"`+req.Content.Code+`"}}`)
			send("shell", "execute_reply", id, `{"status":"ok"}`)
			send("iopub", "status", id, `{"execution_state":"idle"}`)
		}
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL, interrupts
}

func TestJupyterEngine(t *testing.T) {
	url, interrupts := fakeJupyter(t)
	t.Setenv("JUPYTER_HOST", url)
	t.Setenv("JUPYTER_TOKEN", "tok")
	a := newTestAgent(t)

	c := decode[codeContextJSON](t, a.post(t, "/code/context", map[string]string{"language": "python"}), http.StatusOK)
	if c.ID != "sess-1" {
		t.Fatalf("context id %q, want Jupyter's session id", c.ID)
	}
	for range 2 { // the second run reuses the kernel's WebSocket
		evs := a.runCode(t, c.ID, "42")
		if got := types(evs); got != "stdout execution_count result result execution_complete" {
			t.Fatalf("events %q", got)
		}
		if evs[0].Text != "mine\n" || string(evs[2].Results["text"]) != `"42"` || string(evs[3].Results["image/png"]) != `"iVBOR"` {
			t.Fatalf("events %+v", evs)
		}
	}
	if evs := a.runCode(t, c.ID, "die"); types(evs) != "status error" || !strings.Contains(evs[1].Error.EValue, "kernel died") {
		t.Fatalf("dead kernel: %+v", evs)
	}
	if resp := a.do(t, http.MethodDelete, "/code?id=sess-1", nil); resp.StatusCode != http.StatusOK || interrupts.Load() != 1 {
		t.Fatalf("interrupt: %s, %d interrupts", resp.Status, interrupts.Load())
	}
	wantError(t, a.post(t, "/code/context", map[string]string{"language": "go"}), http.StatusBadRequest, codeInvalidRequest)
	if resp := a.do(t, http.MethodDelete, "/code/contexts/sess-1", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %s", resp.Status)
	}

	t.Setenv("JUPYTER_TOKEN", "wrong")
	wantError(t, a.post(t, "/code/context", map[string]string{"language": "python"}), http.StatusServiceUnavailable, codeRuntimeError)
}
