//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/hashicorp/yamux"
)

// ServeStdio serves h over yamux on stdin and stdout, the other end of
// Dial, until stdin reaches EOF or ctx is done. The agent and the egress
// daemon both speak it on their exec streams.
func ServeStdio(ctx context.Context, h http.Handler, stdin io.Reader, stdout io.Writer, logger *slog.Logger) error {
	sess, err := yamux.Server(framed(stdioConn{stdin, stdout}), yamuxConfig(logger))
	if err != nil {
		return fmt.Errorf("start yamux server: %w", err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()

	srv := &http.Server{
		Handler:  h,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	err = srv.Serve(sess)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if sess.IsClosed() || errors.Is(err, yamux.ErrSessionShutdown) {
		return nil
	}
	return fmt.Errorf("serve: %w", err)
}
