package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// durations is a sample of latencies.
type durations []time.Duration

// pct returns the p-th percentile (nearest rank); 0 for an empty sample.
func (d durations) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// median of throughputs (MiB/s).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

func mib(bytes int64) string { return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20)) }

// row is one figure of the report.
type row struct {
	name     string
	value    string // sandboxd's figure
	baseline string // Docker's own, "—" when there is none
	ratio    string // value/baseline, "" when meaningless
	target   string // from the issue, "" when none
	met      string // "yes", "no" or ""
}

// report collects the rows in the order they were measured.
type report struct{ rows []row }

func (r *report) add(x row) { r.rows = append(r.rows, x) }

// latency adds a latency figure against a baseline; maxRatio > 0 and
// maxAbs > 0 are the targets (either may be 0 for none).
func (r *report) latency(name string, v, base time.Duration, maxRatio float64, maxAbs time.Duration) {
	x := row{name: name, value: ms(v), baseline: "—"}
	ratio := 0.0
	if base > 0 {
		x.baseline = ms(base)
		ratio = float64(v) / float64(base)
		x.ratio = fmt.Sprintf("%.2f×", ratio)
	}
	var targets []string
	met := true
	if maxAbs > 0 {
		targets = append(targets, "≤ "+ms(maxAbs))
		met = met && v <= maxAbs
	}
	if maxRatio > 0 {
		targets = append(targets, fmt.Sprintf("≤ %.2g×", maxRatio))
		met = met && base > 0 && ratio <= maxRatio
	}
	if len(targets) > 0 {
		x.target = strings.Join(targets, " and ")
		x.met = yesNo(met)
	}
	r.add(x)
}

// throughput adds a MiB/s figure against a baseline, with a minimum ratio.
func (r *report) throughput(name string, v, base, minRatio float64) {
	x := row{name: name, value: fmt.Sprintf("%.0f MiB/s", v), baseline: fmt.Sprintf("%.0f MiB/s", base)}
	if base > 0 {
		ratio := v / base
		x.ratio = fmt.Sprintf("%.2f×", ratio)
		if minRatio > 0 {
			x.target = fmt.Sprintf("≥ %.2g×", minRatio)
			x.met = yesNo(ratio >= minRatio)
		}
	}
	r.add(x)
}

// success adds a success-rate figure (target 100 %).
func (r *report) success(name string, ok, n, baseOK, baseN int) {
	pct := func(ok, n int) string {
		if n == 0 {
			return "—"
		}
		return fmt.Sprintf("%d/%d (%.0f %%)", ok, n, 100*float64(ok)/float64(n))
	}
	r.add(row{name: name, value: pct(ok, n), baseline: pct(baseOK, baseN), target: "100 %", met: yesNo(n > 0 && ok == n)})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// write prints the rows as an aligned text table.
func (r *report) write(w io.Writer) {
	head := row{"figure", "sandboxd", "baseline (raw Engine API)", "ratio", "target", "met"}
	rows := append([]row{head}, r.rows...)
	width := make([]int, 6)
	cells := func(x row) []string { return []string{x.name, x.value, x.baseline, x.ratio, x.target, x.met} }
	for _, x := range rows {
		for i, c := range cells(x) {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, x := range rows {
		var b strings.Builder
		for i, c := range cells(x) {
			b.WriteString(c)
			if i < len(width)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-len([]rune(c))+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
