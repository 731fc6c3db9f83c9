package kubernetes

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// withExecLog returns ctx carrying the logger client-go uses for one exec
// stream (it takes it from the context the stream runs with): records go
// to h, and those that come after closed is set, at DEBUG. Closing a stream
// ourselves (an agent session's end, a sandbox's delete) makes client-go's
// copy loops fail on the closed connection, each reported at ERROR
// ("Copying stdout failed … use of closed network connection"): three to
// five lines per delete for what is the expected end. A stream that breaks
// on its own still logs at its level.
func withExecLog(ctx context.Context, h slog.Handler, closed *atomic.Bool) context.Context {
	return klog.NewContext(ctx, logr.FromSlogHandler(execLogHandler{Handler: h, closed: closed}))
}

// execLogHandler demotes the records of a closed exec stream to DEBUG.
type execLogHandler struct {
	slog.Handler
	closed *atomic.Bool
}

func (h execLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.closed.Load() && r.Level > slog.LevelDebug {
		r.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, r.Level) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h execLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return execLogHandler{Handler: h.Handler.WithAttrs(attrs), closed: h.closed}
}

func (h execLogHandler) WithGroup(name string) slog.Handler {
	return execLogHandler{Handler: h.Handler.WithGroup(name), closed: h.closed}
}
