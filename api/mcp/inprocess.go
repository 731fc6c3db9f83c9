package mcp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// handlerTransport sends requests to an http.Handler in this process: the
// /mcp endpoint calls the server's own API this way, through the same
// middleware (authentication, limits, access log) as any client, with
// no socket, no connection slot and no way around the key.
type handlerTransport struct {
	h http.Handler
}

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	sreq := req.Clone(ctx)
	sreq.RequestURI = req.URL.RequestURI()
	sreq.RemoteAddr = "in-process"
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		var err error
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("handler panic: %v", v)
			}
			w.WriteHeader(http.StatusOK) // no-op when the handler wrote one
			pw.CloseWithError(err)
		}()
		t.h.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	// The handler's writes wait for the reader, so a request that ends
	// (its context done) closes the pipe and frees the handler.
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          &stopBody{ReadCloser: pr, stop: stop},
		ContentLength: -1,
		Request:       req,
	}, nil
}

// stopBody releases the context watch when the body is closed.
type stopBody struct {
	io.ReadCloser
	stop func() bool
}

func (b *stopBody) Close() error {
	b.stop()
	return b.ReadCloser.Close()
}

// pipeResponse is the handler's side: headers go out on the first write or
// WriteHeader, the body through the pipe.
type pipeResponse struct {
	header http.Header
	body   *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
	sent   http.Header
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(code int) {
	if code < 200 {
		return // interim responses are not passed on
	}
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Flush is a no-op: every write reaches the reader as it is made.
func (w *pipeResponse) Flush() {}
