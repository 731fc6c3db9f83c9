//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// secVmRSS returns the resident memory of a process in bytes.
func secVmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	kb, err := strconv.ParseInt(strings.Fields(secStatus(string(data))["VmRSS"])[0], 10, 64)
	if err != nil {
		t.Fatalf("VmRSS of %d: %v", pid, err)
	}
	return kb << 10
}

// secKeyHolderServed checks that an API-key holder still gets answers: the
// lifecycle API, /health, and a command in the sandbox.
func secKeyHolderServed(t *testing.T, s *Server, id string) {
	t.Helper()
	for _, p := range []string{"/health", sandboxPath(id)} {
		if status, _, body := s.do(t, http.MethodGet, p, nil, nil); status != http.StatusOK {
			t.Errorf("key holder GET %s: %d %s", p, status, body)
		}
	}
	if out := runCommand(t, s, id, "echo served"); out != "served" {
		t.Errorf("key holder's command printed %q", out)
	}
}

// TestSecurityHeaderFlood points 60 proxied requests at a server in the
// sandbox that answers with 9 MiB of headers (a replaced agent could do
// the same): sandboxd refuses each answer past 64 KiB of headers with 502
// BACKEND_RESPONSE_FAILED, its memory stays bounded, and a key holder is
// still served. A port nobody listens on is BACKEND_CONNECTION_FAILED.
func TestSecurityHeaderFlood(t *testing.T) {
	s := startServer(t)
	// The sandbox's own agent holds the floods in flight: give it room.
	box := newExecdBox(t, s, busyboxWith(map[string]any{"resourceLimits": map[string]string{"cpu": "1", "memory": "2Gi"}}))
	if _, code := box.secShell(t, `i=0; while [ $i -lt 9000 ]; do printf 'X-Pad-%d: %01000d\r\n' $i 0; i=$((i+1)); done > /tmp/hdr
printf '#!/bin/sh\nwhile read -r l; do case "$l" in "$(printf "\\r")"|"") break;; esac; done\nprintf "HTTP/1.1 200 OK\\r\\n"; cat /tmp/hdr; printf "Content-Length: 0\\r\\n\\r\\n"\n' > /tmp/h.sh
chmod +x /tmp/h.sh`); code != 0 {
		t.Fatalf("writing the header server exited %d", code)
	}
	box.run(t, map[string]any{"command": "nc -ll -p 8000 -e /tmp/h.sh", "background": true})
	flood := "/sandboxes/" + box.ID + "/proxy/8000/"
	waitUntil(t, startTimeout, "the header server to listen", func() bool {
		// Its answer, whole or refused; not a connection refused.
		status, _, body := box.s.do(t, http.MethodGet, flood, nil, nil)
		return status == http.StatusOK || strings.Contains(string(body), "BACKEND_RESPONSE_FAILED")
	})

	pid := s.cmd.Process.Pid
	before := secVmRSS(t, pid)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+flood+"w"+strconv.Itoa(w), nil)
				for k, v := range box.Headers {
					req.Header.Set(k, v)
				}
				status, body, err := doRequest(s.client, req)
				mu.Lock()
				if err != nil {
					codes[err.Error()]++
				} else {
					var e struct{ Code string }
					_ = json.Unmarshal(body, &e)
					codes[fmt.Sprintf("%d %s", status, e.Code)]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	after := secVmRSS(t, pid)
	t.Logf("sandboxd RSS %d MiB before, %d MiB after 60 header floods; answers %v", before>>20, after>>20, codes)
	if n := codes["502 BACKEND_RESPONSE_FAILED"]; n != 60 {
		t.Errorf("answers %v, want 60 × 502 BACKEND_RESPONSE_FAILED", codes)
	}
	// Each flood is 9 MiB: 20 in flight, held, are 180 MiB and more.
	if after > 4*before && after-before > 120<<20 {
		t.Errorf("sandboxd RSS grew from %d MiB to %d MiB", before>>20, after>>20)
	}
	secKeyHolderServed(t, s, box.ID)

	status, hdr, body := s.do(t, http.MethodGet, "/sandboxes/"+box.ID+"/proxy/8001/", nil, nil)
	secWantError(t, "a port nobody listens on", status, hdr, body, http.StatusBadGateway, "BACKEND_CONNECTION_FAILED")
}

// TestSecurityConnectionFlood has anonymous clients hold over a thousand
// keep-alive connections to a sandboxd whose descriptor limit is 1024:
// the longest-idle connections are closed as descriptors run out, and a
// key holder's requests and /health are still answered. It also checks
// that the soft descriptor limit was raised to the hard one at start.
func TestSecurityConnectionFlood(t *testing.T) {
	s := startServer(t)
	box := newExecdBox(t, s, busyboxRequest())
	pid := s.cmd.Process.Pid
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(limits), "\n") {
		if f := strings.Fields(line); strings.HasPrefix(line, "Max open files") && len(f) >= 5 && f[3] != f[4] {
			t.Errorf("soft descriptor limit %s below the hard limit %s", f[3], f[4])
		}
	}
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(pid), "--nofile=1024:1024").CombinedOutput(); err != nil {
		t.Skipf("cannot lower sandboxd's descriptor limit: %v %s", err, out)
	}

	const flood = 1100
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	served := 0
	for range flood {
		c, err := net.DialTimeout("tcp", s.Addr, 10*time.Second)
		if err != nil {
			t.Logf("dial after %d connections: %v", len(conns), err)
			break
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "GET /v1/sandboxes HTTP/1.1\r\nHost: %s\r\n\r\n", s.Addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("anonymous request on connection %d got no answer: %v", len(conns), err)
			break
		}
		resp.Body.Close()
		served++
	}
	t.Logf("%d anonymous connections opened, %d answered", len(conns), served)
	secKeyHolderServed(t, s, box.ID)
}

// TestSecurityAgentLogFlood has sandbox code write 20 000 lines to the
// agent's stderr, which sandboxd relays into its own log: a burst gets
// through, the rest is counted as dropped. It runs on the exec transport,
// whose bridge relays its stderr: on the direct path there is no bridge,
// and the daemon's log reaches sandboxd through the same limiter.
func TestSecurityAgentLogFlood(t *testing.T) {
	s := startServer(t, withTOML("[docker]\nagent_transport = \"exec\"\n"))
	box := newExecdBox(t, s, busyboxRequest())
	if _, code := box.secShell(t, `for p in $(pidof sandboxd); do seq 1 20000 | sed 's/^/agent-flood-/' > /proc/$p/fd/2; done`); code != 0 {
		t.Fatalf("flood exited %d", code)
	}
	secKeyHolderServed(t, s, box.ID)
	var logged int
	var dropped bool
	waitUntil(t, startTimeout, "the count of dropped lines in sandboxd's log", func() bool {
		data, err := os.ReadFile(s.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		logged = strings.Count(string(data), "agent-flood-")
		dropped = strings.Contains(string(data), "agent log lines dropped")
		return dropped
	})
	if logged == 0 || logged > 1000 {
		t.Errorf("sandboxd logged %d of the 20000 lines, want a bounded burst", logged)
	}
}

// TestSecurityContainerLogsAndDisk checks that container logs rotate by
// default, and that [docker] disk_limit on a storage driver that cannot
// size a root filesystem (this machine's overlay2 on ext4) refuses to
// start with a message that names the key.
func TestSecurityContainerLogsAndDisk(t *testing.T) {
	s := startServer(t)
	box := newExecdBox(t, s, busyboxRequest())
	ctr := sandboxContainer(t, box.ID)
	if got := ctr.HostConfig.LogConfig.Config; got["max-size"] != "10m" || got["max-file"] != "3" {
		t.Errorf("log config %+v, want max-size 10m and max-file 3", ctr.HostConfig.LogConfig)
	}
	if len(ctr.HostConfig.StorageOpt) != 0 {
		t.Errorf("storage options %v without disk_limit", ctr.HostConfig.StorageOpt)
	}

	info, err := dockerClient(t).Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	backing := ""
	for _, kv := range info.DriverStatus {
		if kv[0] == "Backing Filesystem" {
			backing = kv[1]
		}
	}
	if info.Driver != "overlay2" || backing == "xfs" {
		t.Skipf("storage driver %s on %s may support disk_limit", info.Driver, backing)
	}
	p := secStart(t, "api_key = \""+randomHex(t, 16)+"\"\n[docker]\ndisk_limit = \"1G\"", nil)
	if out := p.waitRefused(t); !strings.Contains(out, "disk_limit") || !strings.Contains(out, "overlay2") {
		t.Errorf("refusal does not explain disk_limit:\n%s", out)
	}
}
