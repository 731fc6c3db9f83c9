//go:build e2e

package e2e

import (
	"os"
	"strings"
	"testing"
)

// TestConsoleWakesSleepingSandbox: the console lists sleeping sandboxes as
// Paused without waking them, and a console action wakes them with nothing
// lost: opening a sandbox asleep by pause (its resource charts are read
// through the proxy), then running a command there, and opening the files
// of a sandbox asleep by stop. Driven in Debian's chromium by
// e2e/console/sleep.test.mjs.
func TestConsoleWakesSleepingSandbox(t *testing.T) {
	browser, dir := consoleBrowser(t)
	s := startSleepServer(t)
	paused := sleepyBox(t, s, "pause", nil, nil)
	stopped := sleepyBox(t, s, "stop", nil, nil)
	for _, b := range []*execdBox{paused, stopped} {
		b.run(t, map[string]any{"command": "echo kept > /tmp/kept.txt"})
	}
	waitAsleep(t, s, paused.ID, "IDLE_PAUSED")
	waitAsleep(t, s, stopped.ID, "IDLE_STOPPED")

	runConsoleScript(t, dir, "sleep.test.mjs",
		"SANDBOXD_URL="+s.URL,
		"SANDBOXD_API_KEY="+s.APIKey,
		"PAUSED_ID="+paused.ID,
		"STOPPED_ID="+stopped.ID,
		"SANDBOXD_ARTIFACTS="+screenshotDir(t),
		"CHROMIUM="+browser,
	)
	logData, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`msg="sandbox woke" sandbox_id=` + paused.ID + ` was=IDLE_PAUSED`,
		`msg="sandbox woke" sandbox_id=` + stopped.ID + ` was=IDLE_STOPPED`,
	} {
		if !strings.Contains(string(logData), want) {
			t.Errorf("server log lacks %q", want)
		}
	}
	for _, line := range strings.Split(string(logData), "\n") {
		if strings.Contains(line, " status=5") && (strings.Contains(line, paused.ID) || strings.Contains(line, stopped.ID)) {
			t.Errorf("a call failed while the console woke a sandbox: %s", line)
		}
	}
}
