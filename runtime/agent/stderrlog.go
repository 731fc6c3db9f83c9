package agent

import (
	"bytes"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Lines of an agent's stderr logged per second, and in a burst.
const (
	stderrLogRate  = 10
	stderrLogBurst = 100
)

// NewStderrLimit returns the limiter that bounds the lines of one sandbox's
// agent stderr that sandboxd logs; keep it across restarts of the agent:
// sandbox code can write there.
func NewStderrLimit() *rate.Limiter { return rate.NewLimiter(stderrLogRate, stderrLogBurst) }

// NewStderrLog returns a writer for an agent's stderr (its exec stream's)
// that logs it line by line to log, at most as fast as limit allows.
func NewStderrLog(log *slog.Logger, limit *rate.Limiter) io.WriteCloser {
	return &lineLogger{log: log, limit: limit}
}

// maxLogLine bounds the unterminated line kept between writes: a longer
// one is logged in pieces.
const maxLogLine = 64 << 10

// lineLogger logs each line written to it as a warning: the agent writes
// on stderr only its warnings and errors, and those of its daemon. The exec
// stream's reader writes to it, so it needs no goroutine of its own. The
// lock orders Close after a write still in flight: client-go's executor can
// return before its stderr copy has finished.
type lineLogger struct {
	mu      sync.Mutex
	log     *slog.Logger
	partial []byte
	limit   *rate.Limiter
	dropped atomic.Int64 // lines not logged and not yet reported
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			break
		}
		l.emit(append(l.partial, p[:i]...))
		p = p[i+1:]
	}
	l.partial = append(l.partial, p...)
	if len(l.partial) >= maxLogLine {
		l.emit(l.partial)
	}
	return n, nil
}

// emit logs line, or counts it when over the rate, and empties the
// partial line.
func (l *lineLogger) emit(line []byte) {
	if l.limit.Allow() {
		l.log.Warn("agent", "line", string(line))
	} else if l.dropped.Add(1) == 1 {
		// The count is reported a second after the first drop: at most
		// one line a second for a flood, and seen even if it ends.
		time.AfterFunc(time.Second, l.reportDropped)
	}
	l.partial = l.partial[:0]
}

func (l *lineLogger) reportDropped() {
	if n := l.dropped.Swap(0); n > 0 {
		l.log.Warn("agent log lines dropped (over the rate limit)", "dropped", n)
	}
}

// Close logs an unterminated last line and what was dropped.
func (l *lineLogger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.emit(l.partial)
	}
	l.reportDropped()
	return nil
}
