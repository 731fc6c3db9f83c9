//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// proxiedPage is a sandbox's hostile page: its script tries what a page in
// the console's origin could do on a server without a key (create a
// sandbox with a host folder mounted read-write, read the sandbox list, read
// the tab's storage) and writes what happened into the title.
const proxiedPage = `<!doctype html><title>loading</title><p>a page served by a sandbox</p><script>
(async () => {
  const r = { origin: self.origin };
  const attempt = async (name, url, init) => {
    try {
      const res = await fetch(url, init);
      r[name] = res.type + ' ' + res.status + ' ' + (await res.text()).slice(0, 200);
    } catch (e) { r[name] = 'refused ' + e.name; }
  };
  await attempt('create', '/v1/sandboxes', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(CREATE) });
  await attempt('list', '/v1/sandboxes', {});
  await attempt('listNoCors', '/v1/sandboxes', { mode: 'no-cors' });
  try { r.storage = 'open ' + sessionStorage.length; } catch (e) { r.storage = 'refused ' + e.name; }
  document.title = 'DONE ' + JSON.stringify(r);
})();
</script>`

// proxiedCGI serves the same page with a policy of its own that asks for
// the page's real origin (allow-same-origin): sandboxd's must still win.
const proxiedCGI = `#!/bin/sh
printf 'Content-Type: text/html\r\nContent-Security-Policy: sandbox allow-scripts allow-same-origin\r\n\r\n'
cat /www/index.html
`

// TestSecurityProxiedPageInert opens, in Debian's chromium, a page a
// sandbox serves through /sandboxes/{id}/proxy/{port}/ of an --insecure
// server (no key: the browser may navigate there), once plain and once with
// the page's own allow-same-origin policy. The page's script runs, but in an
// opaque origin: its create and its read of the API are refused, it cannot
// read the tab's storage, and no sandbox is made. SDK-style clients still
// read the page.
func TestSecurityProxiedPageInert(t *testing.T) {
	browser, dir := consoleBrowser(t)
	allowed := t.TempDir()
	t.Setenv("OPENSANDBOX_INSECURE_SERVER", "YES")
	s := startServer(t, withTOML(fmt.Sprintf("[server]\napi_key = \"\"\n[storage]\nallowed_host_paths = [%q]\n", allowed)))

	create, err := json.Marshal(busyboxWith(map[string]any{
		"volumes": []any{map[string]any{"name": "host", "host": map[string]string{"path": allowed}, "mountPath": "/mnt/host"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	page := strings.Replace(proxiedPage, "CREATE", string(create), 1)
	box := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{
		"env":        map[string]string{"PAGE": page, "CGI": proxiedCGI},
		"entrypoint": []string{"sh", "-c", `mkdir -p /www/cgi-bin && printf '%s' "$PAGE" > /www/index.html && printf '%s' "$CGI" > /www/cgi-bin/page && chmod +x /www/cgi-bin/page && exec httpd -f -p 8080 -h /www`},
	}))
	waitState(t, s, box.ID, "Running")
	base := "/sandboxes/" + box.ID + "/proxy/8080/"
	// An SDK (no Origin, no browser) reads the page as before.
	waitUntil(t, stateWait, "the sandbox's page", func() bool {
		status, _, body := s.do(t, http.MethodGet, base, nil, map[string]string{apiKeyHeader: ""})
		return status == http.StatusOK && strings.Contains(string(body), "a page served by a sandbox")
	})

	ctx, cancel := context.WithTimeout(t.Context(), consoleWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "proxied-page.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"PAGES="+s.URL+base+" "+s.URL+base+"cgi-bin/page",
		"CHROMIUM="+browser,
	)
	out, runErr := cmd.CombinedOutput()
	t.Logf("node proxied-page.test.mjs:\n%s", out)
	if l := listSandboxes(t, s, "/v1", ""); len(l.Items) != 1 {
		t.Errorf("the page made sandboxes: %d listed, want only the page's own", len(l.Items))
	}
	if runErr != nil {
		t.Fatalf("the browser test failed: %v", runErr)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "OK") {
		t.Fatal("the browser test did not finish")
	}
}
