package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// MaxResponseHeaderBytes bounds the response headers sandboxd reads from a
// sandbox.
const MaxResponseHeaderBytes = 64 << 10

// Client is the host side of the connection to one agent: HTTP requests to
// the execd API travel over yamux streams on the agent's stdin and stdout.
type Client struct {
	session   *yamux.Session
	transport *http.Transport
	// bulk carries file transfers on connections of their own (bulk.go),
	// when the session's end can open them; nil otherwise.
	bulk interface {
		http.RoundTripper
		CloseIdleConnections()
	}
}

// Dial starts a yamux client on conn, the agent's attached stdin and stdout.
func Dial(conn io.ReadWriteCloser) (*Client, error) {
	return dial(conn)
}

// dial starts sandboxd's end of a session, bounded as streams.go says.
func dial(conn io.ReadWriteCloser) (*Client, error) {
	open := newOpenStreams()
	fc := framed(conn)
	fc.in = &inboundFilter{r: fc.r, open: open}
	session, err := yamux.Client(fc, clientConfig())
	if err != nil {
		return nil, fmt.Errorf("agent: start yamux client: %w", err)
	}
	c := &Client{session: session}
	// Every new HTTP connection is a new stream; the URL's host is
	// irrelevant.
	c.transport = agentTransport(func(context.Context, string, string) (net.Conn, error) {
		conn, err := openStream(session, open)
		if err != nil {
			// A dial error, as callers classify failures.
			return nil, &net.OpError{Op: "dial", Net: "yamux", Err: err}
		}
		return conn, nil
	}, 64)
	return c, nil
}

func agentTransport(dial func(context.Context, string, string) (net.Conn, error), idle int) *http.Transport {
	return &http.Transport{
		DialContext: dial,
		// Headers come from the sandbox (its servers, or a replaced agent):
		// Go's default of 10 MiB per response would let it grow sandboxd's
		// memory by that much per request.
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		Proxy:                  nil,
		DisableCompression:     true, // the agent is local: compression only costs CPU
		MaxIdleConns:           idle,
		MaxIdleConnsPerHost:    idle,
		IdleConnTimeout:        90 * time.Second,
	}
}

// Transport returns the RoundTripper that reaches the agent. The URL's
// scheme must be http; its host is ignored.
func (c *Client) Transport() http.RoundTripper {
	if c.bulk == nil {
		return c.transport
	}
	return router{c}
}

// FileWriter is a transport that writes uploaded files one by one.
type FileWriter interface {
	// WriteFile writes content to the file meta describes. A refusal or
	// failure of the agent is a *transfer.Error; an error reading content
	// is returned as it is.
	WriteFile(ctx context.Context, meta transfer.Meta, content io.Reader) error
}

// Files returns the file writer of t, a transport of a Client
// (Transport), or nil if its session has no bulk connections (bulk.go).
func Files(t http.RoundTripper) FileWriter {
	if fw, ok := t.(FileWriter); ok {
		return fw
	}
	return nil
}

// router sends file transfers through the bulk transport, the rest
// through the session.
type router struct{ c *Client }

func (r router) RoundTrip(req *http.Request) (*http.Response, error) {
	if IsBulk(req) {
		return r.c.bulk.RoundTrip(req)
	}
	return r.c.transport.RoundTrip(req)
}

// IsBulk says whether req is a file transfer of the execd API, which may
// be of any size.
func IsBulk(req *http.Request) bool {
	switch req.URL.Path {
	case "/files/upload":
		return req.Method == http.MethodPost
	case "/files/download":
		return req.Method == http.MethodGet || req.Method == http.MethodHead
	}
	return false
}

// Ping checks that the agent at the other end answers.
func (c *Client) Ping(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/ping", nil)
	resp, err := c.transport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("did not answer: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered its ping with %s", resp.Status)
	}
	return nil
}

// Done is closed when the session ends: the agent exited or was killed, or
// Close was called.
func (c *Client) Done() <-chan struct{} { return c.session.CloseChan() }

// Close ends the session and with it every request in flight.
func (c *Client) Close() error {
	c.transport.CloseIdleConnections()
	if c.bulk != nil {
		c.bulk.CloseIdleConnections()
	}
	return c.session.Close()
}

var discardLogger = slog.New(slog.DiscardHandler)

// yamuxConfig is shared by both ends of the connection.
func yamuxConfig(logger *slog.Logger) *yamux.Config {
	c := yamux.DefaultConfig()
	// The connection is a local pipe whose end is seen as EOF, and a paused
	// sandbox cannot answer pings: keep-alives would only cause harm.
	c.EnableKeepAlive = false
	c.MaxStreamWindowSize = 1 << 20
	c.LogOutput = nil
	c.Logger = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	return c
}
