//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The memory a sandbox or a token holder can make sandboxd hold (SECURITY.md,
// "Memory held for sandboxes"): what one sandbox's 128 proxied requests in
// flight may hold at most, by the formula there, and what must come back
// once the sandbox is gone. The tests below assert against these with the
// margin of a loaded machine, not against what they measure.
const (
	secSandboxBudget = 96 << 20
	secReturnMargin  = 16 << 20
)

// secMemoryServer starts sandboxd with the profiler on, whose heap
// profile (?gc=1) runs a collection: what is garbage is then collected at
// once, not at the runtime's next forced collection two minutes later.
func secMemoryServer(t *testing.T) *Server {
	t.Setenv("SANDBOXD_PPROF", "1")
	return startServer(t)
}

// secHeldRSS waits until sandboxd's RSS stops growing (the windows are
// full) and returns it.
func secHeldRSS(t *testing.T, pid int) int64 {
	t.Helper()
	last := secVmRSS(t, pid)
	for range 20 {
		time.Sleep(time.Second)
		now := secVmRSS(t, pid)
		if now-last < 1<<20 {
			return now
		}
		last = now
	}
	return last
}

// secRSSReturned deletes the sandbox and waits until sandboxd's RSS is back
// within secReturnMargin of base.
func secRSSReturned(t *testing.T, box *execdBox, pid int, base int64) {
	t.Helper()
	execdDelete(t, box.s, box.ID)
	box.deleted = true
	deadline := time.Now().Add(time.Minute)
	var rss int64
	for {
		if status, _, body := box.s.do(t, http.MethodGet, "/debug/pprof/heap?gc=1", nil, nil); status != http.StatusOK {
			t.Fatalf("heap profile: %d %.200s", status, body)
		}
		if rss = secVmRSS(t, pid); rss <= base+secReturnMargin || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("sandboxd RSS %d MiB once the sandbox is gone (base %d MiB)", rss>>20, base>>20)
	if rss > base+secReturnMargin {
		t.Errorf("sandboxd RSS stayed at %d MiB after the sandbox was deleted, base %d MiB", rss>>20, base>>20)
	}
}

// secStall sends n proxied GETs to path with the sandbox's token on
// connections of their own and never reads the answers. The connections
// close when the test ends.
func secStall(t *testing.T, s *Server, box *execdBox, path string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	var hdr strings.Builder
	for k, v := range box.Headers {
		fmt.Fprintf(&hdr, "%s: %s\r\n", k, v)
	}
	for i := range n {
		c, err := net.DialTimeout("tcp", s.Addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetReadBuffer(4 << 10) // the kernel holds little for the client
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "GET %s%d HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, i, s.Addr, hdr.String()); err != nil {
			t.Fatal(err)
		}
	}
	return conns
}

// secServe starts a server on port in the sandbox (busybox nc) that runs
// script for each connection once the request's head is read.
func secServe(t *testing.T, box *execdBox, port int, script string) {
	t.Helper()
	cmd := fmt.Sprintf(`printf '#!/bin/sh\nwhile read -r l; do case "$l" in "$(printf "\\r")"|"") break;; esac; done\n%s\n' > /tmp/s%d.sh && chmod +x /tmp/s%d.sh`, script, port, port)
	if _, code := box.secShell(t, cmd); code != 0 {
		t.Fatalf("writing the server script exited %d", code)
	}
	box.run(t, map[string]any{"command": fmt.Sprintf("nc -ll -p %d -e /tmp/s%d.sh", port, port), "background": true})
	waitUntil(t, startTimeout, "the server to listen", func() bool {
		// Its answer, or its answer refused; not a connection refused.
		c := secStall(t, box.s, box, fmt.Sprintf("/sandboxes/%s/proxy/%d/probe", box.ID, port), 1)[0]
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		head := make([]byte, 512)
		n, _ := io.ReadFull(resp.Body, head)
		return resp.StatusCode == http.StatusOK || bytes.Contains(head[:n], []byte("BACKEND_RESPONSE_FAILED"))
	})
}

// TestSecurityStalledReaders has a token holder send 128 proxied requests
// (the per-sandbox cap) to a sandbox port that answers 1 GiB as fast as it
// can, and never read the answers: sandboxd's growth stays within the
// per-sandbox budget (before: 33 → 743 MiB, a 4 MiB window per stream),
// and is returned once the sandbox is gone.
func TestSecurityStalledReaders(t *testing.T) {
	s := secMemoryServer(t)
	box := newExecdBox(t, s, busyboxWith(map[string]any{"resourceLimits": map[string]string{"cpu": "1", "memory": "2Gi"}}))
	secServe(t, box, 8000, `printf "HTTP/1.1 200 OK\\r\\nContent-Length: 1073741824\\r\\n\\r\\n"; exec head -c 1073741824 /dev/zero`)
	pid := s.cmd.Process.Pid
	before := secVmRSS(t, pid)
	conns := secStall(t, s, box, "/sandboxes/"+box.ID+"/proxy/8000/stall", 128)
	held := secHeldRSS(t, pid)
	t.Logf("sandboxd RSS %d MiB before, %d MiB with 128 stalled readers", before>>20, held>>20)
	if held-before > secSandboxBudget {
		t.Errorf("128 stalled readers grew sandboxd by %d MiB, over the budget of %d MiB", (held-before)>>20, secSandboxBudget>>20)
	}
	if status, _, body := s.do(t, http.MethodGet, "/health", nil, nil); status != http.StatusOK {
		t.Errorf("/health: %d %s", status, body)
	}
	for _, c := range conns {
		c.Close()
	}
	secRSSReturned(t, box, pid, before)
}

// TestSecurityHeaderFloodsHeld has 30 proxied requests held unread while
// the sandbox's server answers each with 9 MiB of headers and never closes:
// each answer is refused past 64 KiB of headers, and what sandboxd had
// received of it is not kept (before: 31 → 200–282 MiB).
func TestSecurityHeaderFloodsHeld(t *testing.T) {
	s := secMemoryServer(t)
	box := newExecdBox(t, s, busyboxWith(map[string]any{"resourceLimits": map[string]string{"cpu": "1", "memory": "2Gi"}}))
	if _, code := box.secShell(t, `i=0; while [ $i -lt 9000 ]; do printf 'X-Pad-%d: %01000d\r\n' $i 0; i=$((i+1)); done > /tmp/hdr`); code != 0 {
		t.Fatalf("writing the headers exited %d", code)
	}
	secServe(t, box, 8000, `printf "HTTP/1.1 200 OK\\r\\n"; cat /tmp/hdr; printf "Content-Length: 0\\r\\n\\r\\n"; exec sleep 3600`)
	pid := s.cmd.Process.Pid
	before := secVmRSS(t, pid)
	secStall(t, s, box, "/sandboxes/"+box.ID+"/proxy/8000/flood", 30)
	held := secHeldRSS(t, pid)
	t.Logf("sandboxd RSS %d MiB before, %d MiB with 30 header floods held", before>>20, held>>20)
	if limit := int64(30) * secSandboxBudget / 128; held-before > limit {
		t.Errorf("30 header floods grew sandboxd by %d MiB, over their share of the budget, %d MiB", (held-before)>>20, limit>>20)
	}
	// A token holder's own headers are bounded too: they are held while
	// the request is in flight.
	status, _, _ := box.do(t, http.MethodGet, "/ping", nil, map[string]string{"X-Pad": strings.Repeat("a", 128<<10)})
	if status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a request with 128 KiB of headers: %d, want 431", status)
	}
	secRSSReturned(t, box, pid, before)
}

// TestSecurityFakeAgent runs sandbox code that kills the agent daemon and
// serves sandboxd's next session on its socket itself (the direct path;
// no token is needed for this, only code in the sandbox): it opens 256
// streams towards sandboxd with 256 KiB each (before: +150 MiB per
// sandbox) and floods the daemon's log route with 64 KiB lines of control
// bytes (before: 10 lines a second, each ×4–6 once escaped). sandboxd
// holds nothing for the streams, its log grows within the byte budget,
// and its memory is returned once the sandbox is gone.
func TestSecurityFakeAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the direct path needs sandboxd to be root")
	}
	bin := filepath.Join(t.TempDir(), "fakeagent")
	build := exec.Command("go", "build", "-o", bin, "./e2e/fakeagent")
	build.Dir = repoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build fakeagent: %v\n%s", err, out)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	s := secMemoryServer(t)
	box := newExecdBox(t, s, busyboxRequest())
	if status, body := box.upload(t, "/tmp/fakeagent", 755, f, true); status != http.StatusOK {
		t.Fatalf("upload fakeagent: %d %s", status, body)
	}
	pid := s.cmd.Process.Pid
	before := secVmRSS(t, pid)
	box.run(t, map[string]any{"command": "/tmp/fakeagent </dev/null >/dev/null 2>&1", "background": true})

	var st struct{ Opened, Sent, LogStreams, LogBytes int64 }
	waitUntil(t, startTimeout, "the fake agent's session, streams and log", func() bool {
		status, _, body := box.do(t, http.MethodGet, "/fake/status", nil, nil)
		if status != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Logf("fake agent status: %d %.200s", status, body)
			return false
		}
		if st.Opened >= 256 && st.Sent >= 256*(256<<10)*3/4 && st.LogStreams > 0 {
			return true
		}
		t.Logf("fake agent status: %+v", st)
		return false
	})
	logStart, flood := secLogSize(t, s), time.Now()
	time.Sleep(10 * time.Second)
	held := secVmRSS(t, pid)
	logged, elapsed := secLogSize(t, s)-logStart, time.Since(flood)
	status, _, body := box.do(t, http.MethodGet, "/fake/status", nil, nil)
	_ = json.Unmarshal(body, &st)
	t.Logf("fake agent: %d streams, %d bytes sent on them, %d MiB of log lines (status %d); sandboxd RSS %d → %d MiB, its log +%d bytes in %v",
		st.Opened, st.Sent, st.LogBytes>>20, status, before>>20, held>>20, logged, elapsed.Round(time.Second))
	if held-before > 32<<20 {
		t.Errorf("sandboxd grew by %d MiB for streams it never accepted", (held-before)>>20)
	}
	// The byte budget (4 KiB/s after a 64 KiB burst, at most doubled by
	// escaping) plus each record's own fields: 10 a second.
	if limit := 2*(64<<10+int64(elapsed.Seconds()+1)*4<<10) + int64(elapsed.Seconds()+1)*10*400; logged > limit {
		t.Errorf("sandboxd's log grew by %d bytes in %v of a log flood, over the budget's %d", logged, elapsed.Round(time.Second), limit)
	}
	secRSSReturned(t, box, pid, before)
}

// TestSecurityEarlyPartCap uploads a file part of 17 MiB before its
// metadata, into a running sandbox (on the direct path sandboxd parses the
// form and spools such parts on the host) and into a stopped one (always
// sandboxd's): 413 with the envelope, nothing written; 15 MiB still works.
func TestSecurityEarlyPartCap(t *testing.T) {
	s := startServer(t)
	running := newExecdBox(t, s, busyboxRequest())
	stopped := newExecdBox(t, s, busyboxWith(map[string]any{"entrypoint": []string{"sh", "-c", "mkdir /late; sleep 3"}}))
	waitState(t, s, stopped.ID, "Terminated")
	if _, code := running.secShell(t, "mkdir /late"); code != 0 {
		t.Fatal("mkdir /late failed")
	}
	form := func(size int, path string) ([]byte, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		fw, _ := mw.CreateFormFile("file", "early.bin")
		fw.Write(bytes.Repeat([]byte("x"), size))
		meta, _ := mw.CreateFormFile("metadata", "metadata")
		fmt.Fprintf(meta, `{"path":%q}`, path)
		mw.Close()
		return b.Bytes(), mw.FormDataContentType()
	}
	for _, box := range []*execdBox{running, stopped} {
		body, ct := form(17<<20, "/late/big.bin")
		status, hdr, resp := box.do(t, http.MethodPost, "/files/upload", body, map[string]string{"Content-Type": ct})
		secWantError(t, "a 17 MiB part before its metadata", status, hdr, resp, http.StatusRequestEntityTooLarge, "")
		body, ct = form(15<<20, "/late/ok.bin")
		if status, _, resp := box.do(t, http.MethodPost, "/files/upload", body, map[string]string{"Content-Type": ct}); status != http.StatusOK {
			t.Errorf("a 15 MiB part before its metadata: %d %.200s", status, resp)
		}
	}
}

// secLogSize is the size of sandboxd's log file.
func secLogSize(t *testing.T, s *Server) int64 {
	t.Helper()
	fi, err := os.Stat(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
