package api

import (
	"context"
	"io"
	"net/http"
	"time"
)

// errReadTimeout is a forwarded request whose server did not send its
// response headers within [server] proxy_read_timeout. It is a timeout
// (net.Error), which backendFailure answers 504 BACKEND_TIMEOUT.
type errReadTimeout struct{ d time.Duration }

func (e errReadTimeout) Error() string {
	return "no response within " + e.d.String() + " ([server] proxy_read_timeout)"
}
func (errReadTimeout) Timeout() bool   { return true }
func (errReadTimeout) Temporary() bool { return true }

// readTimeout bounds rt's wait for response headers by d (none if d is 0).
// Only the wait: a response that has started streams as long as it lasts.
func readTimeout(rt http.RoundTripper, d time.Duration) http.RoundTripper {
	if d <= 0 {
		return rt
	}
	return headerTimeout{rt: rt, d: d}
}

type headerTimeout struct {
	rt http.RoundTripper
	d  time.Duration
}

func (h headerTimeout) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(r.Context())
	timer := time.AfterFunc(h.d, func() { cancel(errReadTimeout{h.d}) })
	resp, err := h.rt.RoundTrip(r.WithContext(ctx))
	if !timer.Stop() && err != nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	// The body is read under ctx: it is released once the body is closed.
	// An upgraded connection's body must stay an io.ReadWriteCloser; the
	// request's end releases its ctx.
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
