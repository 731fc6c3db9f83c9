//go:build linux

package agent

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAppendJSONString(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "hello world", `"hello world"`},
		{"quotes and backslash", `a"b\c`, `"a\"b\\c"`},
		{"controls", "\t\n\r\x01\x1f", `"\t\n\r\u0001\u001f"`},
		{"NUL", "a\x00b", `"a\u0000b"`},
		{"NEL", "a\u0085b", `"a\u0085b"`},
		{"line and paragraph separators", "a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"splitlines controls", "\v\f\x1c\x1d\x1e", `"\u000b\u000c\u001c\u001d\u001e"`},
		{"multibyte", "héllo 世界 🙂", `"héllo 世界 🙂"`},
		{"invalid UTF-8", "a\xffb\xc3", `"a\ufffdb\ufffd"`},
		{"truncated rune then ASCII", "\xe4\xb8x", `"\ufffd\ufffdx"`},
		{"html is not escaped", "<a&b>", `"<a&b>"`},
		{"empty", "", `""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(appendJSONString(nil, tt.in)); got != tt.want {
				t.Errorf("string: got %s, want %s", got, tt.want)
			}
			if got := string(appendJSONString(nil, []byte(tt.in))); got != tt.want {
				t.Errorf("bytes: got %s, want %s", got, tt.want)
			}
		})
	}
}

// FuzzAppendJSONString checks that the output decodes to what encoding/json
// would produce, and contains no raw character Python's splitlines breaks on.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "abc", "\u0085\u2028\u2029", "\x00\xff\xfe", "é\r\n", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendJSONString(nil, s)
		if bytes.ContainsAny(got, "\n\r\v\f\x1c\x1d\x1e\u0085\u2028\u2029") {
			t.Fatalf("%q encodes with a raw line separator: %q", s, got)
		}
		var mine, std string
		if err := json.Unmarshal(got, &mine); err != nil {
			t.Fatalf("%q: output %q does not decode: %v", s, got, err)
		}
		ref, _ := json.Marshal(s)
		_ = json.Unmarshal(ref, &std)
		if mine != std {
			t.Fatalf("%q decodes to %q, encoding/json gives %q", s, mine, std)
		}
	})
}

func TestAppendTextEvent(t *testing.T) {
	got := string(appendTextEvent(nil, evStdout, []byte("hi\x00"), 1718000000123))
	want := `{"type":"stdout","text":"hi\u0000","timestamp":1718000000123}` + "\n\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestLineSplitter(t *testing.T) {
	big := strings.Repeat("x", 4<<20)
	tests := []struct {
		name   string
		chunks []string
		want   []string // lines, then the flushed remainder if any
	}{
		{"lf", []string{"a\nb\n"}, []string{"a", "b"}},
		{"crlf counted once", []string{"a\r\nb\r\n"}, []string{"a", "b"}},
		{"cr alone", []string{"a\rb\r"}, []string{"a", "b"}},
		{"blank lines", []string{"a\n\n\nb\n"}, []string{"a", "\n", "\n", "b"}},
		{"blank crlf line", []string{"\r\n\r\n"}, []string{"\n", "\n"}},
		{"cr cr", []string{"a\r\rb\n"}, []string{"a", "\n", "b"}},
		{"lf cr", []string{"a\n\rb"}, []string{"a", "\n", "b"}},
		{"partial final line", []string{"a\nrest"}, []string{"a", "rest"}},
		{"crlf split across reads", []string{"a\r", "\nb"}, []string{"a", "b"}},
		{"line split across reads", []string{"ab", "c", "d\ne"}, []string{"abcd", "e"}},
		{"cr then text across reads", []string{"a\r", "b\n"}, []string{"a", "b"}},
		{"NUL kept", []string{"a\x00b\n"}, []string{"a\x00b"}},
		{"unicode separators kept", []string{"a\u2028b\u0085c\n"}, []string{"a\u2028b\u0085c"}},
		{"empty reads", []string{"", "a", "", "\n", ""}, []string{"a"}},
		{"4 MiB line in pieces", []string{big[:1<<20], big[1<<20 : 3<<20], big[3<<20:] + "\n"}, []string{big}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sp lineSplitter
			var got []string
			for _, c := range tt.chunks {
				p := []byte(c)
				for {
					line, rest, ok := sp.next(p)
					if !ok {
						break
					}
					got = append(got, string(line))
					p = rest
				}
			}
			if rem := sp.flush(); len(rem) > 0 {
				got = append(got, string(rem))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d lines %q, want %d %q", len(got), short(got), len(tt.want), short(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("line %d: got %q, want %q", i, short(got[i:i+1]), short(tt.want[i:i+1]))
				}
			}
		})
	}
}

func short(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) > 40 {
			l = l[:20] + "…" + l[len(l)-10:]
		}
		out[i] = l
	}
	return out
}

// flushRecorder is a ResponseWriter that counts flushes, safe to read
// while the stream's flusher runs.
type flushRecorder struct {
	mu      sync.Mutex
	header  http.Header
	status  int
	body    bytes.Buffer
	flushes int
	flushed int // body bytes out at the last flush
}

func (r *flushRecorder) Header() http.Header { return r.header }
func (r *flushRecorder) WriteHeader(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = code
}
func (r *flushRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body.Write(p)
}
func (r *flushRecorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
	r.flushed = r.body.Len()
}

func (r *flushRecorder) snapshot() (body string, flushes, flushed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body.String(), r.flushes, r.flushed
}

// A command that ends within the hold answers in one piece, with its
// length, sent by its last event (before the handler's cleanup).
func TestHeldStreamEndsInOneWrite(t *testing.T) {
	rec := &flushRecorder{header: http.Header{}}
	es := newHeldEventStream(rec, time.Hour)
	es.text(evInit, "id")
	es.write(appendTextEvent(nil, evStdout, "out", 1))
	if _, flushes, _ := rec.snapshot(); flushes != 0 {
		t.Errorf("%d flushes before the end", flushes)
	}
	es.complete(time.Millisecond)
	body, flushes, flushed := rec.snapshot()
	if flushes != 1 || flushed != len(body) {
		t.Errorf("the end sent %d of %d bytes in %d flushes, want all in one", flushed, len(body), flushes)
	}
	if got := rec.header.Get("Content-Length"); got != strconv.Itoa(len(body)) {
		t.Errorf("Content-Length %q for a body of %d bytes", got, len(body))
	}
	if rec.header.Get("Content-Type") != "text/event-stream" || rec.status != http.StatusOK {
		t.Errorf("status %d, headers %v", rec.status, rec.header)
	}
	last := -1
	for _, typ := range []string{evInit, evStdout, evComplete} {
		n := strings.Index(body, `"type":"`+typ+`"`)
		if n <= last {
			t.Fatalf("body %q lacks %s after the events before it", body, typ)
		}
		last = n
	}
}

// A held event reaches the client within the hold without any later event,
// and after that the stream is chunked (no length).
func TestHeldStreamFlushesWithinHold(t *testing.T) {
	rec := &flushRecorder{header: http.Header{}}
	es := newHeldEventStream(rec, 10*time.Millisecond)
	es.text(evInit, "id")
	eventually(t, "the init event to be flushed", func() bool {
		body, flushes, flushed := rec.snapshot()
		return flushes > 0 && flushed == len(body) && strings.Contains(body, evInit)
	})
	es.write(appendTextEvent(nil, evStdout, "later", 1))
	eventually(t, "the stdout event to be flushed", func() bool {
		body, _, flushed := rec.snapshot()
		return flushed == len(body) && strings.Contains(body, "later")
	})
	es.complete(time.Millisecond)
	if got := rec.header.Get("Content-Length"); got != "" {
		t.Errorf("Content-Length %q on a stream flushed before its end", got)
	}
}

// Nothing is written once the last event is: the handler owns the writer
// again.
func TestEventStreamQuietAfterEnd(t *testing.T) {
	rec := &flushRecorder{header: http.Header{}}
	es := newHeldEventStream(rec, time.Hour)
	stop := es.pingEvery(time.Millisecond)
	defer stop()
	es.text(evInit, "id")
	es.complete(time.Millisecond)
	body, flushes, _ := rec.snapshot()
	es.flushHeld()
	es.text(evStdout, "late")
	time.Sleep(20 * time.Millisecond) // pings would come every millisecond
	if after, n, _ := rec.snapshot(); after != body || n != flushes {
		t.Fatalf("written after the end: %q (%d flushes), was %q (%d)", after, n, body, flushes)
	}
}
