//go:build linux

package agent

import (
	"bufio"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// writeTree creates files under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const testMeminfo = "MemTotal:        8000000 kB\nMemFree:   100 kB\nMemAvailable:    6000000 kB\n"

func TestMetricsSources(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name  string
		files map[string]string
		cpus  float64
		total float64 // MiB
		used  float64 // MiB
		usage time.Duration
	}{
		{
			name: "cgroup v2 with limits",
			files: map[string]string{
				"sys/fs/cgroup/cgroup.controllers": "cpu memory",
				"proc/self/cgroup":                 "0::/\n",
				"sys/fs/cgroup/cpu.max":            "50000 100000\n",
				"sys/fs/cgroup/cpu.stat":           "usage_usec 2500000\nuser_usec 1\n",
				"sys/fs/cgroup/memory.max":         "536870912\n",
				"sys/fs/cgroup/memory.current":     "209715200\n",
				"sys/fs/cgroup/memory.stat":        "anon 1\ninactive_file 104857600\n",
			},
			cpus: 0.5, total: 512, used: 100, usage: 2500 * time.Millisecond,
		},
		{
			name: "cgroup v2 nested, unlimited",
			files: map[string]string{
				"sys/fs/cgroup/cgroup.controllers": "cpu memory",
				"proc/self/cgroup":                 "0::/box\n",
				"sys/fs/cgroup/box/cpu.max":        "max 100000\n",
				"sys/fs/cgroup/box/cpu.stat":       "usage_usec 1000\n",
				"sys/fs/cgroup/box/memory.max":     "max\n",
				"sys/fs/cgroup/box/memory.current": "104857600\n",
				"sys/fs/cgroup/box/memory.stat":    "inactive_file 0\n",
			},
			cpus: float64(runtime.NumCPU()), total: 8000000.0 / 1024, used: 100, usage: time.Millisecond,
		},
		{
			name: "cgroup v1 in a container",
			files: map[string]string{
				"proc/self/cgroup":                                 "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n",
				"sys/fs/cgroup/cpu/cpu.cfs_quota_us":               "150000\n",
				"sys/fs/cgroup/cpu/cpu.cfs_period_us":              "100000\n",
				"sys/fs/cgroup/cpuacct/cpuacct.usage":              "3000000000\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":       "1073741824\n",
				"sys/fs/cgroup/memory/memory.usage_in_bytes":       "314572800\n",
				"sys/fs/cgroup/memory/memory.stat":                 "cache 1\ntotal_inactive_file 104857600\n",
				"sys/fs/cgroup/memory/docker/elsewhere/not-a-file": "",
			},
			cpus: min(1.5, float64(runtime.NumCPU())), total: 1024, used: 200, usage: 3 * time.Second,
		},
		{
			name: "cgroup v1 unlimited",
			files: map[string]string{
				"proc/self/cgroup":                           "12:memory:/\n4:cpu,cpuacct:/\n",
				"sys/fs/cgroup/cpu/cpu.cfs_quota_us":         "-1\n",
				"sys/fs/cgroup/cpu/cpu.cfs_period_us":        "100000\n",
				"sys/fs/cgroup/cpuacct/cpuacct.usage":        "5\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
				"sys/fs/cgroup/memory/memory.usage_in_bytes": "1048576\n",
			},
			cpus: float64(runtime.NumCPU()), total: 8000000.0 / 1024, used: 1, usage: 5,
		},
		{
			name: "no cgroups: /proc only",
			files: map[string]string{
				"proc/stat": "cpu  100 0 50 1000 20 0 0 0 0 0\ncpu0 100 0 50 1000 20 0 0 0 0 0\n",
			},
			cpus: float64(runtime.NumCPU()), total: 8000000.0 / 1024, used: 2000000.0 / 1024, usage: 1500 * time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			tt.files["proc/meminfo"] = testMeminfo
			writeTree(t, root, tt.files)
			m := metricsSampler{root: root}
			if got := m.cpuCount(); got != tt.cpus {
				t.Errorf("cpu count %v, want %v", got, tt.cpus)
			}
			total, used, err := m.memory()
			if err != nil {
				t.Fatal(err)
			}
			if float64(total)/mib != tt.total || float64(used)/mib != tt.used {
				t.Errorf("memory %v/%v MiB, want %v/%v", float64(used)/mib, float64(total)/mib, tt.used, tt.total)
			}
			s, err := m.cpuSample()
			if err != nil || s.usage != tt.usage {
				t.Errorf("cpu usage %v (%v), want %v", s.usage, err, tt.usage)
			}
		})
	}
}

func TestMetricsCPUPercent(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs for a 2-CPU quota")
	}
	root := t.TempDir()
	files := map[string]string{
		"proc/meminfo":                     testMeminfo,
		"proc/self/cgroup":                 "0::/\n",
		"sys/fs/cgroup/cgroup.controllers": "cpu",
		"sys/fs/cgroup/cpu.max":            "200000 100000\n",
		"sys/fs/cgroup/cpu.stat":           "usage_usec 0\n",
	}
	writeTree(t, root, files)
	m := metricsSampler{root: root}
	prev := cpuSample{usage: 0, at: time.Now().Add(-time.Second)}
	// One CPU busy for the whole second of a two-CPU quota: 50 %.
	writeTree(t, root, map[string]string{"sys/fs/cgroup/cpu.stat": "usage_usec 1000000\n"})
	var pct float64
	out, err := m.read(&prev, &pct)
	if err != nil {
		t.Fatal(err)
	}
	// The window is slightly over a second, so the figure is slightly under 50.
	if out.CPUUsedPct > 50 || out.CPUUsedPct < 45 || out.CPUCount != 2 {
		t.Fatalf("%+v, want about 50%% of 2 CPUs", out)
	}
	// A second call right away repeats the figure instead of dividing by ~0.
	again, _ := m.read(&prev, &pct)
	if again.CPUUsedPct != out.CPUUsedPct {
		t.Fatalf("quick second read %v, want %v", again.CPUUsedPct, out.CPUUsedPct)
	}
}

func TestMetricsEndpoints(t *testing.T) {
	a := newTestAgent(t)
	a.delays.metricsWatch = 10 * time.Millisecond
	got := decode[map[string]float64](t, a.do(t, http.MethodGet, "/metrics", nil), http.StatusOK)
	for _, k := range []string{"cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "timestamp"} {
		v, ok := got[k]
		if !ok || math.IsNaN(v) || v < 0 {
			t.Errorf("%s = %v (present %v)", k, v, ok)
		}
	}
	if got["cpu_count"] <= 0 || got["mem_total_mib"] <= 0 || got["mem_used_mib"] <= 0 || got["mem_used_mib"] > got["mem_total_mib"] || got["timestamp"] < 1e12 {
		t.Errorf("implausible metrics %v", got)
	}

	resp := a.do(t, http.MethodGet, "/metrics/watch", nil)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var m metrics
	if err := json.Unmarshal(line, &m); err != nil || m.MemTotalMiB <= 0 {
		t.Fatalf("watch line %q: %v", line, err)
	}
}
