//go:build linux

package kubernetes

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/sandboxd/sandboxd/runtime/agent"
)

// agentRuntime is a CRI streaming runtime whose exec serves sandboxd's
// agent in process, as `sandboxd agent` does in a pod, after a line on
// stderr.
type agentRuntime struct {
	mu   sync.Mutex
	cmds [][]string
	// protocols are the client's upgrades, in order ("websocket",
	// "spdy"), as the front server saw them.
	protocols []string
}

func (r *agentRuntime) saw(protocol string) {
	r.mu.Lock()
	r.protocols = append(r.protocols, protocol)
	r.mu.Unlock()
}

func (r *agentRuntime) Exec(ctx context.Context, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, _ <-chan remotecommandserver.TerminalSize) error {
	r.mu.Lock()
	r.cmds = append(r.cmds, cmd)
	r.mu.Unlock()
	io.WriteString(errw, "agent: warming up\n")
	return agent.Run(ctx, in, out, nil)
}

func (r *agentRuntime) Attach(context.Context, string, io.Reader, io.WriteCloser, io.WriteCloser, bool, <-chan remotecommandserver.TerminalSize) error {
	return nil
}

func (r *agentRuntime) PortForward(context.Context, string, int32, io.ReadWriteCloser) error {
	return nil
}

// streamingServer is the kubelet's streaming server behind httptest, as
// the API server fronts it: SPDY goes straight through, WebSocket
// (v5.channel.k8s.io) is translated to SPDY by the API server's own
// translator. rejectWebSocket refuses WebSocket upgrades instead, as an
// older API server or a proxy would.
func streamingServer(t *testing.T, rt *agentRuntime, rejectWebSocket bool) (streaming.Server, *httptest.Server) {
	var s streaming.Server
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			if r.Header.Get("Upgrade") != "" {
				rt.saw("spdy")
			}
			s.ServeHTTP(w, r)
			return
		}
		rt.saw("websocket")
		if rejectWebSocket {
			http.Error(w, "no websockets here", http.StatusBadRequest)
			return
		}
		kubelet, _ := url.Parse(ts.URL + r.URL.Path)
		proxy.NewStreamTranslatorHandler(kubelet, nil, 0, proxy.Options{Stdin: true, Stdout: true, Stderr: true}).ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	u, _ := url.Parse(ts.URL)
	cfg := streaming.DefaultConfig
	cfg.BaseURL = u
	var err error
	if s, err = streaming.NewServer(cfg, rt); err != nil {
		t.Fatal(err)
	}
	return s, ts
}

func execURL(t *testing.T, s streaming.Server) *url.URL {
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{agentPath, "agent"}, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The agent's yamux session runs over a real exec stream with each of
// client-go's executors: several requests share the one stream, and the
// agent's stderr reaches sandboxd's log.
func TestExecTransport(t *testing.T) {
	tests := []struct {
		name      string
		reject    bool
		exec      func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error)
		protocols string // the upgrades tried
	}{
		{"websocket", false, func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		}, "websocket"},
		{"spdy", false, func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
			return remotecommand.NewSPDYExecutor(cfg, "POST", u)
		}, "spdy"},
		{"fallback to spdy", true, newExecutor, "websocket spdy"},
		{"fallback prefers websocket", false, newExecutor, "websocket"},
	}
	var demoted atomic.Int32 // subtests whose close client-go reported
	defer func() {
		if demoted.Load() == 0 {
			t.Error("no executor reported the stream's close: the log check above proves nothing")
		}
	}()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &agentRuntime{}
			s, ts := streamingServer(t, rt, tt.reject)
			exec, err := tt.exec(&rest.Config{Host: ts.URL}, execURL(t, s))
			if err != nil {
				t.Fatal(err)
			}
			var logged, clientGo lockedBuffer
			stderr := agent.NewStderrLog(slog.New(slog.NewTextHandler(&logged, nil)), agent.NewStderrLimit())
			conn := openStream(exec, stderr, slog.NewTextHandler(&clientGo, &slog.HandlerOptions{Level: slog.LevelDebug}))
			client, err := agent.Dial(conn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				// Our own close of the stream is no error: what client-go's
				// copy loops report of it (whether they do depends on
				// timing) is at DEBUG.
				client.Close()
				for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !strings.Contains(clientGo.String(), `msg="Copying std`); {
					time.Sleep(10 * time.Millisecond)
				}
				out := clientGo.String()
				if strings.Contains(out, "level=ERROR") {
					t.Errorf("client-go logged the stream's close as an error:\n%s", out)
				}
				if strings.Contains(out, `level=DEBUG msg="Copying std`) {
					demoted.Add(1)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for range 3 {
				if err := client.Ping(ctx); err != nil {
					t.Fatalf("ping over the exec stream: %v", err)
				}
			}
			echo(t, client.Transport(), "echo over-exec", "over-exec")
			rt.mu.Lock()
			defer rt.mu.Unlock()
			// The translator's own SPDY dial to the kubelet counts too.
			got := strings.Join(rt.protocols, " ")
			if tt.protocols == "websocket" {
				got = strings.TrimSuffix(got, " spdy")
			}
			if got != tt.protocols {
				t.Errorf("upgrades %q, want %q", got, tt.protocols)
			}
			if len(rt.cmds) != 1 || strings.Join(rt.cmds[0], " ") != agentPath+" agent" {
				t.Errorf("execs %q, want one of the agent", rt.cmds)
			}
			if !waitFor(func() bool { return strings.Contains(logged.String(), "warming up") }) {
				t.Errorf("agent stderr not logged: %q", logged.String())
			}
		})
	}
}

// When the exec cannot start (the token is spent), reads fail with the
// stream's error instead of hanging.
func TestExecTransportFailure(t *testing.T) {
	rt := &agentRuntime{}
	s, ts := streamingServer(t, rt, false)
	u := execURL(t, s)
	if _, err := http.Get(u.String()); err != nil { // spends the one-time token
		t.Fatal(err)
	}
	exec, err := newExecutor(&rest.Config{Host: ts.URL}, u)
	if err != nil {
		t.Fatal(err)
	}
	conn := openStream(exec, io.Discard, slog.DiscardHandler)
	done := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read of a failed exec succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("read of a failed exec hangs")
	}
}

func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}
