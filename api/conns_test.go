package api

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// Past max open connections, the longest-idle ones are closed first and a
// new client is served.
func TestConnLimiterClosesLongestIdle(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const max = 20
	ln := NewConnLimiter(tcp, func() int { return max }, slog.New(slog.DiscardHandler))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), ConnState: ln.ConnState}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	// idleConn makes one keep-alive request and leaves the connection open.
	idleConn := func() net.Conn {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("request on a fresh connection: %v", err)
		}
		resp.Body.Close()
		// The server marks it idle just after the answer is out; wait for
		// that, so that which connection is longest idle is certain.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			ln.mu.Lock()
			s := ln.conns[serverSide(ln, c)]
			idle := s != nil && s.idle
			ln.mu.Unlock()
			if idle {
				break
			}
		}
		return c
	}
	var conns []net.Conn
	for range 3 * max {
		conns = append(conns, idleConn())
	}
	// The oldest were closed by the server (reading an open one would
	// wait for the deadline).
	for i, c := range conns[:2*max] {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("connection %d (of the oldest) read %v, want EOF: not closed", i, err)
		}
	}
	ln.mu.Lock()
	open := len(ln.conns)
	ln.mu.Unlock()
	if open > max {
		t.Errorf("%d connections tracked, want at most %d", open, max)
	}
}

// serverSide returns the server's end of client connection c, as the
// limiter tracks it (the caller holds ln.mu).
func serverSide(ln *ConnLimiter, c net.Conn) net.Conn {
	for sc := range ln.conns {
		if sc.RemoteAddr().String() == c.LocalAddr().String() {
			return sc
		}
	}
	return nil
}
