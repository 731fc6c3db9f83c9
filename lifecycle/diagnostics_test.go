package lifecycle

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

func TestEvents(t *testing.T) {
	e := newEnv(t, nil)
	sb, cid := e.create(t, validRequest())
	started := e.clock.Now().Format(time.RFC3339Nano)
	lines, err := e.m.Sandboxes.Events(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Container:  " + cid[:12] + " (sandbox-" + sb.ID + ")", "Status:     running", "Created:    " + started, "Started:    " + started}
	if !slices.Equal(lines, want) {
		t.Errorf("running: %q, want %q", lines, want)
	}

	finished := e.clock.Now().Add(time.Minute)
	e.rt.Set(t, cid, func(c *runtime.Container) {
		c.State, c.ExitCode, c.OOMKilled, c.FinishedAt, c.Error = runtime.StateExited, 137, true, finished, "out of memory"
	})
	lines, _ = e.m.Sandboxes.Events(context.Background(), sb.ID)
	want = append(want[:1:1], "Status:     exited", want[2], want[3], "Finished:   "+finished.Format(time.RFC3339Nano),
		"Event:      OOMKilled - container was killed for exceeding its memory limit", "Event:      Exited with code 137", "Event:      Error - out of memory")
	if !slices.Equal(lines, want) {
		t.Errorf("exited:\n%q\nwant\n%q", lines, want)
	}

	if _, err := e.m.Sandboxes.Events(context.Background(), "nope"); err == nil {
		t.Error("events of an unknown sandbox: no error")
	}
}

func TestLogTail(t *testing.T) {
	e := newEnv(t, nil)
	sb, _ := e.create(t, validRequest())
	tests := []struct {
		logs      string
		tail, max int
		want      string
		truncated bool
	}{
		{"aaaa\nbbbb\ncccc\n", 2, 1 << 20, "bbbb\ncccc\n", true},
		{"aaaa\nbbbb\ncccc\n", 3, 1 << 20, "aaaa\nbbbb\ncccc\n", false},
		{"aaaa\nbbbb\ncccc\n", 9, 1 << 20, "aaaa\nbbbb\ncccc\n", false},
		{"aaaa\nbbbb\ncccc\n", 3, 7, "b\ncccc\n", true},
		{"x\ny", 1, 1 << 20, "y", true},
		{"x\ny", 2, 1 << 20, "x\ny", false},
	}
	for _, tt := range tests {
		e.rt.SetLogs(tt.logs)
		got, truncated, err := e.m.Sandboxes.LogTail(context.Background(), sb.ID, tt.tail, time.Time{}, tt.max)
		if err != nil || got != tt.want || truncated != tt.truncated {
			t.Errorf("%q tail %d max %d: %q, %v, %v; want %q, %v", tt.logs, tt.tail, tt.max, got, truncated, err, tt.want, tt.truncated)
		}
	}
}
