//go:build e2e

package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestCodeInterruptAnyMoment: an interrupt sent at 0, 10 ms, 100 ms and 1 s
// after a run's init stops the run with KeyboardInterrupt, on a new context
// each time (its kernel has not taken the code up yet) and on one that has
// run a cell, on the Jupyter engine (the code-interpreter image) and on the
// agent's Python driver. Before, on a new context, the interrupt answered
// 200 and the code ran to completion.
func TestCodeInterruptAnyMoment(t *testing.T) {
	s := startServer(t)
	const loop = "import time\nfor i in range(100):\n    time.sleep(0.1)\nprint('completed')"
	delays := []time.Duration{0, 10 * time.Millisecond, 100 * time.Millisecond, time.Second}
	for _, engine := range []struct {
		name    string
		jupyter bool
	}{{"jupyter", true}, {"python driver", false}} {
		t.Run(engine.name, func(t *testing.T) {
			c := codeBox(t, s, engine.jupyter)
			interrupt := func(t *testing.T, cc codeContext, delay time.Duration) {
				t.Helper()
				stream := c.start(t, t.Context(), cc, loop)
				stream.waitFor(t, "init")
				time.Sleep(delay)
				if status, _, body := c.do(t, http.MethodDelete, "/code?id="+url.QueryEscape(cc.ID), nil, nil); status != http.StatusOK {
					t.Fatalf("interrupt: %d %s", status, body)
				}
				e := stream.finish(t)
				if strings.Contains(e.Stdout, "completed") {
					t.Fatalf("interrupted at %v, the code ran to completion: %v", delay, e.Types)
				}
				if e.Error == nil {
					t.Logf("stderr: %q", e.Stderr)
				}
				e.wantError(t, "KeyboardInterrupt")
			}
			for _, delay := range delays {
				t.Run("new context "+delay.String(), func(t *testing.T) {
					cc := c.createContext(t, "python")
					interrupt(t, cc, delay)
					if e := c.run(t, cc, "6 * 7"); e.text(0) != "42" {
						t.Fatalf("the run after the interrupt: %v %s", e.Types, e.errText())
					}
				})
			}
			warm := c.createContext(t, "python")
			c.run(t, warm, "1").wantOK(t)
			for _, delay := range delays {
				t.Run("warm context "+delay.String(), func(t *testing.T) { interrupt(t, warm, delay) })
			}
		})
	}
}
