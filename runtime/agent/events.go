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

// eventStream writes execd events to an HTTP response: each event is one
// compact JSON object followed by "\n\n", with no SSE "data:" prefix. Headers
// are committed on the first event, so a handler can still answer with a JSON
// error before that. It is safe for concurrent use.
type eventStream struct {
	mu        sync.Mutex
	w         http.ResponseWriter
	rc        *http.ResponseController
	committed bool
	err       error // first write error; later writes are skipped
}

func newEventStream(w http.ResponseWriter) *eventStream {
	return &eventStream{w: w, rc: http.NewResponseController(w)}
}

// write sends already-encoded events and flushes them.
func (s *eventStream) write(p []byte) { s.send(p, true) }

// writeLast sends the stream's last event without flushing it: the
// handler's return then sends it together with the end of the response, one
// write through the exec stream to sandboxd instead of two.
func (s *eventStream) writeLast(p []byte) { s.send(p, false) }

func (s *eventStream) send(p []byte, flush bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if !s.committed {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
		s.committed = true
	}
	if _, err := s.w.Write(p); err != nil {
		s.err = err
		return
	}
	if !flush {
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
}

func (s *eventStream) text(typ, text string) {
	s.write(appendTextEvent(nil, typ, text, time.Now().UnixMilli()))
}

// complete ends the stream with execution_complete.
func (s *eventStream) complete(elapsed time.Duration) {
	b := strconv.AppendInt([]byte(`{"type":"`+evComplete+`","execution_time":`), elapsed.Milliseconds(), 10)
	s.writeLast(appendTimestamp(b, time.Now().UnixMilli()))
}

// fail ends the stream with an error event. For command failures evalue is the exit code
// (the SDKs parse it as an int); anything else yields a non-numeric evalue.
func (s *eventStream) fail(evalue, traceback string) {
	b := []byte(`{"type":"` + evError + `","error":{"ename":"CommandExecError","evalue":`)
	b = appendJSONString(b, evalue)
	b = append(b, `,"traceback":[`...)
	b = appendJSONString(b, traceback)
	b = append(b, "]}"...)
	s.writeLast(appendTimestamp(b, time.Now().UnixMilli()))
}

// pingUntil sends a ping event every interval until done is closed.
func (s *eventStream) pingUntil(done <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			s.text(evPing, "pong")
		}
	}
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
