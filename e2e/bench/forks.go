package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The forks phase (-only-forks, docs/fork.md) measures fork-to-ready (the
// POST of a fork until every new sandbox answers /ping, as an SDK would
// wait for it) for one and for five forks of a sandbox with -fork-mib
// written, next to a plain create of the same image, and how long the
// source is frozen by each fork's snapshot: the source runs a loop that
// writes the time every 5 ms, and the longest gap between two of its lines
// during a fork, less the loop's usual gap, is the pause it saw.

// forksResult is the forks phase's samples.
type forksResult struct {
	create      durations
	one, five   durations
	pauseOne    durations
	pauseFive   durations
	usualTick   time.Duration
	sourceBytes int
}

// tickLoop writes the kernel's uptime (10 ms resolution) every 5 ms.
const tickLoop = "while :; do read u _ < /proc/uptime; echo $u >> /tmp/ticks; usleep 5000; done"

func (b *bench) forks(ctx context.Context) (forksResult, error) {
	res := forksResult{sourceBytes: b.o.forkMiB << 20}
	for range b.o.creates {
		bx, d, err := b.create(ctx, b.coldRequest())
		if err != nil {
			return res, err
		}
		res.create = append(res.create, d)
		if err := b.delete(ctx, bx.id); err != nil {
			return res, err
		}
	}
	src, _, err := b.create(ctx, b.coldRequest())
	if err != nil {
		return res, err
	}
	if _, err := src.command(ctx, fmt.Sprintf("mkdir -p /data && dd if=/dev/urandom of=/data/blob bs=1M count=%d 2>/dev/null && sync && echo written", b.o.forkMiB), "written"); err != nil {
		return res, err
	}
	if err := src.background(ctx, tickLoop); err != nil {
		return res, err
	}
	type window struct{ start, end float64 }
	var ones, fives []window
	for i := range b.o.forkReps {
		for _, n := range []int{1, 5} {
			s := hostUptime()
			d, err := b.forkReady(ctx, src.id, n)
			if err != nil {
				return res, err
			}
			w := window{s, hostUptime()}
			if n == 1 {
				res.one, ones = append(res.one, d), append(ones, w)
			} else {
				res.five, fives = append(res.five, d), append(fives, w)
			}
			b.progress("forks: %d of %d, %d fork(s) ready in %s", i+1, b.o.forkReps, n, ms(d))
		}
	}
	ticks, err := src.readFile(ctx, "/tmp/ticks")
	if err != nil {
		return res, err
	}
	var t []float64
	for _, l := range strings.Fields(ticks) {
		if v, err := strconv.ParseFloat(l, 64); err == nil {
			t = append(t, v)
		}
	}
	var gaps []float64
	for i := 1; i < len(t); i++ {
		gaps = append(gaps, t[i]-t[i-1])
	}
	usual := median(gaps)
	res.usualTick = seconds(usual)
	pause := func(w window) time.Duration {
		longest := 0.0
		for i := 1; i < len(t); i++ {
			if t[i] >= w.start && t[i-1] <= w.end {
				longest = max(longest, t[i]-t[i-1])
			}
		}
		return seconds(max(0, longest-usual))
	}
	for _, w := range ones {
		res.pauseOne = append(res.pauseOne, pause(w))
	}
	for _, w := range fives {
		res.pauseFive = append(res.pauseFive, pause(w))
	}
	return res, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// hostUptime is the kernel's uptime in seconds, the clock the source's
// loop writes (a container shares the host's kernel).
func hostUptime() float64 {
	data, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return v
}

// forkReady forks src into n sandboxes and returns the time until every
// one answers /ping; it then deletes them and the fork's snapshot.
func (b *bench) forkReady(ctx context.Context, src string, n int) (time.Duration, error) {
	start := time.Now()
	var op struct {
		ID     string `json:"id"`
		Status struct {
			State, Reason string
		} `json:"status"`
		SnapshotID string   `json:"snapshotId"`
		SandboxIDs []string `json:"sandboxIds"`
	}
	body, _ := json.Marshal(map[string]any{"timeout": 3600})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.a.base+"/v1/sandboxes/"+src+"/fork", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("OPEN-SANDBOX-API-KEY", b.a.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sandboxd-Fork-Count", strconv.Itoa(n))
	resp, err := b.a.hc.Do(req)
	if err != nil {
		return 0, err
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return 0, fmt.Errorf("fork: status %d: %s", resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, &op); err != nil {
		return 0, err
	}
	for op.Status.State != "Succeeded" {
		if op.Status.State == "Failed" {
			return 0, fmt.Errorf("fork %s failed: %s", op.ID, op.Status.Reason)
		}
		time.Sleep(20 * time.Millisecond)
		if err := b.a.call(ctx, http.MethodGet, "/v1/forks/"+op.ID, nil, &op, http.StatusOK); err != nil {
			return 0, err
		}
	}
	b.mu.Lock()
	for _, id := range op.SandboxIDs {
		b.boxes[id] = true
	}
	b.mu.Unlock()
	err = parallel(len(op.SandboxIDs), 5, func(i int) error {
		_, err := b.a.connect(ctx, op.SandboxIDs[i])
		return err
	})
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	for _, id := range op.SandboxIDs {
		if err := b.delete(ctx, id); err != nil {
			return 0, err
		}
	}
	return d, b.a.call(ctx, http.MethodDelete, "/v1/snapshots/"+op.SnapshotID, nil, nil, http.StatusNoContent)
}

// background starts a command that runs on after its request.
func (b *box) background(ctx context.Context, cmd string) error {
	body, _ := json.Marshal(map[string]any{"command": cmd, "background": true})
	resp, err := b.execd(ctx, http.MethodPost, "/command", bytes.NewReader(body), int64(len(body)), "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("background command: status %d", resp.StatusCode)
	}
	return nil
}

// readFile downloads a small file of the sandbox.
func (b *box) readFile(ctx context.Context, p string) (string, error) {
	resp, err := b.execd(ctx, http.MethodGet, "/files/download?path="+p, nil, 0, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("download %s: status %d", p, resp.StatusCode)
	}
	return string(data), err
}

// forksRows reports the phase.
func (r *report) forksRows(f forksResult) {
	r.latency("plain create-to-ready p50", f.create.pct(50), 0, 0, 0)
	r.latency(fmt.Sprintf("fork-to-ready p50, 1 fork (source with %d MiB written)", f.sourceBytes>>20), f.one.pct(50), f.create.pct(50), 0, 0)
	r.latency(fmt.Sprintf("fork-to-ready p50, 5 forks (source with %d MiB written)", f.sourceBytes>>20), f.five.pct(50), f.create.pct(50), 0, 0)
	r.latency("source paused by a fork of 1, p50", f.pauseOne.pct(50), 0, 0, 0)
	r.latency("source paused by a fork of 1, max", slices.Max(f.pauseOne), 0, 0, 0)
	r.latency("source paused by a fork of 5, p50", f.pauseFive.pct(50), 0, 0, 0)
	r.latency("source paused by a fork of 5, max", slices.Max(f.pauseFive), 0, 0, 0)
	r.latency("(the source's loop writes every, p50)", f.usualTick, 0, 0, 0)
}
