//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// consoleWait guards the browser run against hangs.
const consoleWait = 10 * time.Minute

// consoleBrowser returns Debian's chromium and the directory of the browser
// scripts (with playwright-core installed), or skips the test (fails it
// under CI or SANDBOXD_E2E_REQUIRE_BROWSER) when either is missing.
func consoleBrowser(t *testing.T) (browser, dir string) {
	t.Helper()
	browser = os.Getenv("CHROMIUM")
	if browser == "" {
		browser = "/usr/bin/chromium"
	}
	dir = filepath.Join(repoRoot(), "e2e", "console")
	missing := ""
	if _, err := os.Stat(browser); err != nil {
		missing = "chromium is not installed at " + browser + " (apt-get install chromium)"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil {
		missing = "playwright-core is not installed in " + dir + " (npm install there)"
	}
	if missing != "" {
		// e2e/run.sh (CI) installs both, so there the test must run.
		if os.Getenv("CI") != "" || os.Getenv("SANDBOXD_E2E_REQUIRE_BROWSER") != "" {
			t.Fatalf("%s; e2e/setup.sh installs both", missing)
		}
		t.Skipf("SKIP: %s; e2e/setup.sh installs both (under e2e/run.sh or CI this test fails instead)", missing)
	}
	return browser, dir
}

// screenshotDir is where a browser test's screenshots go:
// $SANDBOXD_ARTIFACTS/console, else a kept temporary directory named in
// the log.
func screenshotDir(t *testing.T) string {
	t.Helper()
	if a := os.Getenv("SANDBOXD_ARTIFACTS"); a != "" {
		return filepath.Join(a, "console")
	}
	d, err := os.MkdirTemp("", "sandboxd-console-screenshots-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("console screenshots: %s", d)
	return d
}

// runConsoleScript runs a browser script of e2e/console with node and
// env added to the test's, and returns its output; the test fails unless
// the script ran to its final OK.
func runConsoleScript(t *testing.T, dir, script string, env ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), consoleWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("node %s:\n%s", script, out)
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "OK") {
		t.Fatal("the browser test did not finish")
	}
	return out
}

// TestConsoleBrowser drives the web console in Debian's chromium with
// playwright-core (e2e/console/console.test.mjs) against a real sandboxd:
// sign in (a wrong key refused), see a sandbox appear, run a command and see
// its output stream, upload and preview files, kill the sandbox. Screenshots
// of every page go to $SANDBOXD_ARTIFACTS/console, else to a kept temporary
// directory named in the log.
func TestConsoleBrowser(t *testing.T) {
	browser, dir := consoleBrowser(t)
	shots := screenshotDir(t)
	s := startServer(t, withTOML("[[pool]]\nname = \"console-pool\"\nimage = \""+imageBusybox+"\"\nsize = 1"))
	out := runConsoleScript(t, dir, "console.test.mjs",
		"SANDBOXD_URL="+s.URL,
		"SANDBOXD_API_KEY="+s.APIKey,
		"SANDBOXD_IMAGE="+imageBusybox,
		"SANDBOXD_ARTIFACTS="+shots,
		"CHROMIUM="+browser,
	)

	// What the browser did, seen through the API and the server's log.
	m := regexp.MustCompile(`(?m)^SANDBOX (\S+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatal("the browser test named no sandbox")
	}
	assertGone(t, s, string(m[1]))
	// The browser forked the sandbox: its snapshot stays (a public one).
	for _, snap := range decodeJSON[lcSnapshotList](t, getBody(t, s, "/v1/snapshots?sandboxId="+string(m[1]))).Items {
		removeImageAtEnd(t, "opensandbox-snapshots:"+snap.ID)
	}
	for _, name := range []string{"1-sign-in", "3-sandboxes", "4-sandbox", "5-commands", "6-files", "7-logs", "8-forks", "10-after-kill"} {
		if fi, err := os.Stat(filepath.Join(shots, name+".png")); err != nil || fi.Size() == 0 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
	logData, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(logData), s.APIKey) {
		t.Error("the API key appears in the server's log")
	}
	for _, want := range []string{"path=/console/app.js status=200", "path=/v1/sandboxes status=401", "method=DELETE path=/v1/sandboxes/" + string(m[1]) + " status=204"} {
		if !strings.Contains(string(logData), want) {
			t.Errorf("server log lacks %q", want)
		}
	}
	// The console's files need no key; its data does.
	status, hdr, _ := s.do(t, http.MethodGet, "/console/", nil, map[string]string{"OPEN-SANDBOX-API-KEY": ""})
	if status != http.StatusOK || hdr.Get("Set-Cookie") != "" {
		t.Errorf("GET /console/ without key: %d, Set-Cookie %q", status, hdr.Get("Set-Cookie"))
	}
	status, _, body := s.do(t, http.MethodGet, "/console/api/activity?id="+string(m[1]), nil, map[string]string{"OPEN-SANDBOX-API-KEY": ""})
	wantError(t, "activity without key", status, body, http.StatusUnauthorized, "MISSING_API_KEY")
}
