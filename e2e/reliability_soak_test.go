//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
)

// Leak margins of the soak: what a quiet server may hold above its
// baseline after the load (connections that idle out, runtime caches).
const (
	soakGoroutineMargin = 10
	soakFDMargin        = 5
	soakRSSMargin       = 64 << 20
	// soakSettle bounds the wait for the server to drop back to its
	// baseline: Docker's idle connections close after 30 s.
	soakSettle = 90 * time.Second
)

// TestReliabilitySoak runs SANDBOXD_SOAK_CYCLES (default 60) cycles of
// create → endpoint → command → upload → download → delete, each sandbox
// with a volume of its own, from SANDBOXD_SOAK_CLIENTS (default 10)
// concurrent clients. Every cycle must succeed; afterwards no container or
// volume of the instance is left, and the server's goroutines, file
// descriptors and resident memory are back near where they were before.
// The README's figures come from SANDBOXD_SOAK_CYCLES=500
// SANDBOXD_SOAK_CLIENTS=50.
func TestReliabilitySoak(t *testing.T) {
	t.Parallel()
	cycles, clients := envInt(t, "SANDBOXD_SOAK_CYCLES", 60), envInt(t, "SANDBOXD_SOAK_CLIENTS", 10)
	var s *Server
	// Registered before the server's clean-up, so it runs after it has
	// removed the containers that use the volumes.
	t.Cleanup(func() {
		if s != nil {
			removeInstanceVolumes(t, s.InstanceID)
		}
	})
	s = startServer(t)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 5 * time.Minute}
	defer client.CloseIdleConnections()

	// A first cycle (number -1) fills the agent volume and the connection pools.
	if err := soakCycle(t.Context(), client, s, -1); err != nil {
		t.Fatalf("warm-up cycle: %v", err)
	}
	client.CloseIdleConnections()
	time.Sleep(2 * time.Second)
	base := scrapeMetrics(t, s)
	creates := metric(t, base, "sandboxd_creates_total")

	var (
		next, failures atomic.Int64
		mu             sync.Mutex
		firstErrs      []error
		wg             sync.WaitGroup
		peakRSS        atomic.Int64
	)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go samplePeakRSS(ctx, s, &peakRSS)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for n := int(next.Add(1)) - 1; n < cycles; n = int(next.Add(1)) - 1 {
				if err := soakCycle(ctx, client, s, n); err != nil {
					failures.Add(1)
					mu.Lock()
					if len(firstErrs) < 5 {
						firstErrs = append(firstErrs, fmt.Errorf("cycle %d: %w", n, err))
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cancel()
	client.CloseIdleConnections()
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d cycles failed; the first: %v\nthe server's errors:\n%s", n, cycles, errors.Join(firstErrs...),
			strings.Join(logLines(t, s, "level=ERROR"), "\n"))
	}

	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("%d container(s) of the instance left after the soak", len(left))
	}
	if left := instanceVolumes(t, s.InstanceID); len(left) != 0 {
		t.Errorf("volume(s) of the instance left after the soak: %v", left)
	}
	g0, fd0, rss0 := metric(t, base, "go_goroutines"), metric(t, base, "process_open_fds"), metric(t, base, "process_resident_memory_bytes")
	var after map[string]float64
	settled := time.Now()
	deadline := settled.Add(soakSettle)
	for {
		after = scrapeMetrics(t, s)
		if (metric(t, after, "go_goroutines") <= g0+soakGoroutineMargin && metric(t, after, "process_open_fds") <= fd0+soakFDMargin &&
			metric(t, after, "process_resident_memory_bytes") <= rss0+soakRSSMargin) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	g1, fd1, rss1 := metric(t, after, "go_goroutines"), metric(t, after, "process_open_fds"), metric(t, after, "process_resident_memory_bytes")
	const mib = 1 << 20
	t.Logf("soak: %d cycles, %d clients, %s (%.1f cycles/s), %d failures; goroutines %v -> %v, open fds %v -> %v, RSS %.1f MiB -> peak %.1f MiB -> %.1f MiB (%s after the load)",
		cycles, clients, elapsed.Round(time.Second), float64(cycles)/elapsed.Seconds(), failures.Load(),
		g0, g1, fd0, fd1, rss0/mib, float64(peakRSS.Load())/mib, rss1/mib, time.Since(settled).Round(time.Second))
	if g1 > g0+soakGoroutineMargin {
		t.Errorf("goroutines: %v after the soak, %v before (margin %d)", g1, g0, soakGoroutineMargin)
	}
	if fd1 > fd0+soakFDMargin {
		t.Errorf("open file descriptors: %v after the soak, %v before (margin %d)", fd1, fd0, soakFDMargin)
	}
	if rss1 > rss0+soakRSSMargin {
		t.Errorf("resident memory: %.1f MiB after the soak, %.1f MiB before (margin %d MiB)", rss1/mib, rss0/mib, soakRSSMargin/mib)
	}
	if got := metric(t, after, "sandboxd_creates_total") - creates; got != float64(cycles) {
		t.Errorf("sandboxd_creates_total went up by %v, want %d", got, cycles)
	}
}

// soakCycle is one user's whole use of a sandbox, as an SDK does it: the
// execd calls carry the endpoint's token, not the API key.
func soakCycle(ctx context.Context, c *http.Client, s *Server, n int) error {
	vol := fmt.Sprintf("sandboxd-soak-%s-%d", s.InstanceID, n+1)
	sb, err := tryCreate(ctx, c, s, busyboxWith(map[string]any{
		"metadata": map[string]string{"soak": "cycle-" + strconv.Itoa(n+1)},
		"volumes": []any{map[string]any{
			"name": "data", "mountPath": "/data",
			"pvc": map[string]any{"claimName": vol, "deleteOnSandboxTermination": true},
		}},
	}))
	if err != nil {
		return err
	}
	call := func(method, path, ctype string, body []byte, hdr map[string]string, want int) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, s.URL+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		status, data, err := doRequest(c, req)
		if err == nil && status != want {
			err = fmt.Errorf("status %d, want %d; body %s", status, want, execdTail(data))
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		return data, nil
	}
	apiKey := map[string]string{apiKeyHeader: s.APIKey}
	data, err := call(http.MethodGet, sandboxPath(sb.ID, "/endpoints/"+execdPort), "", nil, apiKey, http.StatusOK)
	if err != nil {
		return err
	}
	var ep lcEndpoint
	if err := json.Unmarshal(data, &ep); err != nil || ep.Headers[execdTokenHeader] == "" {
		return fmt.Errorf("endpoint of %s: %s", sb.ID, data)
	}
	marker := fmt.Sprintf("cycle-%d", n)
	cmd, _ := json.Marshal(map[string]any{"command": "echo " + marker + " > /data/marker && cat /data/marker"})
	if data, err = call(http.MethodPost, proxyPath(sb.ID, "/command"), "application/json", cmd, ep.Headers, http.StatusOK); err != nil {
		return err
	}
	run, err := parseEvents(data)
	if err != nil {
		return err
	}
	if len(run.Stdout) != 1 || run.Stdout[0] != marker || run.last().Type != "execution_complete" {
		return fmt.Errorf("command in %s: stdout %q, last event %q", sb.ID, run.Stdout, run.last().Type)
	}
	blob := make([]byte, 16<<10)
	rand.Read(blob)
	content := hex.EncodeToString(blob)
	body, ctype, err := uploadBody("/data/blob", content)
	if err != nil {
		return err
	}
	if _, err := call(http.MethodPost, proxyPath(sb.ID, "/files/upload"), ctype, body, ep.Headers, http.StatusOK); err != nil {
		return err
	}
	if data, err = call(http.MethodGet, proxyPath(sb.ID, "/files/download?path=/data/blob"), "", nil, ep.Headers, http.StatusOK); err != nil {
		return err
	}
	if string(data) != content {
		return fmt.Errorf("download from %s: %d bytes differ from the %d uploaded", sb.ID, len(data), len(content))
	}
	_, err = call(http.MethodDelete, sandboxPath(sb.ID), "", nil, apiKey, http.StatusNoContent)
	return err
}

// samplePeakRSS records the highest resident memory /metrics reports,
// every second until ctx ends.
func samplePeakRSS(ctx context.Context, s *Server, peak *atomic.Int64) {
	for ctx.Err() == nil {
		if status, data, err := request(ctx, s.client, s, http.MethodGet, "/metrics", "", nil); err == nil && status == http.StatusOK {
			var rss float64
			for _, line := range bytes.Split(data, []byte("\n")) {
				if v, ok := bytes.CutPrefix(line, []byte("process_resident_memory_bytes ")); ok {
					rss, _ = strconv.ParseFloat(string(v), 64)
				}
			}
			if int64(rss) > peak.Load() {
				peak.Store(int64(rss))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// envInt reads a positive integer from the environment, def if unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q is not a positive integer", name, v)
	}
	return n
}

// instanceVolumes lists the volumes labelled with a sandboxd instance.
func instanceVolumes(t testing.TB, instanceID string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	list, err := dockerClient(t).VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", labelInstance+"="+instanceID))})
	if err != nil {
		t.Fatalf("list volumes of instance %s: %v", instanceID, err)
	}
	var names []string
	for _, v := range list.Volumes {
		names = append(names, v.Name)
	}
	return names
}

// removeInstanceVolumes removes the volumes a failed test left behind.
func removeInstanceVolumes(t testing.TB, instanceID string) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	for _, name := range instanceVolumes(t, instanceID) {
		if err := dockerClient(t).VolumeRemove(ctx, name, true); err != nil {
			t.Errorf("clean-up: remove volume %s: %v", name, err)
		}
	}
}
