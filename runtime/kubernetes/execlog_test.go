package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/remotecommand"
)

// closingExecutor reports stream errors as client-go's remotecommand does
// (runtime.HandleErrorWithContext with the stream's context): one while
// the stream runs, then, once the stream is cancelled, what its copy loops
// report on the closed connection.
type closingExecutor struct{ running chan struct{} }

func (e closingExecutor) Stream(remotecommand.StreamOptions) error {
	return errors.New("not used")
}

func (e closingExecutor) StreamWithContext(ctx context.Context, _ remotecommand.StreamOptions) error {
	runtime.HandleErrorWithContext(ctx, errors.New("stream reset by the API server"), "Copying stdout failed")
	close(e.running)
	<-ctx.Done()
	closed := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	for _, msg := range []string{"Copying stdout failed", "Copying stderr failed", "Copying stdin failed"} {
		runtime.HandleErrorWithContext(ctx, closed, msg)
	}
	return closed
}

func TestExecCloseLogsNoError(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf lockedBuffer // written by the stream's goroutine
		h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level})
		e := closingExecutor{running: make(chan struct{})}
		c := openStream(e, nil, h)
		<-e.running
		c.Close()
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("read after the stream ended")
		}
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(buf.String(), "Copying") < 4 && level == slog.LevelDebug && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		out := buf.String()
		errors := 0
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.Contains(line, "level=ERROR") {
				errors++
				if !strings.Contains(line, "stream reset by the API server") {
					t.Errorf("level %v: an error after the stream's own close: %s", level, line)
				}
			}
		}
		if errors != 1 {
			t.Errorf("level %v: %d ERROR lines, want 1 (the break before the close):\n%s", level, errors, out)
		}
		if level == slog.LevelDebug && strings.Count(out, "level=DEBUG") < 3 {
			t.Errorf("the errors after the close are not kept at DEBUG:\n%s", out)
		}
	}
}

// lockedBuffer collects a log written from other goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
