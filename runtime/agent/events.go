//go:build linux

package agent

import (
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Event types of the execd stream (reference §2.3).
const (
	evInit     = "init"
	evStdout   = "stdout"
	evStderr   = "stderr"
	evError    = "error"
	evComplete = "execution_complete"
	evPing     = "ping"
)

// pingInterval is how often a running command's stream carries a ping event,
// which keeps proxies with read timeouts from closing an idle stream.
const pingInterval = 3 * time.Second

// eventHold is how long a command's event may wait for the ones after it
// (see eventStream): short enough not to be noticed in a stream of output,
// long enough for a quick command (`true` takes 1–3 ms) to answer in one
// write.
const eventHold = 10 * time.Millisecond

// eventStream writes execd events to an HTTP response: each event is one
// compact JSON object followed by "\n\n", with no SSE "data:" prefix. Headers
// are committed on the first event written out, so a handler can still
// answer with a JSON error before that. It is safe for concurrent use.
//
// A stream with a hold lets an event wait up to that long for the ones
// after it, so that they share one write (and one trip through yamux,
// sandboxd and the client's socket): a command that ends within the hold
// answers in one write, with a Content-Length, and a chatty one in one
// write per hold rather than per line.
type eventStream struct {
	mu        sync.Mutex
	w         http.ResponseWriter
	rc        *http.ResponseController
	hold      time.Duration
	flusher   *time.Timer // flushes held events; nil until needed
	armed     bool        // the flusher will run
	pending   []byte      // events held before the headers are committed
	committed bool
	ended     bool  // the last event is written: w is the handler's again
	err       error // first write error; later writes are skipped
}

// maxPending bounds the events held before the headers are committed.
const maxPending = 64 << 10

func newEventStream(w http.ResponseWriter) *eventStream {
	return &eventStream{w: w, rc: http.NewResponseController(w)}
}

// newHeldEventStream returns a stream whose events wait up to hold for
// the ones after them.
func newHeldEventStream(w http.ResponseWriter, hold time.Duration) *eventStream {
	es := newEventStream(w)
	es.hold = hold
	return es
}

// write sends already-encoded events; they reach the client within the
// stream's hold.
func (s *eventStream) write(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.send(p, s.hold <= 0)
}

// send writes p, or holds it, and flushes now if asked to. It reports
// whether the stream still takes events. Called with mu held.
func (s *eventStream) send(p []byte, now bool) bool {
	if s.ended || s.err != nil {
		return false
	}
	if !s.committed && !now && len(s.pending)+len(p) <= maxPending {
		s.pending = append(s.pending, p...)
		s.arm()
		return true
	}
	s.out(p)
	if now {
		s.flush()
	} else {
		s.arm()
	}
	return s.err == nil
}

// out writes p after the held events, committing the headers first.
func (s *eventStream) out(p []byte) {
	if !s.committed {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
		s.committed = true
		p = append(s.pending, p...)
		s.pending = nil
	}
	if _, err := s.w.Write(p); err != nil {
		s.err = err
	}
}

func (s *eventStream) flush() {
	s.armed = false
	if s.err != nil {
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
}

// arm makes sure what is written now is flushed within the hold.
func (s *eventStream) arm() {
	if s.armed {
		return
	}
	s.armed = true
	if s.flusher == nil {
		s.flusher = time.AfterFunc(s.hold, s.flushHeld)
	} else {
		s.flusher.Reset(s.hold)
	}
}

func (s *eventStream) flushHeld() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.armed || s.ended {
		return
	}
	if !s.committed {
		s.out(nil)
	}
	s.flush()
}

// end writes the stream's last event. If nothing was written before, the
// whole response goes out now in one write with its length, before the
// handler's cleanup; otherwise the handler's return sends the last event
// together with the end of the response.
func (s *eventStream) end(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.err != nil {
		return
	}
	whole := !s.committed
	if whole {
		s.w.Header().Set("Content-Length", strconv.Itoa(len(s.pending)+len(p)))
	}
	s.out(p)
	if whole {
		s.flush()
	}
	s.ended = true
	if s.flusher != nil {
		s.flusher.Stop()
	}
}

func (s *eventStream) text(typ, text string) {
	s.write(appendTextEvent(nil, typ, text, time.Now().UnixMilli()))
}

// complete ends the stream with execution_complete.
func (s *eventStream) complete(elapsed time.Duration) {
	b := strconv.AppendInt([]byte(`{"type":"`+evComplete+`","execution_time":`), elapsed.Milliseconds(), 10)
	s.end(appendTimestamp(b, time.Now().UnixMilli()))
}

// fail ends the stream with an error event. For command failures evalue is the exit code
// (the SDKs parse it as an int); anything else yields a non-numeric evalue.
func (s *eventStream) fail(evalue, traceback string) {
	b := []byte(`{"type":"` + evError + `","error":{"ename":"CommandExecError","evalue":`)
	b = appendJSONString(b, evalue)
	b = append(b, `,"traceback":[`...)
	b = appendJSONString(b, traceback)
	b = append(b, "]}"...)
	s.end(appendTimestamp(b, time.Now().UnixMilli()))
}

// pingEvery sends a ping event every interval, at once, until the stream
// ends or stop is called. No goroutine waits between pings.
func (s *eventStream) pingEvery(interval time.Duration) (stop func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t *time.Timer
	t = time.AfterFunc(interval, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.send(appendTextEvent(nil, evPing, "pong", time.Now().UnixMilli()), true) {
			t.Reset(interval)
		}
	})
	return t.Stop
}

// appendTextEvent appends {"type":typ,"text":text,"timestamp":ts} and the
// event separator to dst.
func appendTextEvent[T string | []byte](dst []byte, typ string, text T, ts int64) []byte {
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","text":`...)
	dst = appendJSONString(dst, text)
	return appendTimestamp(dst, ts)
}

func appendTimestamp(dst []byte, ts int64) []byte {
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	return append(dst, "}\n\n"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Unlike encoding/json it also
// escapes U+0085 (and, like it, U+2028 and U+2029 and all control
// characters), because clients split the stream with Python's
// str.splitlines, which breaks lines at all of them. Invalid UTF-8 becomes
// U+FFFD.
func appendJSONString[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		// The conversion of at most UTFMax bytes does not allocate.
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == 0x85 || r == 0x2028 || r == 0x2029:
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', hexDigits[r>>12], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
