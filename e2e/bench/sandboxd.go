package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	execdPort  = 44772
	egressPort = 18080
	// The SDKs poll /ping this often until it answers 200.
	pingEvery = 200 * time.Millisecond
	readyWait = 60 * time.Second
)

// api talks to sandboxd's lifecycle API and, through the endpoints it
// returns, to execd: the same calls the SDKs make.
type api struct {
	base string // http://host:port
	key  string
	hc   *http.Client
}

func newAPI(base, key string) *api {
	tr := &http.Transport{
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &api{base: strings.TrimRight(base, "/"), key: key, hc: &http.Client{Transport: tr, Timeout: 10 * time.Minute}}
}

// call sends a JSON request to the lifecycle API; out receives a 2xx body.
func (a *api) call(ctx context.Context, method, p string, body, out any, want int) error {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+p, rd)
	if err != nil {
		return err
	}
	req.Header.Set("OPEN-SANDBOX-API-KEY", a.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, p, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read: %w", method, p, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d: %s", method, p, resp.StatusCode, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// box is a sandbox reached like an SDK reaches it: its execd endpoint and
// the headers that go with it.
type box struct {
	id  string
	url string // http://host:port/sandboxes/{id}/proxy/44772
	hdr map[string]string
	a   *api
}

type endpoint struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers"`
}

// createReady creates a sandbox the way the SDKs do: POST, the endpoints
// of 44772 and 18080, then /ping every 200 ms until it answers 200. It
// returns the box and the time it took.
func (a *api) createReady(ctx context.Context, req map[string]any) (*box, time.Duration, error) {
	start := time.Now()
	var created struct {
		ID string `json:"id"`
	}
	if err := a.call(ctx, http.MethodPost, "/v1/sandboxes", req, &created, http.StatusAccepted); err != nil {
		return nil, 0, err
	}
	b, err := a.connect(ctx, created.ID)
	if err != nil {
		return b, 0, err
	}
	return b, time.Since(start), nil
}

// connect resolves a sandbox's endpoints and waits for its /ping.
func (a *api) connect(ctx context.Context, id string) (*box, error) {
	b := &box{id: id, a: a}
	var ep endpoint
	if err := a.call(ctx, http.MethodGet, fmt.Sprintf("/v1/sandboxes/%s/endpoints/%d?use_server_proxy=false", id, execdPort), nil, &ep, http.StatusOK); err != nil {
		return b, err
	}
	if err := a.call(ctx, http.MethodGet, fmt.Sprintf("/v1/sandboxes/%s/endpoints/%d?use_server_proxy=false", id, egressPort), nil, nil, http.StatusOK); err != nil {
		return b, err
	}
	b.url, b.hdr = "http://"+ep.Endpoint, ep.Headers
	deadline := time.Now().Add(readyWait)
	for {
		err := b.ping(ctx)
		if err == nil {
			return b, nil
		}
		if time.Now().After(deadline) {
			return b, fmt.Errorf("sandbox %s not ready after %s: %w", id, readyWait, err)
		}
		select {
		case <-ctx.Done():
			return b, ctx.Err()
		case <-time.After(pingEvery):
		}
	}
}

// execd sends one request to the sandbox's execd API.
// execd sends a request to the sandbox's execd endpoint; length is the
// body's size, or -1 when unknown (sent chunked).
func (b *box) execd(ctx context.Context, method, p string, body io.Reader, length int64, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, b.url+p, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = length
	}
	for k, v := range b.hdr {
		req.Header.Set(k, v)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return b.a.hc.Do(req)
}

func (b *box) ping(ctx context.Context) error {
	resp, err := b.execd(ctx, http.MethodGet, "/ping", nil, 0, "")
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ping: status %d", resp.StatusCode)
	}
	return nil
}

// command runs a shell command and reads its event stream to the end; the
// stream must report completion and contain want.
func (b *box) command(ctx context.Context, cmd, want string) (time.Duration, error) {
	start := time.Now()
	body, _ := json.Marshal(map[string]any{"command": cmd})
	resp, err := b.execd(ctx, http.MethodPost, "/command", bytes.NewReader(body), int64(len(body)), "application/json")
	if err != nil {
		return 0, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	switch {
	case err != nil:
		return 0, fmt.Errorf("command stream: %w", err)
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("command: status %d: %.200s", resp.StatusCode, data)
	case !bytes.Contains(data, []byte(`"execution_complete"`)):
		return 0, fmt.Errorf("command did not complete: %.300s", data)
	case want != "" && !bytes.Contains(data, []byte(want)):
		return 0, fmt.Errorf("command output lacks %.40q: %.300s", want, data)
	}
	return d, nil
}

// upload writes size bytes of src to path through execd's multipart
// upload. A size of -1 streams a body of unknown length, as the TypeScript
// SDK sends a stream; otherwise the body has a Content-Length, as every SDK
// sends bytes or a file.
func (b *box) upload(ctx context.Context, p string, src io.Reader, size int64) error {
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	meta, err := mw.CreateFormFile("metadata", "metadata")
	if err != nil {
		return err
	}
	if err := json.NewEncoder(meta).Encode(map[string]any{"path": p}); err != nil {
		return err
	}
	if _, err := mw.CreateFormFile("file", path.Base(p)); err != nil {
		return err
	}
	n := head.Len()
	if err := mw.Close(); err != nil {
		return err
	}
	tail := bytes.Clone(head.Bytes()[n:])
	head.Truncate(n)
	length := int64(-1)
	if size >= 0 {
		length = int64(head.Len()+len(tail)) + size
	}
	body := io.MultiReader(&head, src, bytes.NewReader(tail))
	resp, err := b.execd(ctx, http.MethodPost, "/files/upload", body, length, mw.FormDataContentType())
	if err != nil {
		return err
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("upload %s: status %d: %.200s", p, resp.StatusCode, data)
	}
	return nil
}

// download reads a file through execd and returns its size.
func (b *box) download(ctx context.Context, p string) (int64, error) {
	resp, err := b.execd(ctx, http.MethodGet, "/files/download?path="+url.QueryEscape(p), nil, 0, "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("download %s: status %d: %.200s", p, resp.StatusCode, data)
	}
	return io.Copy(io.Discard, resp.Body)
}

func (a *api) delete(ctx context.Context, id string) error {
	return a.call(ctx, http.MethodDelete, "/v1/sandboxes/"+id, nil, nil, http.StatusNoContent)
}

// processStats reads sandboxd's goroutines and RSS from /metrics.
func (a *api) processStats(ctx context.Context) (goroutines, rss int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("OPEN-SANDBOX-API-KEY", a.key)
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET /metrics: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(val, 10, 64)
		switch name {
		case "go_goroutines":
			goroutines = n
		case "process_resident_memory_bytes":
			rss = n
		}
	}
	return goroutines, rss, sc.Err()
}

// vmRSS reads VmRSS of a process from /proc (bytes).
func vmRSS(pid int) (int64, error) { return procStatus(pid, "VmRSS") }

// procStatus reads a size field (in kB) of /proc/PID/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// server is a sandboxd started by the benchmark (-start).
type server struct {
	cmd      *exec.Cmd
	dir      string
	url      string
	key      string
	instance string
	exited   chan error
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startServer runs binary with a fresh config and store in a temp dir, on
// a free loopback port, and waits for /health. pprof opts in to the
// profiler; lifecycle goes into the [lifecycle] table, extra is appended
// to the config.
func startServer(binary string, pprof bool, transport, lifecycle, extra string) (*server, error) {
	dir, err := os.MkdirTemp("", "sandboxd-bench-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &server{dir: dir, url: fmt.Sprintf("http://127.0.0.1:%d", port), key: randHex(24), instance: "bench-" + randHex(4), exited: make(chan error, 1)}
	cfg := fmt.Sprintf("[server]\nhost = \"127.0.0.1\"\nport = %d\napi_key = %q\n\n[store]\ndir = %q\n\n[lifecycle]\ninstance_id = %q\n%s\n[docker]\nagent_transport = %q\n",
		port, s.key, filepath.Join(dir, "store"), s.instance, lifecycle, transport) + extra
	cfgPath := filepath.Join(dir, "sandboxd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "sandboxd.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(binary, "--config", cfgPath)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.Env = os.Environ()
	if pprof {
		s.cmd.Env = append(s.cmd.Env, "SANDBOXD_PPROF=1")
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case err := <-s.exited:
			return nil, fmt.Errorf("sandboxd exited before it was healthy (%v); log in %s", err, logf.Name())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("sandboxd not healthy after 60s; log in %s", logf.Name())
		}
	}
}

// logTail returns the last n lines of the server's log.
func (s *server) logTail(n int) string {
	data, _ := os.ReadFile(filepath.Join(s.dir, "sandboxd.log"))
	lines := strings.SplitAfter(string(data), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "")
}

// stop ends the server (SIGTERM, then SIGKILL) and removes its temp dir.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.dir)
}
