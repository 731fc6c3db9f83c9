//go:build linux

package agent

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/yamux"
)

// A sandbox answering with huge headers costs sandboxd at most
// MaxResponseHeaderBytes per request: the transport refuses the rest.
func TestClientBoundsResponseHeaders(t *testing.T) {
	c, _, _ := dialPipes(t, func(stdin io.Reader, stdout io.Writer) error {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Pad", strings.Repeat("a", 4*MaxResponseHeaderBytes))
		})}
		sess, err := yamux.Server(framed(stdioConn{stdin, stdout}), yamuxConfig(slog.New(slog.DiscardHandler)))
		if err != nil {
			return err
		}
		defer sess.Close()
		return srv.Serve(sess)
	})
	resp, err := (&http.Client{Transport: c.Transport()}).Get("http://agent/big")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a response with %d bytes of headers was read: %s", 4*MaxResponseHeaderBytes, resp.Status)
	}
	if !strings.Contains(err.Error(), "header") {
		t.Errorf("err = %v, want the header limit", err)
	}
}
