//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runtime/transfer"
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

// rawConnKey holds, in the context of a request that arrived on a bulk
// connection, that connection (see sendFile).
type rawConnKey struct{}

// connContext is the daemon's http.Server ConnContext.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if rc, ok := c.(*closeNotifyConn); ok {
		return context.WithValue(ctx, rawConnKey{}, rc.UnixConn)
	}
	return ctx
}

// rawConn returns the bulk connection the request came on, nil if it came
// through yamux.
func rawConn(ctx context.Context) *net.UnixConn {
	c, _ := ctx.Value(rawConnKey{}).(*net.UnixConn)
	return c
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

// Downloads by descriptor. Over a bulk connection sandboxd asks for a
// download with FdHeader set; the daemon opens the file as always (inside
// the sandbox, where its path means what the sandbox says), and instead of
// the body it passes the open descriptor over the socket (SCM_RIGHTS),
// with the part of the file to send in FdHeader ("offset length") and an
// empty body. sandboxd then has the kernel send the file from the
// descriptor straight to the client's socket: no byte crosses the daemon
// or the connection. It trusts nothing about the descriptor but what it
// checks: one descriptor, of a regular file, which it only reads, at most
// length bytes of it. Every other answer (an error, HEAD, line mode) is an
// ordinary HTTP response.
const FdHeader = "Sandboxd-Fd"

// fdMarker is the byte the descriptor travels with, just before the
// response; a response itself starts with "HTTP/".
const fdMarker = 0

// sendFd passes f's descriptor over c.
func sendFd(c *net.UnixConn, f *os.File) error {
	_, _, err := c.WriteMsgUnix([]byte{fdMarker}, syscall.UnixRights(int(f.Fd())), nil)
	return err
}

// bulkTransport carries requests on bulk connections: downloads by
// descriptor, everything else as plain HTTP through an http.Transport.
type bulkTransport struct {
	dial func(ctx context.Context) (*net.UnixConn, error)
	http *http.Transport

	mu   sync.Mutex
	idle []*net.UnixConn // connections between two downloads
}

func newBulkTransport(dial func(ctx context.Context) (*net.UnixConn, error)) *bulkTransport {
	b := &bulkTransport{dial: dial}
	b.http = agentTransport(func(ctx context.Context, _, _ string) (net.Conn, error) { return b.dialOp(ctx) }, maxIdleBulk)
	return b
}

// maxIdleBulk is how many bulk connections a session keeps idle for the
// next transfers, of each kind; more are opened when more run at once.
const maxIdleBulk = 2

// dialOp is dial with its error as a dial error, as callers classify it.
func (b *bulkTransport) dialOp(ctx context.Context) (*net.UnixConn, error) {
	c, err := b.dial(ctx)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	return c, nil
}

func (b *bulkTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.URL.Path != "/files/download" || req.Body != nil && req.Body != http.NoBody {
		return b.http.RoundTrip(req)
	}
	return b.download(req)
}

func (b *bulkTransport) CloseIdleConnections() {
	b.http.CloseIdleConnections()
	b.mu.Lock()
	idle := b.idle
	b.idle = nil
	b.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

func (b *bulkTransport) get(ctx context.Context) (*net.UnixConn, error) {
	b.mu.Lock()
	if n := len(b.idle); n > 0 {
		c := b.idle[n-1]
		b.idle = b.idle[:n-1]
		b.mu.Unlock()
		return c, nil
	}
	b.mu.Unlock()
	return b.dialOp(ctx)
}

func (b *bulkTransport) put(c *net.UnixConn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.idle) < maxIdleBulk {
		b.idle = append(b.idle, c)
		return
	}
	c.Close()
}

// download asks for req's file by descriptor.
func (b *bulkTransport) download(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	c, err := b.get(ctx)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	// The request's cancellation and deadline hold until the response
	// head is read.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	out := req.Clone(ctx)
	out.Header.Set(FdHeader, "1")
	err = out.Write(c)
	var file *os.File
	var br *bufio.Reader
	var resp *http.Response
	if err == nil {
		var rest []byte
		if file, rest, err = readFd(c); err == nil {
			br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rest), c), 4<<10)
			resp, err = http.ReadResponse(br, out)
		}
	}
	if err == nil && file == nil {
		// An ordinary response, read from the connection (cancelled with
		// the request until it is closed); the connection is not reused.
		resp.Body = &closeBoth{ReadCloser: resp.Body, c: c, stop: stop}
		ok = true
		return resp, nil
	}
	if !stop() || err != nil {
		if file != nil {
			file.Close()
		}
		return nil, errors.Join(ctx.Err(), err)
	}
	body, err := fileBody(file, resp.Header.Get(FdHeader))
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("agent download by descriptor: %w", err)
	}
	resp.Header.Del(FdHeader)
	resp.ContentLength = body.lr.N
	resp.Header.Set("Content-Length", strconv.FormatInt(body.lr.N, 10))
	resp.Body = body
	// Nothing follows the head of a response by descriptor.
	if br.Buffered() == 0 {
		ok = true
		b.put(c)
	}
	return resp, nil
}

// readFd reads the start of an answer on c: the descriptor that comes
// with fdMarker, and what else arrived with it, or no descriptor and the
// start of an HTTP response.
func readFd(c *net.UnixConn) (*os.File, []byte, error) {
	buf := make([]byte, 4<<10)
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if oobn == 0 {
		return nil, buf[:n], err
	}
	files, err := takeFds(oob[:oobn])
	if err != nil {
		return nil, nil, err
	}
	if len(files) != 1 || flags&syscall.MSG_CTRUNC != 0 || n == 0 || buf[0] != fdMarker {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, errors.New("the agent passed descriptors that were not asked for")
	}
	return files[0], buf[1:n], nil
}

// takeFds returns the descriptors of the control messages in oob, each
// an *os.File that the caller must close.
func takeFds(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "agent download"))
		}
	}
	return files, nil
}

// fileBody checks the descriptor passed for a download and returns the
// body that sends its part: spec is "offset length".
func fileBody(f *os.File, spec string) (*fdBody, error) {
	a, b, _ := strings.Cut(spec, " ")
	offset, err1 := strconv.ParseInt(a, 10, 64)
	length, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || offset < 0 || length < 0 {
		return nil, fmt.Errorf("bad %s %q", FdHeader, spec)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the descriptor is a %v, not a regular file", fi.Mode().Type())
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	return &fdBody{f: f, lr: &io.LimitedReader{R: f, N: length}}, nil
}

// fdBody is a download's body read from the file's descriptor. WriteTo
// keeps the file and its limit visible to the writer, so that an
// *http.response over TCP sends it with sendfile.
type fdBody struct {
	f  *os.File
	lr *io.LimitedReader
}

func (b *fdBody) Read(p []byte) (int, error)         { return b.lr.Read(p) }
func (b *fdBody) WriteTo(w io.Writer) (int64, error) { return io.Copy(w, b.lr) }
func (b *fdBody) Close() error                       { return b.f.Close() }

// closeBoth closes a response body and its connection.
type closeBoth struct {
	io.ReadCloser
	c    net.Conn
	stop func() bool
}

func (b *closeBoth) Close() error {
	b.stop()
	err := b.ReadCloser.Close()
	b.c.Close()
	return err
}

// Uploads by descriptor. sandboxd parses the upload form itself and, for
// each file, sends POST UploadRoute?meta=<the file's metadata as JSON>
// with a chunked body on a bulk connection. The daemon checks the
// metadata, creates the parents and the temp file as for any upload, and
// passes the temp file's descriptor (with fdMarker); sandboxd writes the
// data into it and then sends the body "done", on which the daemon gives
// the file its owner and mode and renames it into place, and answers. An
// error is an ordinary response, without a descriptor. sandboxd checks
// that it got one regular file, and only writes it.
const UploadRoute = "/_sandboxd/upload"

const uploadDone = "done"

// WriteFile implements FileWriter for a session with bulk connections.
func (r router) WriteFile(ctx context.Context, meta transfer.Meta, content io.Reader) error {
	return r.c.bulk.(*bulkTransport).WriteFile(ctx, meta, content)
}

func (b *bulkTransport) WriteFile(ctx context.Context, meta transfer.Meta, content io.Reader) error {
	m, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	c, err := b.get(ctx)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// The head now, the body ("done" or nothing) once the data is written.
	target := UploadRoute + "?" + url.Values{"meta": {string(m)}}.Encode()
	if _, err := io.WriteString(c, "POST "+target+" HTTP/1.1\r\nHost: agent\r\n"+FdHeader+": 1\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
		return err
	}
	f, rest, err := readFd(c)
	if err != nil {
		return err
	}
	if f != nil {
		if len(rest) > 0 {
			f.Close()
			err = errors.New("agent upload: the agent sent more than a descriptor")
		} else {
			err = writeInto(f, content)
		}
		if err != nil {
			return err // the daemon removes its temp file when the connection ends
		}
		if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n0\r\n\r\n", len(uploadDone), uploadDone); err != nil {
			return fmt.Errorf("agent upload: %w", err)
		}
	}
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rest), c), 4<<10)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
	if err != nil {
		return fmt.Errorf("agent upload: %w", err)
	}
	defer resp.Body.Close()
	if f == nil && resp.StatusCode == http.StatusOK {
		return errors.New("agent upload: answered without a descriptor")
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Code, Message string }
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e); err != nil || e.Code == "" {
			return &transfer.Error{Status: resp.StatusCode, Code: codeRuntimeError, Message: "agent upload: " + resp.Status}
		}
		return &transfer.Error{Status: resp.StatusCode, Code: e.Code, Message: e.Message}
	}
	if _, err := io.Copy(io.Discard, resp.Body); err == nil && f != nil && br.Buffered() == 0 && stop() {
		ok = true
		b.put(c)
	}
	return nil
}

// writeInto writes content into f, a descriptor passed by the agent, and
// closes it.
func writeInto(f *os.File, content io.Reader) error {
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("agent upload: the descriptor is a %v, not a regular file", fi.Mode().Type())
	}
	dst := &writeErr{w: f}
	if _, err := transfer.CopyFilled(dst, content); err != nil {
		if dst.err != nil {
			return runtimeError("error writing file: %v", err)
		}
		return err
	}
	return nil
}

// writeErr keeps what its writer failed with: unlike a failure to read the
// upload, the agent's side.
type writeErr struct {
	w   io.Writer
	err error
}

func (w *writeErr) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}
