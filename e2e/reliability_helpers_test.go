//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers of the reliability tests (issue 5): sandboxd's own metrics, the
// processes of a container as Docker sees them, and command streams that a
// test reads at its own pace or drops.

// scrapeMetrics GETs /metrics and returns every sample by its name with
// labels as written, e.g. "go_goroutines" or
// `sandboxd_reaped_total{reason="expired"}`.
func scrapeMetrics(t testing.TB, s *Server) map[string]float64 {
	t.Helper()
	status, hdr, body := s.do(t, http.MethodGet, "/metrics", nil, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d; body %s", status, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET /metrics: Content-Type %q, want text/plain", ct)
	}
	return parseMetrics(t, body)
}

// parseMetrics reads the Prometheus text format: one "name value" or
// "name{labels} value" per line, comments skipped.
func parseMetrics(t testing.TB, body []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("metrics line %q has no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// metric returns one sample of a scrape, which must be there.
func metric(t testing.TB, m map[string]float64, name string) float64 {
	t.Helper()
	v, ok := m[name]
	if !ok {
		t.Fatalf("/metrics has no sample %s", name)
	}
	return v
}

// containerProcesses returns the command lines of the processes running in
// a sandbox's container, as Docker's top sees them (not through the agent).
func containerProcesses(t testing.TB, sandboxID string) []string {
	t.Helper()
	cid := sandboxContainer(t, sandboxID).ID
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	top, err := dockerClient(t).ContainerTop(ctx, cid, nil)
	if err != nil {
		t.Fatalf("top of container %s: %v", cid, err)
	}
	col := -1
	for i, title := range top.Titles {
		if title == "CMD" || title == "COMMAND" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("top of container %s: no command column in %v", cid, top.Titles)
	}
	var out []string
	for _, p := range top.Processes {
		out = append(out, p[col])
	}
	return out
}

// hasProcess reports whether a process whose command line contains marker
// runs in the sandbox.
func hasProcess(t testing.TB, sandboxID, marker string) bool {
	t.Helper()
	for _, p := range containerProcesses(t, sandboxID) {
		if strings.Contains(p, marker) {
			return true
		}
	}
	return false
}

// commandStream is a POST /command whose events the test reads one by one.
type commandStream struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// startCommand sends POST /command through the proxy route with the API
// key and returns once the response headers are in. Cancel drops the
// connection, as a client that goes away would.
func startCommand(t testing.TB, s *Server, id string, req map[string]any) *commandStream {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+proxyPath(id, "/command"), bytes.NewReader(body))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	hr.Header.Set(apiKeyHeader, s.APIKey)
	hr.Header.Set("Content-Type", "application/json")
	// Its own transport: a dropped connection must not be reused, and a
	// slow reader must not share a connection with anything else.
	tr := &http.Transport{DisableKeepAlives: true}
	resp, err := (&http.Client{Transport: tr}).Do(hr)
	if err != nil {
		cancel()
		t.Fatalf("POST /command in %s: %v", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("POST /command in %s: status %d; body %s", id, resp.StatusCode, data)
	}
	cs := &commandStream{resp: resp, r: bufio.NewReaderSize(resp.Body, 4096), cancel: cancel}
	t.Cleanup(cs.Cancel)
	return cs
}

// Next returns the next event; io.EOF at the end of the stream.
func (c *commandStream) Next() (execdEvent, error) {
	for {
		line, err := c.r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var ev execdEvent
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				return ev, fmt.Errorf("event %q: %w", line, jerr)
			}
			return ev, nil
		}
		if err != nil {
			return execdEvent{}, err
		}
	}
}

// readAll reads the stream to its end and returns its events.
func (c *commandStream) readAll() (execdRun, error) {
	var run execdRun
	for {
		ev, err := c.Next()
		if errors.Is(err, io.EOF) {
			return run, nil
		}
		if err != nil {
			return run, err
		}
		run.Events = append(run.Events, ev)
		switch ev.Type {
		case "stdout":
			run.Stdout = append(run.Stdout, ev.Text)
		case "stderr":
			run.Stderr = append(run.Stderr, ev.Text)
		}
	}
}

// parseEvents reads a whole command stream.
func parseEvents(body []byte) (execdRun, error) {
	return (&commandStream{r: bufio.NewReader(bytes.NewReader(body))}).readAll()
}

// until reads events until one of type typ and returns it.
func (c *commandStream) until(t testing.TB, typ string) execdEvent {
	t.Helper()
	for {
		ev, err := c.Next()
		if err != nil {
			t.Fatalf("command stream ended before a %s event: %v", typ, err)
		}
		if ev.Type == typ {
			return ev
		}
	}
}

// Cancel drops the request's connection.
func (c *commandStream) Cancel() {
	c.cancel()
	c.resp.Body.Close()
}

// doWithin is Server.do bounded by d instead of the harness's generous
// client timeout, for requests that must not hang; a transport error is
// returned, not fatal.
func doWithin(t testing.TB, s *Server, d time.Duration, method, path string, body any) (int, []byte, error) {
	t.Helper()
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return request(ctx, s.client, s, method, path, "application/json", data)
}

// request sends one request with the API key and returns the status and
// body. It reports errors instead of failing the test, so that goroutines
// other than the test's may use it.
func request(ctx context.Context, c *http.Client, s *Server, method, path, contentType string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set(apiKeyHeader, s.APIKey)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return doRequest(c, req)
}

// doRequest sends req and reads the whole response.
func doRequest(c *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// tryCreate creates a sandbox and reports a failure instead of failing
// the test, for goroutines.
func tryCreate(ctx context.Context, c *http.Client, s *Server, req map[string]any) (lcSandbox, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return lcSandbox{}, err
	}
	status, data, err := request(ctx, c, s, http.MethodPost, "/v1/sandboxes", "application/json", body)
	if err != nil {
		return lcSandbox{}, fmt.Errorf("create: %w", err)
	}
	var sb lcSandbox
	if status != http.StatusAccepted || json.Unmarshal(data, &sb) != nil || sb.ID == "" {
		return lcSandbox{}, fmt.Errorf("create: status %d; body %s", status, data)
	}
	return sb, nil
}

// createMany creates one sandbox per request, a few at a time, and returns
// them in the order of the requests.
func createMany(t testing.TB, s *Server, reqs []map[string]any) []lcSandbox {
	t.Helper()
	out := make([]lcSandbox, len(reqs))
	errs := make([]error, len(reqs))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = tryCreate(t.Context(), s.client, s, req)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// uploadBody is execd's multipart upload of one file: a metadata part
// and a file part. It returns the body and its Content-Type.
func uploadBody(path, content string) ([]byte, string, error) {
	return uploadBodyFiles([][2]string{{path, content}})
}

// uploadBodyFiles is an upload of several files, each a (path, content)
// pair sent as a metadata part then a file part.
func uploadBodyFiles(files [][2]string) ([]byte, string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range files {
		meta, err := json.Marshal(map[string]any{"path": f[0], "mode": 644})
		if err != nil {
			return nil, "", err
		}
		for _, p := range []struct{ name, filename, ctype, data string }{
			{"metadata", "metadata", "application/json", string(meta)},
			{"file", f[0], "application/octet-stream", f[1]},
		} {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p.name, p.filename))
			h.Set("Content-Type", p.ctype)
			w, err := mw.CreatePart(h)
			if err != nil {
				return nil, "", err
			}
			if _, err := io.WriteString(w, p.data); err != nil {
				return nil, "", err
			}
		}
	}
	if err := mw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}

// uploadRaw uploads one file through the server proxy and returns the
// response, whatever it is.
func uploadRaw(t testing.TB, s *Server, id, path, content string) (int, http.Header, []byte) {
	t.Helper()
	body, ctype, err := uploadBody(path, content)
	if err != nil {
		t.Fatal(err)
	}
	return s.do(t, http.MethodPost, proxyPath(id, "/files/upload"), body, map[string]string{"Content-Type": ctype})
}
