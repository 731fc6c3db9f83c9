package agent

import (
	"bytes"
	"io"
	"log/slog"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/time/rate"
)

// What of an agent's stderr sandboxd logs, per sandbox: lines per second
// and in a burst, and bytes of them (as cut and cleaned, see clean) per
// second and in a burst. A logged line is at most MaxLoggedLine bytes
// before the log handler escapes it, which at most doubles it.
const (
	stderrLogRate      = 10
	stderrLogBurst     = 100
	stderrLogBytes     = 4 << 10
	stderrLogByteBurst = 64 << 10
	MaxLoggedLine      = 1 << 10
)

// LogLimit is the budget of one sandbox's relayed log: lines and bytes.
type LogLimit struct {
	lines, bytes *rate.Limiter
}

// NewStderrLimit returns the budget of one sandbox's agent stderr that
// sandboxd logs; keep it across restarts of the agent: sandbox code can
// write there.
func NewStderrLimit() *LogLimit {
	return &LogLimit{rate.NewLimiter(stderrLogRate, stderrLogBurst), rate.NewLimiter(stderrLogBytes, stderrLogByteBurst)}
}

// allow takes a line of n bytes from the budget, if it has room.
func (l *LogLimit) allow(n int) bool {
	now := time.Now()
	return l.bytes.AllowN(now, n) && l.lines.AllowN(now, 1)
}

// NewStderrLog returns a writer for an agent's stderr (its exec stream's)
// that logs it line by line to log, within limit.
func NewStderrLog(log *slog.Logger, limit *LogLimit) io.WriteCloser {
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
	limit   *LogLimit

	dropMu       sync.Mutex
	dropped      int64 // lines not logged and not yet reported
	droppedBytes int64 // their bytes, as cut and cleaned
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

// emit logs line, or counts it when over the budget, and empties the
// partial line.
func (l *lineLogger) emit(line []byte) {
	text, cut := clean(line)
	if l.limit.allow(len(text)) {
		if cut > 0 {
			l.log.Warn("agent", "line", text, "cut_bytes", cut)
		} else {
			l.log.Warn("agent", "line", text)
		}
	} else {
		l.dropMu.Lock()
		l.dropped++
		l.droppedBytes += int64(len(text))
		if l.dropped == 1 {
			// The count is reported a second after the first drop: at
			// most one line a second for a flood, and seen even if it ends.
			time.AfterFunc(time.Second, l.reportDropped)
		}
		l.dropMu.Unlock()
	}
	l.partial = l.partial[:0]
}

func (l *lineLogger) reportDropped() {
	l.dropMu.Lock()
	n, b := l.dropped, l.droppedBytes
	l.dropped, l.droppedBytes = 0, 0
	l.dropMu.Unlock()
	if n > 0 {
		l.log.Warn("agent log lines dropped (over the rate limit)", "dropped", n, "dropped_bytes", b)
	}
}

// clean returns line as it is logged, cut to MaxLoggedLine bytes, with
// control characters, line separators and invalid UTF-8 replaced by '?'
// (a handler would escape each into up to 6 bytes), and how many bytes
// were cut.
func clean(line []byte) (string, int) {
	cut := 0
	if len(line) > MaxLoggedLine {
		cut = len(line) - MaxLoggedLine
		line = line[:MaxLoggedLine]
	}
	b := make([]byte, 0, len(line))
	for len(line) > 0 {
		r, size := utf8.DecodeRune(line)
		switch {
		case r == '\t':
			b = append(b, '\t')
		case r == utf8.RuneError && size <= 1, unicode.IsControl(r), r == '\u2028', r == '\u2029':
			b = append(b, '?')
		default:
			b = append(b, line[:size]...)
		}
		line = line[size:]
	}
	return string(b), cut
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
