//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// TestReliabilityRunawayWork checks that work nobody wants any more is
// stopped with everything it started, and that a client reading slowly
// cannot make sandboxd buffer without bound.
func TestReliabilityRunawayWork(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())

	// Each command starts a child in the background, a grandchild that
	// outlives its parent shell, and a foreground child.
	tree := func(tag string) string {
		return "(sleep 1" + tag + "1 &); sleep 1" + tag + "2 & echo started; sleep 1" + tag + "3"
	}
	gone := func(t *testing.T, tag string) {
		t.Helper()
		waitUntil(t, stateWait, "the command's processes to be killed", func() bool {
			return !hasProcess(t, sb.ID, "sleep 1"+tag)
		})
	}

	t.Run("timeout kills the process tree", func(t *testing.T) {
		cs := startCommand(t, s, sb.ID, map[string]any{"command": tree("10"), "timeout": 2000})
		if ev := cs.until(t, "stdout"); ev.Text != "started" {
			t.Fatalf("first output %q, want started", ev.Text)
		}
		if last := drain(t, cs).last(); last.Type != "error" {
			t.Errorf("a command killed at its timeout ended with %q, want an error event", last.Type)
		}
		gone(t, "10")
	})

	t.Run("client disconnect kills the process tree", func(t *testing.T) {
		cs := startCommand(t, s, sb.ID, map[string]any{"command": tree("20")})
		if ev := cs.until(t, "stdout"); ev.Text != "started" {
			t.Fatalf("first output %q, want started", ev.Text)
		}
		if !hasProcess(t, sb.ID, "sleep 1203") {
			t.Fatalf("the command does not run: %q", containerProcesses(t, sb.ID))
		}
		cs.Cancel()
		gone(t, "20")
	})

	t.Run("slow reader", func(t *testing.T) {
		base := metric(t, scrapeMetrics(t, s), "process_resident_memory_bytes")
		// One event per line: 100 million events, far more than sandboxd
		// could hold, as fast as the sandbox can write them.
		cs := startCommand(t, s, sb.ID, map[string]any{"command": "yes | head -c 200000000"})
		cs.until(t, "stdout")
		peak := base
		for range 10 {
			time.Sleep(time.Second)
			peak = max(peak, metric(t, scrapeMetrics(t, s), "process_resident_memory_bytes"))
		}
		const margin = 64 << 20
		t.Logf("sandboxd RSS %.1f MiB before, at most %.1f MiB while the reader paused for 10 s", base/(1<<20), peak/(1<<20))
		if peak > base+margin {
			t.Errorf("sandboxd's RSS grew from %.0f to %.0f bytes while a reader paused: output is buffered without bound", base, peak)
		}
		if !hasProcess(t, sb.ID, "yes") {
			t.Errorf("the producer finished while nobody read its output: output went somewhere")
		}
		for range 1000 {
			if ev := cs.until(t, "stdout"); ev.Text != "y" {
				t.Fatalf("output %q, want y", ev.Text)
			}
		}
		cs.Cancel()
		waitUntil(t, stateWait, "the producer to be killed", func() bool { return !hasProcess(t, sb.ID, "yes") })
	})
}

// drain reads a command stream to its end and returns its events.
func drain(t *testing.T, cs *commandStream) execdRun {
	t.Helper()
	run, err := cs.readAll()
	if err != nil {
		t.Fatalf("read command stream: %v", err)
	}
	return run
}
