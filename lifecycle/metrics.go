package lifecycle

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Histogram is a Prometheus-style cumulative histogram of seconds.
type Histogram struct {
	bounds []float64
	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative; last is +Inf
	sum    float64
	n      uint64
}

// NewHistogram returns a histogram with the given upper bounds (seconds).
func NewHistogram(bounds ...float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	i := sort.SearchFloat64s(h.bounds, s)
	h.mu.Lock()
	h.counts[i]++
	h.sum += s
	h.n++
	h.mu.Unlock()
}

func (h *Histogram) write(w io.Writer, name, help string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, b, cum)
	}
	cum += h.counts[len(h.bounds)]
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, cum, name, h.sum, name, cum)
}

// Metrics are sandboxd's operational counters, exposed by the api at
// /metrics in Prometheus text format.
type Metrics struct {
	Creates        atomic.Uint64
	CreateFailures atomic.Uint64
	Deletes        atomic.Uint64
	ReapedExpired  atomic.Uint64
	ReapedIdle     atomic.Uint64
	ReaperRuns     atomic.Uint64
	CreateSeconds  *Histogram
	CommandSeconds *Histogram // observed by the proxy for execd /command streams
	Sleeps         atomic.Uint64
	Wakes          atomic.Uint64
	WakeSeconds    *Histogram
}

func newMetrics() *Metrics {
	latency := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	return &Metrics{CreateSeconds: NewHistogram(latency...), CommandSeconds: NewHistogram(latency...), WakeSeconds: NewHistogram(latency...)}
}

// WritePrometheus writes every metric; byState is the current number of
// sandboxes in each state.
func (mt *Metrics) WritePrometheus(w io.Writer, byState map[string]int) {
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	fmt.Fprintf(w, "# HELP sandboxd_sandboxes Sandboxes by state.\n# TYPE sandboxd_sandboxes gauge\n")
	states := make([]string, 0, len(byState))
	for s := range byState {
		states = append(states, s)
	}
	sort.Strings(states)
	for _, s := range states {
		fmt.Fprintf(w, "sandboxd_sandboxes{state=%q} %d\n", s, byState[s])
	}
	counter("sandboxd_creates_total", "Sandboxes created.", mt.Creates.Load())
	counter("sandboxd_create_failures_total", "Sandbox creations that failed after validation.", mt.CreateFailures.Load())
	counter("sandboxd_deletes_total", "Sandboxes deleted by request.", mt.Deletes.Load())
	fmt.Fprintf(w, "# HELP sandboxd_reaped_total Sandboxes removed by the reaper.\n# TYPE sandboxd_reaped_total counter\n")
	fmt.Fprintf(w, "sandboxd_reaped_total{reason=\"expired\"} %d\nsandboxd_reaped_total{reason=\"idle\"} %d\n", mt.ReapedExpired.Load(), mt.ReapedIdle.Load())
	counter("sandboxd_reaper_runs_total", "Reaper sweeps.", mt.ReaperRuns.Load())
	mt.CreateSeconds.write(w, "sandboxd_create_seconds", "Time to create a sandbox (pull excluded when the image is present).")
	counter("sandboxd_sleeps_total", "Sandboxes put to sleep (paused or stopped) when idle or expired.", mt.Sleeps.Load())
	counter("sandboxd_wakes_total", "Sleeping sandboxes woken.", mt.Wakes.Load())
	mt.WakeSeconds.write(w, "sandboxd_wake_seconds", "Time to wake a sleeping sandbox (unpause, or start and agent ready).")
	mt.CommandSeconds.write(w, "sandboxd_command_seconds", "Duration of execd command streams through the proxy.")
}
