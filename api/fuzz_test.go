package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// fuzzHandler is the API over a Manager over the fake runtime, for fuzz
// targets (newEnv needs a *testing.T). Host mounts are allowed under
// allowed only; outside is a sibling that must stay empty.
func fuzzHandler(f *testing.F) (h http.Handler, allowed, outside string) {
	root := f.TempDir()
	allowed, outside = filepath.Join(root, "allowed"), filepath.Join(root, "outside")
	for _, d := range []string{allowed, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(allowed, "escape")); err != nil {
		f.Fatal(err)
	}
	cfg := config.Default()
	cfg.Store.Dir = filepath.Join(root, "state")
	cfg.Server.APIKey = testKey
	cfg.Storage.AllowedHostPaths = []string{allowed}
	rt := runtimetest.New(time.Now)
	if err := rt.AllowHostPaths(cfg.Storage.AllowedHostPaths...); err != nil {
		f.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	mgr := newManager(f, cfg, rt, log)
	if err := mgr.Reconcile(context.Background()); err != nil {
		f.Fatal(err)
	}
	return New(cfg, backendsOf(mgr), rt, log), allowed, outside
}

// fuzzServe sends one request with the API key and returns the recorder.
func fuzzServe(h http.Handler, method, target string, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set(headerAPIKey, testKey)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// checkAnswer fails on a 5xx (the fake runtime never fails, so a 5xx is a
// bug) and on a 4xx that is not the error envelope.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: status %d: %s", what, rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var e errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
			t.Fatalf("%s: status %d without the error envelope: %s", what, rec.Code, rec.Body)
		}
	}
}

// assertEmptyDir fails if dir has entries.
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Fatalf("%s has %d entries (%v): something was created outside the allowed prefix", dir, len(entries), err)
	}
}

// FuzzCreateSandbox feeds arbitrary bodies to POST /v1/sandboxes: no
// panic, no 5xx, every refusal in the envelope, and no host directory
// created outside the allowed prefix.
func FuzzCreateSandbox(f *testing.F) {
	for _, seed := range []string{
		createBody,
		``, `null`, `[]`, `"x"`, `{}`, `{"image":null}`, `{"image":{"uri":""}}`,
		`{"image":{"uri":"busybox"},"entrypoint":[]}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"timeout":-1}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"timeout":1e309}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"resourceLimits":{"cpu":"1e400","memory":"9999999Ti","gpu":"-1"}}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"resourceLimits":{"cpu":1}}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"env":{"":"x","A=B":"y","C":null,"D":"\u0000"}}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"metadata":{"opensandbox.io/id":"x","a/b/c":"d","k":"` + strings.Repeat("v", 64) + `"}}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"extensions":{"access.renew.extend.seconds":"300","poolRef":"p","sandboxd.io/read-only-rootfs":"true","sandboxd.io/user":"1000:1000"}}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"volumes":[{"name":"v","mountPath":"/mnt","host":{"path":"/var/run/docker.sock"}}]}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"volumes":[{"name":"v","mountPath":"/mnt","host":{"path":"ALLOWED/escape/x"}}]}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"volumes":[{"name":"v","mountPath":"/mnt","subPath":"escape/y","host":{"path":"ALLOWED"}}]}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"volumes":[{"name":"v","mountPath":"/mnt","pvc":{"claimName":"data","createIfNotExists":false}},{"name":"v","mountPath":"/x","ossfs":{}}]}`,
		`{"image":{"uri":"busybox"},"entrypoint":["sh"],"networkPolicy":{"defaultAction":"deny","egress":[{}]},"platform":{"os":"windows","arch":"x"}}`,
		`{"snapshotId":"nope"}`,
		`{"image":{"uri":"busybox","auth":{"username":"u"}},"entrypoint":["sh"],"secureAccess":true}`,
	} {
		f.Add(seed)
	}
	h, allowed, outside := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body string) {
		body = strings.ReplaceAll(body, "ALLOWED", allowed)
		checkAnswer(t, "POST /v1/sandboxes", fuzzServe(h, http.MethodPost, "/v1/sandboxes", body))
		assertEmptyDir(t, outside)
	})
}

// FuzzPatchMetadata feeds arbitrary merge patches to PATCH metadata: no
// panic, no 5xx, and the metadata never takes a reserved key or an entry
// that is not a valid label.
func FuzzPatchMetadata(f *testing.F) {
	for _, seed := range []string{
		`{"team":"b"}`, `{"team":null}`, `{}`, `null`, `[]`, `""`, `{"a":1}`, `{"a":{"b":"c"}}`,
		`{"opensandbox.io/id":"x"}`, `{"opensandbox.io/expires-at":null}`, `{"a/b":"c","-a":"b","a":"-"}`,
		`{"k":"` + strings.Repeat("v", 70) + `"}`, `{"` + strings.Repeat("k", 300) + `":"v"}`,
	} {
		f.Add(seed)
	}
	h, _, _ := fuzzHandler(f)
	rec := fuzzServe(h, http.MethodPost, "/v1/sandboxes", createBody)
	var sb struct{ ID string }
	if rec.Code != http.StatusAccepted || json.Unmarshal(rec.Body.Bytes(), &sb) != nil {
		f.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rec := fuzzServe(h, http.MethodPatch, "/v1/sandboxes/"+sb.ID+"/metadata", body)
		checkAnswer(t, "PATCH metadata", rec)
		if rec.Code != http.StatusOK {
			return
		}
		var got lifecycle.Sandbox
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("PATCH answer %s: %v", rec.Body, err)
		}
		for k := range got.Metadata {
			if strings.HasPrefix(k, "opensandbox.io/") {
				t.Fatalf("PATCH %s set the reserved key %q", body, k)
			}
		}
	})
}

// FuzzListQuery feeds arbitrary query strings to GET /v1/sandboxes
// (pagination, state and metadata filters): no panic, no 5xx.
func FuzzListQuery(f *testing.F) {
	for _, seed := range []string{
		"", "page=1&pageSize=200", "page=0", "pageSize=201", "page=-1", "page=x", "page=99999999999999999999",
		"state=Running&state=paused", "metadata=team%3Da%26k%3Dv", "metadata=%zz", "metadata=a", "metadata==b",
		"metadata=" + url.QueryEscape("a=b&=c"),
	} {
		f.Add(seed)
	}
	h, _, _ := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, query string) {
		u := &url.URL{Path: "/v1/sandboxes", RawQuery: query}
		req, err := http.NewRequest(http.MethodGet, u.String(), nil)
		if err != nil {
			return // not a request a client could send
		}
		req.Header.Set(headerAPIKey, testKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, "GET /v1/sandboxes?"+query, rec)
	})
}
