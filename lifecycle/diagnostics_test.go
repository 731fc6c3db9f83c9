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
	lines, err := e.m.Events(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Container:  " + cid[:12] + " (sandbox-" + sb.ID + ")", "Status:     running", "Created:    " + started, "Started:    " + started}
	if !slices.Equal(lines, want) {
		t.Errorf("running: %q, want %q", lines, want)
	}

	finished := e.clock.Now().Add(time.Minute)
	e.rt.Set(t, cid, func(c *runtime.Container) {
		c.Status, c.Running, c.ExitCode, c.OOMKilled, c.FinishedAt, c.Error = "exited", false, 137, true, finished, "out of memory"
	})
	lines, _ = e.m.Events(context.Background(), sb.ID)
	want = append(want[:1:1], "Status:     exited", want[2], want[3], "Finished:   "+finished.Format(time.RFC3339Nano),
		"Event:      OOMKilled - container was killed for exceeding its memory limit", "Event:      Exited with code 137", "Event:      Error - out of memory")
	if !slices.Equal(lines, want) {
		t.Errorf("exited:\n%q\nwant\n%q", lines, want)
	}

	if _, err := e.m.Events(context.Background(), "nope"); err == nil {
		t.Error("events of an unknown sandbox: no error")
	}
}
