//go:build linux

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"
)

const (
	// jupyterStartTimeout bounds the wait for a Jupyter server that the
	// sandbox announces but that does not answer yet: the image starts it
	// with the sandbox, and it takes seconds.
	jupyterStartTimeout = 60 * time.Second
	// jupyterAbsentGrace is how long an announced Jupyter server may take to
	// appear before the agent concludes that the sandbox does not run one.
	jupyterAbsentGrace = 3 * time.Second
	// jupyterPoll is the wait between tries of a Jupyter server that does
	// not answer yet.
	jupyterPoll = 250 * time.Millisecond
	// jupyterRequestTimeout bounds one REST call, a kernel start included.
	jupyterRequestTimeout = 60 * time.Second
)

// errNoJupyter means the announced Jupyter server does not run and will not
// start: nothing listens and no jupyter process exists.
var errNoJupyter = errors.New("no Jupyter server runs in this sandbox")

// jupyterServer is the Jupyter server that the sandbox announces with
// JUPYTER_HOST and JUPYTER_TOKEN, as upstream's code-interpreter image does.
type jupyterServer struct {
	base  *url.URL
	token string
	http  *http.Client
}

// jupyterFromEnv returns the Jupyter server of the sandbox, or nil if none
// is announced. The agent's environment is the container's, but an entry
// point may export the variables for itself only, so PID 1's environment
// counts when the agent's has no JUPYTER_HOST at all. Setting it empty says
// there is no Jupyter.
func jupyterFromEnv() (*jupyterServer, error) {
	env := os.Environ()
	if _, ok := lookupEnv(env, "JUPYTER_HOST"); !ok {
		if b, err := os.ReadFile("/proc/1/environ"); err == nil {
			env = strings.Split(string(b), "\x00")
		}
	}
	host, _ := lookupEnv(env, "JUPYTER_HOST")
	if host == "" {
		return nil, nil
	}
	u, err := url.Parse(host)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("JUPYTER_HOST %q is not an http:// or https:// URL", host)
	}
	token, _ := lookupEnv(env, "JUPYTER_TOKEN")
	return &jupyterServer{
		base:  u,
		token: token,
		// Jupyter is local to the sandbox: never through a proxy.
		http: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}},
	}, nil
}

func (j *jupyterServer) url(path string) string {
	u := *j.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	return u.String()
}

// call does one REST call and decodes a JSON answer into out (if not nil).
func (j *jupyterServer) call(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, jupyterRequestTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, j.url(path), body)
	if err != nil {
		return err
	}
	if j.token != "" {
		req.Header.Set("Authorization", "token "+j.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := j.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("jupyter %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out)
}

// kernelspecs returns the kernel to start for each language, waiting for a
// server that is still starting. A language with several kernels gets the
// one named like it, else the first by name. It gives up with errNoJupyter
// once nothing has listened and no jupyter process has run for grace: the
// entry point that starts Jupyter may not have got to it yet.
func (j *jupyterServer) kernelspecs(ctx context.Context, grace, poll time.Duration) (map[string]string, error) {
	begin := time.Now()
	deadline := begin.Add(jupyterStartTimeout)
	for {
		var resp struct {
			Kernelspecs map[string]struct {
				Spec struct {
					Language string `json:"language"`
				} `json:"spec"`
			} `json:"kernelspecs"`
		}
		err := j.call(ctx, http.MethodGet, "/api/kernelspecs", nil, &resp)
		if err == nil {
			specs := make(map[string]string)
			for _, name := range slices.Sorted(maps.Keys(resp.Kernelspecs)) {
				lang := strings.ToLower(resp.Kernelspecs[name].Spec.Language)
				if cur, ok := specs[lang]; lang != "" && (!ok || (name == lang && cur != lang)) {
					specs[lang] = name
				}
			}
			return specs, nil
		}
		var transport *url.Error
		if !errors.As(err, &transport) {
			return nil, err // it answers, but not with kernelspecs
		}
		if errors.Is(err, syscall.ECONNREFUSED) && !jupyterRunning() && time.Since(begin) >= grace {
			return nil, errNoJupyter
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the Jupyter server at %s does not answer: %w", j.base, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// jupyterRunning reports whether a process of the sandbox looks like a
// Jupyter server (one that may still be starting).
func jupyterRunning() bool {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range dirs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte("jupyter")) {
			return true
		}
	}
	return false
}

// start creates a Jupyter session with a new kernel of spec, as upstream
// does: the context's id is the session's.
func (j *jupyterServer) start(ctx context.Context, spec, cwd string) (*jupyterKernel, error) {
	name := newID()
	path := name + ".ipynb"
	if cwd != "" {
		path = strings.TrimSuffix(cwd, "/") + "/" + path
	}
	var resp struct {
		ID     string `json:"id"`
		Kernel struct {
			ID string `json:"id"`
		} `json:"kernel"`
	}
	in := map[string]any{"path": path, "name": name, "type": "notebook", "kernel": map[string]string{"name": spec}}
	if err := j.call(ctx, http.MethodPost, "/api/sessions", in, &resp); err != nil {
		return nil, err
	}
	if resp.ID == "" || resp.Kernel.ID == "" {
		return nil, errors.New("jupyter created a session without an id or a kernel")
	}
	return &jupyterKernel{j: j, sessionID: resp.ID, kernelID: resp.Kernel.ID, session: newID()}, nil
}

// jupyterKernel is the kernel of one Jupyter session, driven over one
// WebSocket that is kept open between runs (and dialled again if it breaks).
type jupyterKernel struct {
	j         *jupyterServer
	sessionID string
	kernelID  string
	session   string // our client session, part of every message id
	seq       atomic.Int64

	slot runSlot
	mu   sync.Mutex // serialises runs
	wsMu sync.Mutex
	ws   *websocket.Conn
}

func (k *jupyterKernel) conn() (*websocket.Conn, error) {
	k.wsMu.Lock()
	defer k.wsMu.Unlock()
	if k.ws != nil {
		return k.ws, nil
	}
	u := *k.j.base
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/kernels/" + url.PathEscape(k.kernelID) + "/channels"
	q := url.Values{"session_id": {k.session}}
	h := http.Header{}
	if k.j.token != "" {
		q.Set("token", k.j.token)
		h.Set("Authorization", "token "+k.j.token)
	}
	u.RawQuery = q.Encode()
	d := websocket.Dialer{HandshakeTimeout: jupyterRequestTimeout, NetDialContext: dialQuickAck}
	ws, resp, err := d.Dial(u.String(), h)
	if err != nil {
		if resp != nil {
			err = fmt.Errorf("%w (%s)", err, resp.Status)
		}
		return nil, fmt.Errorf("connect to the kernel: %w", err)
	}
	ws.SetReadLimit(maxDriverMessage)
	k.ws = ws
	go k.read(ws)
	return ws, nil
}

// read delivers the kernel's iopub messages until the socket breaks.
func (k *jupyterKernel) read(ws *websocket.Conn) {
	for {
		typ, data, err := ws.ReadMessage()
		if err != nil {
			ws.Close()
			k.wsMu.Lock()
			if k.ws == ws {
				k.ws = nil
			}
			k.wsMu.Unlock()
			k.slot.fail(fmt.Errorf("the connection to the kernel broke: %w", err))
			return
		}
		if typ != websocket.TextMessage {
			continue // messages with binary buffers (comms): nothing /code sends
		}
		var m struct {
			Channel string `json:"channel"`
			Header  struct {
				MsgType string `json:"msg_type"`
			} `json:"header"`
			Parent struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content json.RawMessage `json:"content"`
		}
		// iopub carries the run's output; of shell, the reply tells that
		// the kernel ran the request to its end.
		if json.Unmarshal(data, &m) != nil || m.Channel != "iopub" && m.Header.MsgType != "execute_reply" {
			continue
		}
		if m.Header.MsgType == "status" {
			var c struct {
				State string `json:"execution_state"`
			}
			if json.Unmarshal(m.Content, &c) == nil && (c.State == "restarting" || c.State == "dead") {
				// Whatever ran is lost; Jupyter restarts the kernel empty.
				k.slot.fail(errors.New("the kernel died; Jupyter restarts it without the context's state"))
				continue
			}
		}
		k.slot.deliver(m.Parent.MsgID, kernelMsg{msgType: m.Header.MsgType, content: m.Content})
	}
}

func (k *jupyterKernel) execute(code string, handle func(kernelMsg), stop <-chan struct{}) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	ws, err := k.conn()
	if err != nil {
		return err
	}
	id := k.session + "-" + strconv.FormatInt(k.seq.Add(1), 10)
	done := k.slot.begin(id, handle)
	defer k.slot.end()
	// ipykernel ignores SIGINT between cells, and a new kernel takes a
	// while to take up its first: an interrupt before execute_input is
	// sent again then.
	finished := make(chan struct{})
	defer close(finished)
	k.slot.watchStop(stop, finished, k.interrupt, true)
	msg := map[string]any{
		"header": map[string]string{
			"msg_id": id, "msg_type": "execute_request", "session": k.session,
			"username": "sandboxd", "version": "5.3", "date": time.Now().UTC().Format(time.RFC3339Nano),
		},
		"parent_header": map[string]any{},
		"metadata":      map[string]any{},
		"channel":       "shell",
		"buffers":       []any{},
		"content": map[string]any{
			"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{},
			// Runs are one at a time: with stop_on_error, ipykernel would
			// abort the next one if it came within its window after a
			// failure (an interrupt), reporting it done without running it.
			"allow_stdin": false, "stop_on_error": false,
		},
	}
	k.wsMu.Lock()
	err = ws.WriteJSON(msg)
	k.wsMu.Unlock()
	if err != nil {
		ws.Close()
		return fmt.Errorf("send to the kernel: %w", err)
	}
	return <-done
}

func (k *jupyterKernel) interrupt() error {
	return k.j.call(context.Background(), http.MethodPost, "/api/kernels/"+url.PathEscape(k.kernelID)+"/interrupt", nil, nil)
}

func (k *jupyterKernel) shutdown() error {
	err := k.j.call(context.Background(), http.MethodDelete, "/api/sessions/"+url.PathEscape(k.sessionID), nil, nil)
	k.wsMu.Lock()
	if k.ws != nil {
		k.ws.Close()
	}
	k.wsMu.Unlock()
	return err
}

// dialQuickAck dials a TCP connection that acknowledges what it reads at
// once. Jupyter writes each message of a run with Nagle's algorithm on, so
// every message after the first waits for the acknowledgement of the one
// before; with delayed acknowledgements that costs 40 ms per run.
func dialQuickAck(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := new(net.Dialer).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	return &quickAckConn{TCPConn: tc, raw: raw}, nil
}

// quickAckConn turns on TCP_QUICKACK before every read: Linux turns it off
// again by itself.
type quickAckConn struct {
	*net.TCPConn
	raw syscall.RawConn
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	_ = c.raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
	return c.TCPConn.Read(p)
}
