//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

// pauseHangGuard bounds each API call of the pause stress test. It is not a
// timing assertion: a wedged container made calls hang for [docker]
// api_timeout (180 s), and this only turns such a hang into a failure.
const pauseHangGuard = 90 * time.Second

// guardedDo is s.do for goroutines: it bounds the call by pauseHangGuard and
// returns an error instead of failing the test.
func guardedDo(s *Server, method, path string, body []byte, ctype string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pauseHangGuard)
	defer cancel()
	start := time.Now()
	status, data, err := request(ctx, s.client, s, method, path, ctype, body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: no answer after %s: %w", method, path, time.Since(start).Round(time.Second), err)
	}
	return status, data, nil
}

// guardedWant is guardedDo with an expected status.
func guardedWant(s *Server, method, path string, body any, want int) ([]byte, error) {
	var data []byte
	ctype := ""
	if body != nil {
		data, _ = json.Marshal(body)
		ctype = "application/json"
	}
	status, data, err := guardedDo(s, method, path, data, ctype)
	if err != nil {
		return nil, err
	}
	if status != want {
		return nil, fmt.Errorf("%s %s: status %d, want %d; body %s", method, path, status, want, data)
	}
	return data, nil
}

// thawFrozenAtEnd thaws, when the test ends, every frozen cgroup of the
// instance's containers, so that the harness can remove containers that a
// pause wedged (frozen with an exec's runc init inside: Docker itself then
// hangs on them). Without the bug this finds nothing to do.
func thawFrozenAtEnd(t *testing.T, s *Server) {
	t.Cleanup(func() {
		for _, c := range containersByLabel(t, labelInstance, s.InstanceID) {
			for _, state := range []string{
				"/sys/fs/cgroup/freezer/docker/" + c.ID + "/freezer.state",
				"/sys/fs/cgroup/freezer/system.slice/docker-" + c.ID + ".scope/freezer.state",
			} {
				if b, err := os.ReadFile(state); err == nil && strings.TrimSpace(string(b)) == "FROZEN" && hasRuncInit(filepath.Dir(state)) {
					t.Errorf("container %s was left frozen with a runc init inside; thawing it", c.ID[:12])
					_ = os.WriteFile(state, []byte("THAWED"), 0)
				}
			}
		}
	})
}

// hasRuncInit reports whether a cgroup holds runc's init (an exec that has
// not started yet).
func hasRuncInit(dir string) bool {
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, pid := range strings.Fields(string(procs)) {
		cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if args := strings.Split(string(cmd), "\x00"); len(args) > 1 && strings.HasSuffix(args[0], "runc") && args[1] == "init" {
			return true
		}
	}
	return false
}

// TestPauseStress pauses sandboxes at the worst moments: right after create
// (while the agent starts), while a command streams output and while a
// 10 MiB download is in flight. Every call must answer, and every sandbox
// must work afterwards.
func TestPauseStress(t *testing.T) {
	s := startServer(t)
	thawFrozenAtEnd(t, s)

	const rounds, parallel = 30, 3
	var (
		mu  sync.Mutex
		ids []string
	)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range rounds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body, err := guardedWant(s, http.MethodPost, "/v1/sandboxes", busyboxRequest(), http.StatusAccepted)
			if err != nil {
				t.Errorf("round %d: %v", i, err)
				return
			}
			var sb lcSandbox
			if err := json.Unmarshal(body, &sb); err != nil || sb.ID == "" {
				t.Errorf("round %d: create answered %s", i, body)
				return
			}
			mu.Lock()
			ids = append(ids, sb.ID)
			mu.Unlock()
			for _, step := range []string{"/pause", "/resume"} {
				if _, err := guardedWant(s, http.MethodPost, sandboxPath(sb.ID, step), nil, http.StatusAccepted); err != nil {
					t.Errorf("round %d: %v", i, err)
					return
				}
			}
			if _, err := guardedWant(s, http.MethodGet, sandboxPath(sb.ID), nil, http.StatusOK); err != nil {
				t.Errorf("round %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	t.Run("command streaming", func(t *testing.T) { pauseDuringCommand(t, s, ids[0]) })
	readOnly, err := guardedWant(s, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"extensions": map[string]string{"sandboxd.io/read-only-rootfs": "true"}}), http.StatusAccepted)
	if err != nil {
		t.Fatal(err)
	}
	ro := decodeJSON[lcSandbox](t, readOnly)
	ids = append(ids, ro.ID)
	t.Run("download in flight", func(t *testing.T) { pauseDuringDownload(t, s, ids[1], ro.ID) })

	// Every sandbox runs commands and moves files, then goes.
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := checkSandboxWorks(s, id); err != nil {
				t.Error(err)
			}
			if _, err := guardedWant(s, http.MethodDelete, sandboxPath(id), nil, http.StatusNoContent); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		assertGone(t, s, id)
	}
}

// checkSandboxWorks runs a command in a sandbox and round-trips a file.
func checkSandboxWorks(s *Server, id string) error {
	out, err := guardedCommand(s, id, "echo works-$((6*7))")
	if err != nil {
		return err
	}
	if out != "works-42" {
		return fmt.Errorf("sandbox %s: command printed %q, want works-42", id, out)
	}
	body, ctype, err := uploadBody("/tmp/stress.txt", "file of "+id)
	if err != nil {
		return err
	}
	if status, data, err := guardedDo(s, http.MethodPost, proxyPath(id, "/files/upload"), body, ctype); err != nil || status != http.StatusOK {
		return fmt.Errorf("sandbox %s: upload: status %d, err %v, body %s", id, status, err, data)
	}
	data, err := guardedWant(s, http.MethodGet, proxyPath(id, "/files/download?path=/tmp/stress.txt"), nil, http.StatusOK)
	if err != nil {
		return err
	}
	if string(data) != "file of "+id {
		return fmt.Errorf("sandbox %s: downloaded %q", id, data)
	}
	return nil
}

// guardedCommand runs command in a sandbox and returns its stdout lines
// joined by "\n"; it must complete.
func guardedCommand(s *Server, id, command string) (string, error) {
	data, err := guardedWant(s, http.MethodPost, proxyPath(id, "/command"), map[string]any{"command": command}, http.StatusOK)
	if err != nil {
		return "", err
	}
	lines, complete := commandEvents(data)
	if !complete {
		return "", fmt.Errorf("sandbox %s: %q did not complete: %s", id, command, data)
	}
	return strings.Join(lines, "\n"), nil
}

// commandEvents returns the stdout lines of an execd event stream and
// whether it ended with execution_complete.
func commandEvents(data []byte) (stdout []string, complete bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var ev struct{ Type, Text string }
		if json.Unmarshal(bytes.TrimSpace(sc.Bytes()), &ev) != nil {
			continue
		}
		switch ev.Type {
		case "stdout":
			stdout = append(stdout, ev.Text)
		case "execution_complete":
			complete = true
		}
	}
	return stdout, complete
}

// pauseDuringCommand pauses and resumes a sandbox while a command streams
// output; the command must finish with all its output.
func pauseDuringCommand(t *testing.T, s *Server, id string) {
	const n = 12
	ctx, cancel := context.WithTimeout(t.Context(), pauseHangGuard)
	defer cancel()
	cmd, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("for i in $(seq 1 %d); do echo line-$i; sleep 0.2; done", n)})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+proxyPath(id, "/command"), bytes.NewReader(cmd))
	req.Header.Set(apiKeyHeader, s.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("start command: %v", err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var seen bytes.Buffer
	// Pause once the command has printed its first line.
	for !strings.Contains(seen.String(), "line-1") {
		line, err := br.ReadBytes('\n')
		seen.Write(line)
		if err != nil {
			t.Fatalf("command stream ended before its first line: %v; got %s", err, seen.Bytes())
		}
	}
	for _, step := range []string{"/pause", "/resume"} {
		if _, err := guardedWant(s, http.MethodPost, sandboxPath(id, step), nil, http.StatusAccepted); err != nil {
			t.Fatal(err)
		}
		if _, err := guardedWant(s, http.MethodGet, "/v1/sandboxes", nil, http.StatusOK); err != nil {
			t.Fatalf("list while %s: %v", step, err)
		}
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("read the rest of the command stream: %v", err)
	}
	seen.Write(rest)
	lines, complete := commandEvents(seen.Bytes())
	if !complete || len(lines) != n || lines[n-1] != fmt.Sprintf("line-%d", n) {
		t.Errorf("command across pause/resume: complete=%v, %d lines %q; want %d lines", complete, len(lines), lines, n)
	}
}

// pauseDuringDownload pauses and resumes a sandbox while a 10 MiB download
// is in flight. A download through the archive API (dockerd holds the
// container while it streams) read steadily completes before the pause goes
// ahead; one stalled is cut short, so that the pause still answers. A
// download through the agent (read-only root) stalls while paused and
// completes after the resume.
func pauseDuringDownload(t *testing.T, s *Server, id, readOnlyID string) {
	for _, tc := range []struct {
		name    string
		id      string
		stalled bool // the client stops reading until the resume answers
		intact  bool
	}{
		{"archive, read steadily", id, false, true},
		{"archive, stalled", id, true, false},
		{"agent, stalled", readOnlyID, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 10 << 20
			if _, err := guardedCommand(s, tc.id, fmt.Sprintf("head -c %d /dev/urandom > /tmp/big.bin", size)); err != nil {
				t.Fatal(err)
			}
			sum, err := guardedCommand(s, tc.id, "sha256sum /tmp/big.bin | cut -d' ' -f1")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), pauseHangGuard)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+proxyPath(tc.id, "/files/download?path=/tmp/big.bin"), nil)
			req.Header.Set(apiKeyHeader, s.APIKey)
			resp, err := s.client.Do(req)
			if err != nil {
				t.Fatalf("start download: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("download: status %d", resp.StatusCode)
			}
			h := sha256.New()
			if _, err := io.CopyN(h, resp.Body, 1<<20); err != nil {
				t.Fatalf("read the first MiB: %v", err)
			}
			n := int64(1 << 20)
			var readErr error
			read := make(chan struct{})
			if !tc.stalled {
				go func() {
					defer close(read)
					for readErr == nil {
						var m int64
						m, readErr = io.CopyN(h, resp.Body, 256<<10)
						n += m
						time.Sleep(20 * time.Millisecond) // a client that reads along, not all at once
					}
				}()
			}
			for _, step := range []string{"/pause", "/resume"} {
				if _, err := guardedWant(s, http.MethodPost, sandboxPath(tc.id, step), nil, http.StatusAccepted); err != nil {
					t.Fatal(err)
				}
			}
			if tc.stalled {
				var m int64
				m, readErr = io.Copy(h, resp.Body)
				n += m
			} else {
				<-read
				if readErr == io.EOF {
					readErr = nil
				}
			}
			got := hex.EncodeToString(h.Sum(nil))
			switch {
			case tc.intact && (readErr != nil || n != size || got != sum):
				t.Errorf("download across pause/resume: %d bytes, sha256 %s, err %v; want %d bytes, %s", n, got, readErr, size, sum)
			case !tc.intact && readErr == nil && (n != size || got != sum):
				t.Errorf("download cut short by the pause: %d bytes and no error; want the whole file or an error", n)
			}
			if err := checkSandboxWorks(s, tc.id); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestPauseRepairsStuckSandbox freezes a sandbox from outside sandboxd while
// runc starts a process in it (the wedge sandboxd itself no longer causes)
// and checks that sandboxd's reaper repairs it: the sandbox then answers,
// resumes, runs commands and is deleted.
func TestPauseRepairsStuckSandbox(t *testing.T) {
	s := startServer(t)
	thawFrozenAtEnd(t, s)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	if got := runCommand(t, s, sb.ID, "echo up"); got != "up" {
		t.Fatalf("command printed %q", got)
	}
	cid := sandboxContainer(t, sb.ID).ID
	cli := dockerClient(t)
	state := "/sys/fs/cgroup/freezer/docker/" + cid + "/freezer.state"
	if _, err := os.Stat(state); err != nil {
		t.Skipf("no cgroup v1 freezer with the cgroupfs driver here (%v)", err)
	}
	// The reaper (every second in the harness's config) may repair the
	// sandbox before this loop sees it stuck: its log says so.
	repaired := func() bool {
		b, _ := os.ReadFile(s.LogPath)
		return strings.Contains(string(b), "repaired paused sandbox stuck in a process start")
	}
	stuck := false
	for attempt := 0; attempt < 40 && !stuck; attempt++ {
		ex, err := cli.ContainerExecCreate(t.Context(), cid, container.ExecOptions{Cmd: []string{"true"}})
		if err != nil {
			t.Fatalf("exec create: %v", err)
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), pauseHangGuard)
			defer cancel()
			_ = cli.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{Detach: true})
		}()
		time.Sleep(time.Duration(attempt%8) * 2 * time.Millisecond) // aim at runc's start
		ctx, cancel := context.WithTimeout(t.Context(), pauseHangGuard)
		if err := cli.ContainerPause(ctx, cid); err != nil {
			t.Fatalf("pause from outside: %v", err)
		}
		cancel()
		b, _ := os.ReadFile(state)
		if stuck = strings.TrimSpace(string(b)) == "FROZEN" && hasRuncInit(filepath.Dir(state)) || repaired(); stuck {
			break
		}
		ctx, cancel = context.WithTimeout(t.Context(), pauseHangGuard)
		err = cli.ContainerUnpause(ctx, cid)
		cancel()
		if err != nil {
			// A repair thawed it between the check and the unpause.
			waitUntil(t, stateWait, "the repair that raced the unpause ("+err.Error()+")", repaired)
			stuck = true
		}
	}
	if !stuck {
		t.Skip("no pause caught runc starting a process in 40 attempts")
	}
	// The reaper runs every second in the harness's config.
	waitUntil(t, stateWait, "the stuck sandbox to be repaired and answer", func() bool {
		status, body, err := guardedDo(s, http.MethodGet, sandboxPath(sb.ID), nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return status == http.StatusOK && decodeJSON[lcSandbox](t, body).Status.State == "Paused"
	})
	waitUntil(t, stateWait, "sandboxd's log to report the repair", repaired)
	if _, err := guardedWant(s, http.MethodPost, sandboxPath(sb.ID, "/resume"), nil, http.StatusAccepted); err != nil {
		t.Fatal(err)
	}
	if err := checkSandboxWorks(s, sb.ID); err != nil {
		t.Error(err)
	}
	if _, err := guardedWant(s, http.MethodDelete, sandboxPath(sb.ID), nil, http.StatusNoContent); err != nil {
		t.Fatal(err)
	}
	assertGone(t, s, sb.ID)
}
