package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// recordLines is a slog handler that keeps the "line" attribute of each record.
type recordLines struct{ lines *[]string }

func (h recordLines) Enabled(context.Context, slog.Level) bool { return true }

// Handle records the line of a record at warning level or above, where the
// agent's stderr must be logged to be seen.
func (h recordLines) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "line" {
			*h.lines = append(*h.lines, a.Value.String())
		}
		return true
	})
	return nil
}
func (h recordLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordLines) WithGroup(string) slog.Handler      { return h }

func TestLineLogger(t *testing.T) {
	long := strings.Repeat("y", maxLogLine)
	tests := []struct {
		name   string
		writes []string
		want   []string
	}{
		{"one line", []string{"hello\n"}, []string{"hello"}},
		{"split across writes", []string{"hel", "lo\nwor", "ld\n"}, []string{"hello", "world"}},
		{"several in one write", []string{"a\nb\n\nc\n"}, []string{"a", "b", "", "c"}},
		{"unterminated last line on close", []string{"a\nlast"}, []string{"a", "last"}},
		{"over-long partial line cut", []string{long, "z\n"}, []string{long[:MaxLoggedLine], "z"}},
		{"control characters and bad UTF-8 replaced", []string{"a\x1b[31mb\tc\xff\u2028é\n"}, []string{"a?[31mb\tc??é"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			l := &lineLogger{log: slog.New(recordLines{&got}), limit: &LogLimit{rate.NewLimiter(rate.Inf, 0), rate.NewLimiter(rate.Inf, 0)}}
			for _, w := range tt.writes {
				if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			l.Close()
			if !slices.Equal(got, tt.want) {
				t.Errorf("logged %d lines %.80q, want %d lines %.80q", len(got), got, len(tt.want), tt.want)
			}
		})
	}
}

// Sandbox code writing to the agent's stderr as fast as it can gets a
// burst of lines into sandboxd's log, then a trickle, and the count of
// what was dropped.
func TestLineLoggerRateLimit(t *testing.T) {
	var buf bytes.Buffer
	l := &lineLogger{log: slog.New(slog.NewTextHandler(&buf, nil)), limit: &LogLimit{rate.NewLimiter(rate.Every(time.Hour), 5), rate.NewLimiter(rate.Inf, 0)}}
	for range 20000 {
		l.Write([]byte("flood\n"))
	}
	l.Close()
	out := buf.String()
	if n := strings.Count(out, "line=flood"); n != 5 {
		t.Errorf("logged %d of 20000 lines, want the burst of 5", n)
	}
	dropped := 0
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "dropped="); ok {
			n, _ := strconv.Atoi(v)
			dropped += n
		}
	}
	if dropped != 19995 {
		t.Errorf("log counts %d dropped lines, want 19995:\n%s", dropped, out)
	}
}

// Long lines of characters a handler escapes (the worst case: 64 KiB of
// control bytes, ×6 once escaped) get into sandboxd's log no more than
// the byte budget allows, each cut to MaxLoggedLine, and the dropped
// bytes are counted.
func TestLineLoggerByteBudget(t *testing.T) {
	var buf bytes.Buffer
	l := &lineLogger{log: slog.New(slog.NewJSONHandler(&buf, nil)), limit: NewStderrLimit()}
	line := append(bytes.Repeat([]byte{1}, maxLogLine-1), '\n')
	const lines = stderrLogBurst // within the burst of lines: only bytes limit them
	for range lines {
		l.Write(line)
	}
	l.Close()
	var logged, dropped int
	for _, rec := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r struct {
			Line         string
			CutBytes     int `json:"cut_bytes"`
			DroppedBytes int `json:"dropped_bytes"`
		}
		if err := json.Unmarshal([]byte(rec), &r); err != nil {
			t.Fatalf("%v: %.200s", err, rec)
		}
		if len(r.Line) > MaxLoggedLine {
			t.Errorf("a line of %d bytes was logged", len(r.Line))
		}
		if r.Line != "" && r.CutBytes != maxLogLine-1-MaxLoggedLine {
			t.Errorf("cut_bytes = %d, want %d", r.CutBytes, maxLogLine-1-MaxLoggedLine)
		}
		if r.Line != "" {
			logged++
		}
		dropped += r.DroppedBytes
	}
	if want := stderrLogByteBurst / MaxLoggedLine; logged < want-1 || logged > want+1 {
		t.Errorf("logged %d lines of %d bytes, want about %d (the byte burst)", logged, MaxLoggedLine, want)
	}
	if want := (lines - logged) * MaxLoggedLine; dropped != want {
		t.Errorf("dropped_bytes = %d, want %d", dropped, want)
	}
	if max := 2*stderrLogByteBurst + lines*200; buf.Len() > max {
		t.Errorf("%d bytes logged for %d lines, more than %d", buf.Len(), lines, max)
	}
}
