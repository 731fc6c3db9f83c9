//go:build linux

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
)

// pipeConn is the host's end of the agent's stdin and stdout.
type pipeConn struct {
	io.Reader
	io.WriteCloser
}

// startAgent runs Run on one end of two pipes, as `sandboxd agent` runs on
// its stdin and stdout, and dials it from the other.
func startAgent(t testing.TB) (*Client, <-chan error, func()) {
	t.Helper()
	return dialPipes(t, func(stdin io.Reader, stdout io.Writer) error {
		return Run(context.Background(), stdin, stdout, slog.New(slog.DiscardHandler))
	})
}

// dialPipes runs agent on one end of two pipes, as Docker runs `sandboxd
// agent` on the exec's stdin and stdout, and dials it from the other. It
// returns the client, what agent returned, and the function that ends the
// exec's stdin.
func dialPipes(t testing.TB, agent func(stdin io.Reader, stdout io.Writer) error) (*Client, <-chan error, func()) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- agent(inR, outW)
		outW.Close()
		inR.Close()
	}()
	c, err := Dial(pipeConn{outR, inW})
	if err != nil {
		t.Fatal(err)
	}
	// Closing the agent's stdin is how sandboxd's side of the exec ends.
	hangUp := func() { inW.Close() }
	t.Cleanup(func() {
		hangUp()
		c.Close()
	})
	return c, done, hangUp
}

func TestRunAndDial(t *testing.T) {
	t.Parallel()
	c, done, hangUp := startAgent(t)
	hc := &http.Client{Transport: c.Transport()}

	resp, err := hc.Get("http://agent/ping")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("ping: %s %q", resp.Status, body)
	}

	b, _ := json.Marshal(map[string]string{"command": "echo over yamux; echo err >&2; exit 2"})
	resp, err = hc.Post("http://agent/command", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	res := readStream(t, resp)
	resp.Body.Close()
	if !slices.Equal(res.stdout, []string{"over yamux"}) || !slices.Equal(res.stderr, []string{"err"}) || res.exitCode(t) != "2" {
		t.Fatalf("stdout %q stderr %q events %+v", res.stdout, res.stderr, res.events)
	}

	// A large upload and download cross the multiplexed pipe intact.
	payload := strings.Repeat("0123456789", 1<<20)
	dir := t.TempDir()
	ct, ub := uploadBody(t, []uploadPart{meta(dir+"/big", 644), file(dir+"/big", payload)})
	if resp, err = hc.Post("http://agent/files/upload", ct, ub); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err = hc.Get("http://agent/files/download?path=" + dir + "/big"); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != payload {
		t.Fatalf("download: %d bytes, want %d", len(got), len(payload))
	}

	// sandboxd reverse-proxies WebSockets (PTY) through the same transport.
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "agent"}) },
		Transport: c.Transport(),
	})
	defer front.Close()
	if resp, err = hc.Post("http://agent/pty", "application/json", nil); err != nil {
		t.Fatal(err)
	}
	id := decode[map[string]string](t, resp, http.StatusCreated)["session_id"]
	resp.Body.Close()
	ws := &testAgent{url: front.URL}
	wc, _, err := ws.dialPTY(t, id, "")
	if err != nil {
		t.Fatal(err)
	}
	wc.expectText("connected")
	wc.stdin("echo $((2+3))x\n")
	wc.until(map[byte]string{chanStdout: "5x"})
	wc.conn.Close()

	hangUp()
	if err := <-done; err != nil {
		t.Fatalf("Run after EOF: %v, want nil", err)
	}
	<-c.Done()
	if _, err := hc.Get("http://agent/ping"); err == nil {
		t.Fatal("request succeeded after the agent exited")
	}
}

func TestRunStopsWithContext(t *testing.T) {
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	defer inW.Close()
	defer outR.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, inR, outW, nil) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
}

// BenchmarkRoundTrip measures requests through Dial, yamux and the agent,
// served directly on the exec's stdio (Run) or through the bridge to a
// daemon (attach): a ping, and a `true` command (fork, exec and the event
// stream).
func BenchmarkRoundTrip(b *testing.B) {
	transports := []struct {
		name  string
		start func(testing.TB) *Client
	}{
		{"direct", func(tb testing.TB) *Client {
			c, _, _ := startAgent(tb)
			return c
		}},
		{"bridged", func(tb testing.TB) *Client {
			ds := &daemons{t: tb}
			name := testSocket()
			c, _, _ := dialPipes(tb, func(stdin io.Reader, stdout io.Writer) error {
				return attach(context.Background(), name, ds.spawn, stdin, stdout, io.Discard, slog.New(slog.DiscardHandler))
			})
			return c
		}},
	}
	command, _ := json.Marshal(map[string]string{"command": "true"})
	requests := []struct {
		name, method, path string
		body               []byte
		want               string // in the response body
	}{
		{"ping", http.MethodGet, "/ping", nil, ""},
		{"true", http.MethodPost, "/command", command, evComplete},
	}
	for _, req := range requests {
		for _, tr := range transports {
			b.Run(req.name+"/"+tr.name, func(b *testing.B) {
				hc := &http.Client{Transport: tr.start(b).Transport()}
				for b.Loop() {
					r, _ := http.NewRequest(req.method, "http://agent"+req.path, bytes.NewReader(req.body))
					resp, err := hc.Do(r)
					if err != nil {
						b.Fatal(err)
					}
					out, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(req.want)) {
						b.Fatalf("%s: %q", resp.Status, out)
					}
				}
			})
		}
	}
}

func TestActivity(t *testing.T) {
	a := newTestAgent(t)
	if n := decode[map[string]int](t, a.do(t, http.MethodGet, "/_sandboxd/activity", nil), http.StatusOK)["running"]; n != 0 {
		t.Fatalf("idle agent reports %d running", n)
	}
}
