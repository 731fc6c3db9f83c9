//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// metrics is execd's metrics snapshot.
type metrics struct {
	CPUCount    float64 `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotalMiB float64 `json:"mem_total_mib"`
	MemUsedMiB  float64 `json:"mem_used_mib"`
	Timestamp   int64   `json:"timestamp"`
}

// cpuSample is the sandbox's cumulative CPU time at one moment.
type cpuSample struct {
	usage time.Duration
	at    time.Time
}

// metricsSampler reads the sandbox's own cgroup (v1 or v2), falling back to
// /proc for whatever the cgroup leaves unlimited or does not show.
type metricsSampler struct {
	root string // "/" except in tests

	mu      sync.Mutex
	last    cpuSample // for GET /metrics: CPU use is measured since the previous call
	lastPct float64
}

// minCPUWindow is the shortest interval CPU use is computed over; calls
// closer together repeat the previous figure.
const minCPUWindow = 100 * time.Millisecond

func (m *metricsSampler) init(root string) {
	m.root = root
	m.last, _ = m.cpuSample() // the first call then measures since start
}

func (s *server) getMetrics(w http.ResponseWriter, _ *http.Request) {
	m := &s.metrics
	m.mu.Lock()
	out, err := m.read(&m.last, &m.lastPct)
	m.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeRuntimeError, "error reading metrics: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// metricsWatchInterval is how often GET /metrics/watch sends a sample.
const metricsWatchInterval = time.Second

// watchMetrics serves GET /metrics/watch: one JSON object and "\n" per
// second until the client leaves.
func (s *server) watchMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	prev, _ := s.metrics.cpuSample()
	var pct float64
	t := time.NewTicker(s.delays.metricsWatch)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		var b []byte
		if out, err := s.metrics.read(&prev, &pct); err != nil {
			b, _ = json.Marshal(map[string]string{"error": err.Error()})
		} else {
			b, _ = json.Marshal(out)
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// read takes a snapshot; CPU use is measured since *prev, which it
// advances, and *pct keeps the last figure for calls in quick succession.
func (m *metricsSampler) read(prev *cpuSample, pct *float64) (metrics, error) {
	out := metrics{CPUCount: m.cpuCount(), Timestamp: time.Now().UnixMilli()}
	if cur, err := m.cpuSample(); err == nil {
		if elapsed := cur.at.Sub(prev.at); elapsed >= minCPUWindow && !prev.at.IsZero() {
			*pct = 100 * float64(cur.usage-prev.usage) / float64(elapsed) / out.CPUCount
			*pct = min(max(*pct, 0), 100)
			*prev = cur
		} else if prev.at.IsZero() {
			*prev = cur
		}
	}
	out.CPUUsedPct = *pct
	total, used, err := m.memory()
	if err != nil {
		return metrics{}, err
	}
	out.MemTotalMiB, out.MemUsedMiB = float64(total)/(1<<20), float64(used)/(1<<20)
	return out, nil
}

// cpuCount is the CPU quota in CPUs, or the CPUs this process may run on.
func (m *metricsSampler) cpuCount() float64 {
	if dir, v2 := m.cgroupDir("cpu"); dir != "" {
		var quota, period float64
		if v2 {
			f := strings.Fields(m.readString(filepath.Join(dir, "cpu.max")))
			if len(f) == 2 && f[0] != "max" {
				quota, _ = strconv.ParseFloat(f[0], 64)
				period, _ = strconv.ParseFloat(f[1], 64)
			}
		} else {
			quota, _ = strconv.ParseFloat(m.readString(filepath.Join(dir, "cpu.cfs_quota_us")), 64)
			period, _ = strconv.ParseFloat(m.readString(filepath.Join(dir, "cpu.cfs_period_us")), 64)
		}
		if quota > 0 && period > 0 {
			return min(quota/period, float64(runtime.NumCPU()))
		}
	}
	return float64(runtime.NumCPU())
}

// cpuSample reads the cgroup's CPU time, or the whole machine's busy time.
func (m *metricsSampler) cpuSample() (cpuSample, error) {
	now := time.Now()
	if dir, v2 := m.cgroupDir("cpuacct"); dir != "" {
		if v2 {
			if usec, ok := m.statField(filepath.Join(dir, "cpu.stat"), "usage_usec"); ok {
				return cpuSample{time.Duration(usec) * time.Microsecond, now}, nil
			}
		} else if ns, err := strconv.ParseInt(m.readString(filepath.Join(dir, "cpuacct.usage")), 10, 64); err == nil {
			return cpuSample{time.Duration(ns), now}, nil
		}
	}
	f, err := os.Open(filepath.Join(m.root, "proc/stat"))
	if err != nil {
		return cpuSample{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[0] != "cpu" {
			continue
		}
		var ticks int64
		for i, v := range fields[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
		// USER_HZ is 100 on every Linux architecture Docker runs on.
		return cpuSample{time.Duration(ticks) * 10 * time.Millisecond, now}, nil
	}
	return cpuSample{}, errors.New("no cpu line in /proc/stat")
}

// memory returns the memory limit and use in bytes. Like docker stats,
// page cache that can be dropped (inactive files) does not count as used.
func (m *metricsSampler) memory() (total, used uint64, err error) {
	memTotal, memAvail, err := m.meminfo()
	if err != nil {
		return 0, 0, err
	}
	total, used = memTotal, memTotal-min(memAvail, memTotal)
	dir, v2 := m.cgroupDir("memory")
	if dir == "" {
		return total, used, nil
	}
	var limit, usage, inactive uint64
	var ok bool
	if v2 {
		limit, _ = strconv.ParseUint(m.readString(filepath.Join(dir, "memory.max")), 10, 64) // "max" → 0
		usage, err = strconv.ParseUint(m.readString(filepath.Join(dir, "memory.current")), 10, 64)
		inactive, ok = m.statField(filepath.Join(dir, "memory.stat"), "inactive_file")
	} else {
		limit, _ = strconv.ParseUint(m.readString(filepath.Join(dir, "memory.limit_in_bytes")), 10, 64)
		usage, err = strconv.ParseUint(m.readString(filepath.Join(dir, "memory.usage_in_bytes")), 10, 64)
		inactive, ok = m.statField(filepath.Join(dir, "memory.stat"), "total_inactive_file")
	}
	if limit > 0 && limit < total { // v1 "unlimited" is a huge number
		total = limit
	}
	if err == nil {
		if ok && inactive < usage {
			usage -= inactive
		}
		used = min(usage, total)
	}
	return total, used, nil
}

func (m *metricsSampler) meminfo() (total, avail uint64, err error) {
	b, err := os.ReadFile(filepath.Join(m.root, "proc/meminfo"))
	if err != nil {
		return 0, 0, fmt.Errorf("read meminfo: %w", err)
	}
	var haveTotal bool
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseUint(f[0], 10, 64)
		switch k {
		case "MemTotal":
			total, haveTotal = n<<10, true
		case "MemAvailable":
			avail = n << 10
		}
	}
	if !haveTotal {
		return 0, 0, errors.New("no MemTotal in /proc/meminfo")
	}
	return total, avail, nil
}

// cgroupDir finds this process's cgroup directory for a v1 controller, or
// its v2 cgroup (v2 true). Inside a container the cgroup is usually mounted
// as the hierarchy's root; on a host it is the path in /proc/self/cgroup.
// It returns "" when there is no cgroup filesystem.
func (m *metricsSampler) cgroupDir(controller string) (dir string, v2 bool) {
	base := filepath.Join(m.root, "sys/fs/cgroup")
	self := m.readString(filepath.Join(m.root, "proc/self/cgroup"))
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err == nil {
		for line := range strings.Lines(self) {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
				if p := filepath.Join(base, rest); isDir(p) {
					return p, true
				}
			}
		}
		return base, true
	}
	mount := filepath.Join(base, controller)
	if !isDir(mount) {
		return "", false
	}
	for line := range strings.Lines(self) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) == 3 && strings.Contains(","+parts[1]+",", ","+controller+",") {
			if p := filepath.Join(mount, parts[2]); isDir(p) {
				return p, false
			}
		}
	}
	return mount, false
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func (m *metricsSampler) readString(p string) string {
	b, _ := os.ReadFile(p)
	return string(bytes.TrimSpace(b))
}

// statField reads "key value" from a cgroup stat file.
func (m *metricsSampler) statField(p, key string) (uint64, bool) {
	for line := range strings.Lines(m.readString(p)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == key {
			n, err := strconv.ParseUint(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
