package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/sandboxd/sandboxd/runtime/agent"
)

// agentStartTimeout bounds an agent's start: the exec's upgrade and the
// agent's first answer (it may start its daemon first).
const agentStartTimeout = 30 * time.Second

// startAgent opens an exec stream running the agent in pod id and returns
// the yamux session over it once the agent has answered.
func (k *Kubernetes) startAgent(ctx context.Context, id string) (*agent.Client, error) {
	cctx, cancel := context.WithTimeout(ctx, agentStartTimeout)
	defer cancel()
	stderr := agent.NewStderrLog(k.log.With("pod", id), k.sessions.LogLimit(id))
	conn, err := k.dial(cctx, id, stderr)
	if err != nil {
		stderr.Close()
		return nil, err
	}
	client, err := agent.Dial(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent session in pod %s: %w", id, err)
	}
	if err := client.Ping(cctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("agent in pod %s %w", id, err)
	}
	k.log.Debug("agent started", "pod", id)
	return client, nil
}

// execAgent runs the agent in pod's sandbox container over pods/exec.
func (k *Kubernetes) execAgent(_ context.Context, pod string, stderr io.Writer) (io.ReadWriteCloser, error) {
	u := k.cs.CoreV1().RESTClient().Post().
		Namespace(k.opts.Namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: sandboxContainer, Command: []string{agentPath, "agent"},
			Stdin: true, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec).URL()
	exec, err := newExecutor(k.rest, u)
	if err != nil {
		return nil, fmt.Errorf("exec in pod %s: %w", pod, err)
	}
	return openStream(exec, stderr, k.log.With("pod", pod, "component", "client-go").Handler()), nil
}

// newExecutor speaks the WebSocket protocol (v5.channel.k8s.io), falling
// back to SPDY where an API server or proxy cannot upgrade to it.
func newExecutor(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// execConn is an exec's stdin and stdout as one io.ReadWriteCloser, the
// connection yamux runs on. The exec runs until Close or until it ends;
// then reads see its error (io.EOF if it ended cleanly).
type execConn struct {
	stdinW  *io.PipeWriter
	stdoutR *io.PipeReader
	cancel  context.CancelFunc
	once    sync.Once
	closed  atomic.Bool // Close was called: what client-go reports next is expected
}

// errExecEnded is what reads see when the agent's exec ends without error.
var errExecEnded = errors.New("agent exec stream ended")

func openStream(exec remotecommand.Executor, stderr io.Writer, log slog.Handler) *execConn {
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	c := &execConn{stdinW: stdinW, stdoutR: stdoutR}
	ctx, cancel := context.WithCancel(withExecLog(context.Background(), log, &c.closed))
	c.cancel = cancel
	go func() {
		err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW, Stderr: stderr})
		if err == nil {
			err = errExecEnded
		}
		stdoutW.CloseWithError(err)
		stdinR.CloseWithError(err)
		if cl, ok := stderr.(io.Closer); ok {
			cl.Close()
		}
	}()
	return c
}

func (c *execConn) Read(p []byte) (int, error)  { return c.stdoutR.Read(p) }
func (c *execConn) Write(p []byte) (int, error) { return c.stdinW.Write(p) }

// Close ends the exec: closing stdin lets the agent's bridge exit, and the
// cancel cuts a stream that does not end by itself.
func (c *execConn) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		c.stdinW.Close()
		c.stdoutR.Close()
		c.cancel()
	})
	return nil
}
