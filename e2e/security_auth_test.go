//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// secCredential is one way a caller might present (or fake) credentials.
type secCredential struct {
	name    string
	headers map[string]string // sent instead of the API key
	query   url.Values        // added to the URL
	code    string            // the refusal's code
}

// secLifecycleCredentials are the credentials that must not open the
// lifecycle API: none, a wrong key, the right key where sandboxd never
// reads it (query string, cookie), and a sandbox's token.
func secLifecycleCredentials(apiKey, sandboxToken string) []secCredential {
	return []secCredential{
		{name: "no credentials", headers: map[string]string{apiKeyHeader: ""}, code: "MISSING_API_KEY"},
		{name: "wrong key", headers: map[string]string{apiKeyHeader: apiKey + "x"}, code: "INVALID_API_KEY"},
		{name: "key prefix", headers: map[string]string{apiKeyHeader: apiKey[:len(apiKey)-1]}, code: "INVALID_API_KEY"},
		{
			name:    "key in the query string",
			headers: map[string]string{apiKeyHeader: ""},
			query:   url.Values{apiKeyHeader: {apiKey}, "api_key": {apiKey}, "apiKey": {apiKey}, "token": {apiKey}},
			code:    "MISSING_API_KEY",
		},
		{
			name:    "key in a cookie",
			headers: map[string]string{apiKeyHeader: "", "Cookie": apiKeyHeader + "=" + apiKey + "; api_key=" + apiKey},
			code:    "MISSING_API_KEY",
		},
		{name: "sandbox token as the key", headers: map[string]string{apiKeyHeader: sandboxToken}, code: "INVALID_API_KEY"},
		{name: "sandbox token in its header", headers: map[string]string{apiKeyHeader: "", execdTokenHeader: sandboxToken}, code: "MISSING_API_KEY"},
	}
}

// TestSecurityLifecycleAuth sends every lifecycle route, at / and /v1,
// with each credential that must not work, and checks the 401 envelope and
// that nothing changed: no container made, the sandbox still running with
// its metadata and expiry, no snapshot taken.
func TestSecurityLifecycleAuth(t *testing.T) {
	second := randomHex(t, 24)
	s := startServer(t, withTOML(fmt.Sprintf("[server]\napi_keys = [%q]\n", second)))
	box := newExecdBox(t, s, busyboxWith(map[string]any{"metadata": map[string]string{"team": "a"}}))
	id := box.ID
	before := getSandbox(t, s, "/v1", id)

	routes := []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/sandboxes", busyboxRequest()},
		{http.MethodGet, "/sandboxes", nil},
		{http.MethodGet, "/sandboxes/" + id, nil},
		{http.MethodDelete, "/sandboxes/" + id, nil},
		{http.MethodPatch, "/sandboxes/" + id + "/metadata", map[string]any{"team": "b", "owner": "mallory"}},
		{http.MethodPost, "/sandboxes/" + id + "/pause", nil},
		{http.MethodPost, "/sandboxes/" + id + "/resume", nil},
		{http.MethodPost, "/sandboxes/" + id + "/renew-expiration", map[string]any{"expiresAt": "2099-01-01T00:00:00Z"}},
		{http.MethodGet, "/sandboxes/" + id + "/endpoints/" + execdPort, nil},
		{http.MethodPost, "/sandboxes/" + id + "/snapshots", map[string]any{"name": "stolen"}},
		{http.MethodGet, "/sandboxes/" + id + "/diagnostics/logs", nil},
		{http.MethodGet, "/sandboxes/" + id + "/diagnostics/events", nil},
		{http.MethodGet, "/snapshots", nil},
		{http.MethodGet, "/snapshots/some-snapshot", nil},
		{http.MethodDelete, "/snapshots/some-snapshot", nil},
		{http.MethodGet, "/pools", nil},
		{http.MethodGet, "/no-such-route", nil},
	}
	for _, cred := range secLifecycleCredentials(s.APIKey, box.Headers[execdTokenHeader]) {
		t.Run(cred.name, func(t *testing.T) {
			for _, prefix := range []string{"", "/v1"} {
				for _, rt := range routes {
					target := prefix + rt.path
					if cred.query != nil {
						target += "?" + cred.query.Encode()
					}
					status, hdr, body := s.do(t, rt.method, target, rt.body, cred.headers)
					secWantError(t, rt.method+" "+target, status, hdr, body, http.StatusUnauthorized, cred.code)
				}
			}
			// Served at the root only.
			for _, p := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/goroutine"} {
				target := p
				if cred.query != nil {
					target += "?" + cred.query.Encode()
				}
				status, hdr, body := s.do(t, http.MethodGet, target, nil, cred.headers)
				secWantError(t, "GET "+target, status, hdr, body, http.StatusUnauthorized, cred.code)
			}
		})
	}

	// The same requests with the key in its header do work, so the
	// refusals above are about the credentials.
	s.doJSON(t, http.MethodGet, "/v1/sandboxes?"+url.Values{"api_key": {s.APIKey}}.Encode(), nil, http.StatusOK, nil)
	s.doJSON(t, http.MethodGet, "/sandboxes/"+id+"/endpoints/"+execdPort, nil, http.StatusOK, nil)
	// A second key (rotation) opens the API too; a near miss of it does not.
	if status, _, body := s.do(t, http.MethodGet, "/v1/sandboxes", nil, map[string]string{apiKeyHeader: second}); status != http.StatusOK {
		t.Errorf("the second key from api_keys: status %d, body %s", status, body)
	}
	status, hdr, body := s.do(t, http.MethodGet, "/v1/sandboxes", nil, map[string]string{apiKeyHeader: second + "0"})
	secWantError(t, "a near miss of the second key", status, hdr, body, http.StatusUnauthorized, "INVALID_API_KEY")

	// Nothing changed.
	if n := secInstanceContainers(t, s); n != 1 {
		t.Errorf("the instance has %d containers after the refused requests, want 1", n)
	}
	after := getSandbox(t, s, "/v1", id)
	if after.Status.State != "Running" || after.ExpiresAt != before.ExpiresAt || fmt.Sprint(after.Metadata) != fmt.Sprint(before.Metadata) {
		t.Errorf("sandbox changed: before state %s expires %s metadata %v; after %s %s %v",
			before.Status.State, before.ExpiresAt, before.Metadata, after.Status.State, after.ExpiresAt, after.Metadata)
	}
	if ctr := sandboxContainer(t, id); !ctr.State.Running || ctr.State.Paused {
		t.Errorf("container is %s (paused %v), want running", ctr.State.Status, ctr.State.Paused)
	}
	var snaps struct {
		Items []any `json:"items"`
	}
	s.doJSON(t, http.MethodGet, "/v1/snapshots", nil, http.StatusOK, &snaps)
	if len(snaps.Items) != 0 {
		t.Errorf("%d snapshots exist after the refused requests", len(snaps.Items))
	}
}

// TestSecurityProxyAuth tries to reach sandbox A's execd API with every
// credential that must not open it (none, B's token, a forged token, A's
// token or the key where sandboxd never reads them) and checks the 401
// envelope and, from inside A, that none of the commands ran.
func TestSecurityProxyAuth(t *testing.T) {
	s := startServer(t)
	a := newExecdBox(t, s, busyboxRequest())
	b := newExecdBox(t, s, busyboxRequest())
	tokA, tokB := a.Headers[execdTokenHeader], b.Headers[execdTokenHeader]
	if tokA == tokB {
		t.Fatalf("two sandboxes share the token %q", tokA)
	}

	creds := []secCredential{
		{name: "no credentials", code: "MISSING_API_KEY"},
		{name: "another sandbox's token", headers: map[string]string{execdTokenHeader: tokB}, code: "INVALID_API_KEY"},
		{name: "another sandbox's token as the key", headers: map[string]string{apiKeyHeader: tokB}, code: "INVALID_API_KEY"},
		{name: "forged token", headers: map[string]string{execdTokenHeader: strings.Repeat("A", len(tokA))}, code: "INVALID_API_KEY"},
		{name: "wrong key", headers: map[string]string{apiKeyHeader: s.APIKey + "x"}, code: "INVALID_API_KEY"},
		{
			name:  "token and key in the query string",
			query: url.Values{execdTokenHeader: {tokA}, "token": {tokA}, "access_token": {tokA}, apiKeyHeader: {s.APIKey}, "api_key": {s.APIKey}},
			code:  "MISSING_API_KEY",
		},
		{
			name:    "token and key in cookies",
			headers: map[string]string{"Cookie": execdTokenHeader + "=" + tokA + "; token=" + tokA + "; " + apiKeyHeader + "=" + s.APIKey},
			code:    "MISSING_API_KEY",
		},
	}
	for i, cred := range creds {
		t.Run(cred.name, func(t *testing.T) {
			h := map[string]string{apiKeyHeader: ""}
			for k, v := range cred.headers {
				h[k] = v
			}
			for _, prefix := range []string{"", "/v1"} {
				attempts := []struct {
					method, rest string
					body         any
				}{
					{http.MethodPost, "/command", map[string]any{"command": fmt.Sprintf("touch /tmp/pwned-%d", i)}},
					{http.MethodPost, "/session", map[string]any{}},
					{http.MethodGet, "/files/download?path=/etc/passwd", nil},
					{http.MethodPost, "/files/upload", "--x--\r\n"},
					{http.MethodGet, "/files/info?path=/etc/passwd", nil},
					{http.MethodGet, "/metrics", nil},
					{http.MethodGet, "/ping", nil},
					{http.MethodGet, "", nil},
				}
				for _, at := range attempts {
					target := prefix + a.path(at.rest)
					if cred.query != nil {
						sep := "?"
						if strings.Contains(target, "?") {
							sep = "&"
						}
						target += sep + cred.query.Encode()
					}
					status, hdr, body := s.do(t, at.method, target, at.body, h)
					secWantError(t, at.method+" "+target, status, hdr, body, http.StatusUnauthorized, cred.code)
				}
				// A port other than execd's is refused the same way.
				status, hdr, body := s.do(t, http.MethodGet, prefix+"/sandboxes/"+a.ID+"/proxy/8080/", nil, h)
				secWantError(t, "GET proxy/8080", status, hdr, body, http.StatusUnauthorized, cred.code)
			}
		})
	}

	// Each token opens its own sandbox, and the API key opens both.
	if out, code := a.secShell(t, "ls /tmp | grep -c pwned || true"); code != 0 || strings.TrimSpace(out) != "0" {
		t.Errorf("in sandbox A, refused commands left files: %q (exit %d)", out, code)
	}
	if out, _ := b.secShell(t, "echo b"); out != "b" {
		t.Errorf("B's token does not open B: %q", out)
	}
	st, _, body := s.do(t, http.MethodGet, b.path("/ping"), nil, map[string]string{execdTokenHeader: "", apiKeyHeader: s.APIKey})
	if st != http.StatusOK {
		t.Errorf("the API key does not open B's proxy: %d %s", st, body)
	}
}

// TestSecurityProxyStripsCredentials checks from inside a sandbox that
// what the caller authenticated with (token, API key, cookies,
// Authorization) never reaches the sandbox, while other headers do.
func TestSecurityProxyStripsCredentials(t *testing.T) {
	s := startServer(t)
	box := newExecdBox(t, s, busyboxRequest())
	tok := box.Headers[execdTokenHeader]

	// A one-shot HTTP server in the sandbox that records the request. It
	// answers only once it has read the request's head, as a real server
	// does: one that answers at once may see the connection closed before
	// the request has reached it.
	box.run(t, map[string]any{
		"command": `cat > /tmp/h.sh <<'SCRIPT'
#!/bin/sh
while IFS= read -r line; do
	printf '%s\n' "$line" >> /tmp/request.part
	[ "$line" = "$(printf '\r')" ] && break
done
mv /tmp/request.part /tmp/request.txt
printf 'HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok'
SCRIPT
chmod +x /tmp/h.sh && nc -l -p 8081 -e /tmp/h.sh`,
		"background": true,
	})
	secrets := map[string]string{
		execdTokenHeader: tok,
		apiKeyHeader:     s.APIKey,
		"Cookie":         "session=cookie-secret-1; " + apiKeyHeader + "=" + s.APIKey,
		"Authorization":  "Bearer bearer-secret-2",
		"X-Probe":        "probe-value-3",
	}
	waitUntil(t, secWait, "the listener in the sandbox to answer", func() bool {
		status, _, body := s.do(t, http.MethodGet, "/sandboxes/"+box.ID+"/proxy/8081/hello", nil, secrets)
		if status != http.StatusOK && status != http.StatusBadGateway {
			t.Fatalf("proxy to port 8081: status %d, body %s", status, body)
		}
		return status == http.StatusOK
	})
	var got string
	waitUntil(t, secWait, "the listener to write the request", func() bool {
		got, _ = box.secShell(t, "cat /tmp/request.txt; echo; echo END")
		return strings.Contains(got, "probe-value-3") && strings.HasSuffix(got, "END")
	})
	for _, secret := range []string{tok, s.APIKey, "cookie-secret-1", "bearer-secret-2"} {
		if strings.Contains(got, secret) {
			t.Errorf("the sandbox received the caller's credential %q:\n%s", secret, got)
		}
	}
	if !strings.Contains(got, "GET /hello") {
		t.Errorf("the recorded request is not the proxied one:\n%s", got)
	}
}
