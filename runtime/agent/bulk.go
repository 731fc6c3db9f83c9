//go:build linux

package agent

import (
	"bufio"
	"context"
	"io"
	"net"
	"sync"
)

// Bulk connections. A file transfer through yamux costs every byte a frame,
// a copy into the stream's buffer and window updates in both directions,
// and it shares one socket with every other stream of the sandbox. Where
// sandboxd reaches the daemon directly it opens, for each transfer, a
// connection of its own to the daemon's socket that carries plain HTTP/1.1
// instead of yamux (kept idle between transfers, like any HTTP
// connection): the kernel's buffers and scheduling make it fair to the
// other streams, and the daemon sends a download with sendfile. The
// daemon tells the two apart by the first byte the client sends: yamux
// opens with its version, 0, HTTP with a method's letter.

// yamuxVersion is the first byte of every yamux frame.
const yamuxVersion = 0

// bufferedConn is a connection read through a buffer that already holds
// its first bytes. Writes, ReadFrom (sendfile, splice) and the rest are the
// connection's own.
type bufferedConn struct {
	*net.UnixConn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// WriteTo must drain the buffer first; the connection's own would not.
func (c *bufferedConn) WriteTo(w io.Writer) (int64, error) { return c.r.WriteTo(w) }

// rawConnKey marks the context of requests that arrived on a bulk
// connection (see sendFile).
type rawConnKey struct{}

// connContext is the daemon's http.Server ConnContext.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.(*closeNotifyConn); ok {
		return context.WithValue(ctx, rawConnKey{}, true)
	}
	return ctx
}

// onRawConn says whether the request came on a bulk connection, whose
// response can be written by the kernel (sendfile) straight from a file.
func onRawConn(ctx context.Context) bool {
	raw, _ := ctx.Value(rawConnKey{}).(bool)
	return raw
}

// oneConnListener hands out one connection, then waits until it is closed:
// http.Server.Serve on it serves that connection alone and returns after.
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
}

func newOneConnListener(c *bufferedConn) *oneConnListener {
	l := &oneConnListener{closed: make(chan struct{})}
	l.conn = &closeNotifyConn{bufferedConn: c, l: l}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.conn })
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// closeNotifyConn ends its listener's Accept when the server closes it.
type closeNotifyConn struct {
	*bufferedConn
	l    *oneConnListener
	done sync.Once
}

func (c *closeNotifyConn) Close() error {
	err := c.bufferedConn.Close()
	c.done.Do(func() { close(c.l.closed) })
	return err
}
