package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// jupyterToken authenticates to the image's Jupyter server. The proxy
// strips Authorization, so it goes in the query.
const jupyterToken = "?token=opensandboxcodeinterpreterjupyter"

// targetCodeRatio is the target for a warm /code run of `1+1`
// against a /command `true` in the same sandbox.
const targetCodeRatio = 2

// codeResult holds the /code figures of one engine.
type codeResult struct {
	engine        string
	warm, command durations // `1+1` in a warm context; `true` as a command
	direct        durations // Jupyter only: `1+1` sent to the kernel through the proxy
	first, base   durations // context create + first run; the baseline below
	baseName      string
}

// codeEngines measures /code on both engines of the code-interpreter
// image: its Jupyter server, and the agent's Python driver (the same image
// with JUPYTER_HOST set empty).
func (b *bench) codeEngines(ctx context.Context) ([]codeResult, error) {
	var out []codeResult
	for _, jupyter := range []bool{true, false} {
		r, err := b.codeEngine(ctx, jupyter)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (b *bench) codeEngine(ctx context.Context, jupyter bool) (codeResult, error) {
	res := codeResult{engine: "python driver", baseName: "python3 -c pass"}
	env := map[string]string{"SANDBOXD_BENCH": "code", "JUPYTER_HOST": ""}
	if jupyter {
		res.engine, res.baseName = "jupyter", "a Jupyter session until its kernel answers"
		delete(env, "JUPYTER_HOST")
	}
	b.progress("/code on the %s: sandbox from %s", res.engine, b.o.codeImage)
	bx, _, err := b.create(ctx, map[string]any{
		"image":          map[string]any{"uri": b.o.codeImage},
		"entrypoint":     []string{"/opt/code-interpreter/code-interpreter.sh"},
		"timeout":        3600,
		"resourceLimits": map[string]string{"cpu": "1", "memory": "1Gi"},
		"env":            env,
		"metadata":       map[string]string{"sandboxd-bench": b.r.run},
	})
	if err != nil {
		return res, err
	}
	defer b.delete(ctx, bx.id)
	// The first context waits for Jupyter to start; that is not measured.
	id, err := bx.codeContext(ctx)
	if err != nil {
		return res, err
	}
	n := max(b.o.commands/5, 5)
	for range n {
		start := time.Now()
		cid, err := bx.codeContext(ctx)
		if err == nil {
			err = bx.runCode(ctx, cid, "1+1", `"text":"2"`)
		}
		if err != nil {
			return res, err
		}
		res.first = append(res.first, time.Since(start))
		if err := bx.deleteCodeContext(ctx, cid); err != nil {
			return res, err
		}
		d, err := bx.codeBaseline(ctx, jupyter)
		if err != nil {
			return res, err
		}
		res.base = append(res.base, d)
	}
	var direct *websocket.Conn
	if jupyter {
		// A kernel of its own, driven without the agent (on the agent's
		// kernel, its messages would queue on this socket too).
		var sess struct {
			ID     string `json:"id"`
			Kernel struct {
				ID string `json:"id"`
			} `json:"kernel"`
		}
		body := `{"path":"bench-direct.ipynb","type":"notebook","kernel":{"name":"python3"}}`
		if err := bx.codeCall(ctx, http.MethodPost, "/proxy/44771/api/sessions"+jupyterToken, body, &sess); err != nil {
			return res, err
		}
		if direct, err = bx.kernelWS(ctx, sess.Kernel.ID, jupyterToken); err != nil {
			return res, err
		}
		defer direct.Close()
	}
	execute := map[string]any{"code": "1+1", "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true}
	for range b.o.commands {
		start := time.Now()
		if err := bx.runCode(ctx, id, "1+1", `"text":"2"`); err != nil {
			return res, err
		}
		res.warm = append(res.warm, time.Since(start))
		d, err := bx.command(ctx, "true", "")
		if err != nil {
			return res, err
		}
		res.command = append(res.command, d)
		if direct != nil {
			start := time.Now()
			if err := kernelRequest(direct, "execute_request", execute); err != nil {
				return res, err
			}
			res.direct = append(res.direct, time.Since(start))
		}
	}
	return res, nil
}

// codeBaseline is what a context costs without sandboxd's /code: a Jupyter
// session created through the proxy to Jupyter's port, until its kernel
// answers a kernel_info_request on its WebSocket, or python3 started as a
// command.
func (bx *box) codeBaseline(ctx context.Context, jupyter bool) (time.Duration, error) {
	if !jupyter {
		return bx.command(ctx, "python3 -c pass", "")
	}
	const api, token = "/proxy/44771/api/", jupyterToken
	start := time.Now()
	body := fmt.Sprintf(`{"path":"bench-%s.ipynb","type":"notebook","kernel":{"name":"python3"}}`, randHex(8))
	var s struct {
		ID     string `json:"id"`
		Kernel struct {
			ID string `json:"id"`
		} `json:"kernel"`
	}
	if err := bx.codeCall(ctx, http.MethodPost, api+"sessions"+token, body, &s); err != nil {
		return 0, err
	}
	ws, err := bx.kernelWS(ctx, s.Kernel.ID, token)
	if err != nil {
		return 0, err
	}
	err = kernelRequest(ws, "kernel_info_request", map[string]any{})
	ws.Close()
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	return d, bx.codeCall(ctx, http.MethodDelete, api+"sessions/"+s.ID+token, "", nil)
}

func (bx *box) codeCall(ctx context.Context, method, p, body string, out any) error {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	resp, err := bx.execd(ctx, method, p, rd, int64(len(body)), "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: status %d: %.200s", method, p, resp.StatusCode, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (bx *box) codeContext(ctx context.Context) (string, error) {
	var c struct {
		ID string `json:"id"`
	}
	const body = `{"language":"python"}`
	resp, err := bx.execd(ctx, http.MethodPost, "/code/context", strings.NewReader(body), int64(len(body)), "application/json")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &c) != nil || c.ID == "" {
		return "", fmt.Errorf("create code context: status %d: %.200s", resp.StatusCode, data)
	}
	return c.ID, nil
}

func (bx *box) deleteCodeContext(ctx context.Context, id string) error {
	resp, err := bx.execd(ctx, http.MethodDelete, "/code/contexts/"+id, nil, 0, "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("delete code context: status %d", resp.StatusCode)
	}
	return nil
}

// runCode runs code in a context and reads the stream to its end, which
// must complete and contain want.
func (bx *box) runCode(ctx context.Context, id, code, want string) error {
	body, _ := json.Marshal(map[string]any{"code": code, "context": map[string]string{"id": id, "language": "python"}})
	resp, err := bx.execd(ctx, http.MethodPost, "/code", bytes.NewReader(body), int64(len(body)), "application/json")
	if err != nil {
		return err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return fmt.Errorf("code stream: %w", err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("code: status %d: %.200s", resp.StatusCode, data)
	case !bytes.Contains(data, []byte(`"execution_complete"`)) || !bytes.Contains(data, []byte(want)):
		return fmt.Errorf("code run did not give %s: %.300s", want, data)
	}
	return nil
}

// codeRows adds the /code figures to the report.
func (r *report) codeRows(results []codeResult) {
	for _, c := range results {
		r.latency("/code 1+1 warm p50, "+c.engine+" (vs /command true)", c.warm.pct(50), c.command.pct(50), targetCodeRatio, 0)
		r.latency("/code 1+1 warm p99, "+c.engine+" (vs /command true)", c.warm.pct(99), c.command.pct(99), 0, 0)
		if len(c.direct) > 0 {
			r.latency("/code 1+1 warm p50, "+c.engine+" (vs the kernel driven directly)", c.warm.pct(50), c.direct.pct(50), 0, 0)
		}
		r.latency("/code first run p50, "+c.engine+" (vs "+c.baseName+")", c.first.pct(50), c.base.pct(50), 0, 0)
	}
}

// kernelWS opens a WebSocket to a Jupyter kernel through the proxy.
func (bx *box) kernelWS(ctx context.Context, kernel, token string) (*websocket.Conn, error) {
	u := "ws" + strings.TrimPrefix(bx.url, "http") + "/proxy/44771/api/kernels/" + kernel + "/channels" + token
	h := http.Header{}
	for k, v := range bx.hdr {
		h.Set(k, v)
	}
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, u, h)
	if err != nil {
		return nil, fmt.Errorf("kernel websocket: %w", err)
	}
	return ws, nil
}

// kernelRequest sends a shell request and reads until the kernel has
// answered it: its reply for kernel_info, the idle status after an execute.
func kernelRequest(ws *websocket.Conn, msgType string, content map[string]any) error {
	id := randHex(8)
	msg := map[string]any{
		"header":        map[string]string{"msg_id": id, "msg_type": msgType, "session": id, "username": "bench", "version": "5.3"},
		"parent_header": map[string]any{}, "metadata": map[string]any{}, "content": content, "channel": "shell",
	}
	if err := ws.WriteJSON(msg); err != nil {
		return err
	}
	for {
		var m struct {
			Header struct {
				MsgType string `json:"msg_type"`
			} `json:"header"`
			Parent struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content struct {
				State string `json:"execution_state"`
			} `json:"content"`
		}
		if err := ws.ReadJSON(&m); err != nil {
			return fmt.Errorf("kernel websocket: %w", err)
		}
		if m.Parent.MsgID != id {
			continue
		}
		if m.Header.MsgType == "kernel_info_reply" || (m.Header.MsgType == "status" && m.Content.State == "idle" && msgType == "execute_request") {
			return nil
		}
	}
}
