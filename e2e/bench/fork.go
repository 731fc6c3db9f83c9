package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Issue 17: a command `true` costs at most twice what forking `sh -c true`
// costs inside the same container.
const targetCommandToFork = 2

// forkLoop is how many `sh -c true` one floor sample forks, and forkEvery
// after how many `true`s one is taken: the floor and the `true`s it is
// compared with see the same load, which on a shared machine changes from
// one second to the next.
const (
	forkLoop  = 20
	forkEvery = 10
)

// forkFloor measures the floor of a command in the sandbox: a shell forks
// `sh -c true` and reaps it forkLoop times, in one command whose own round
// trip (overhead, the `true` p50 of the same block) is taken off.
func (b *box) forkFloor(ctx context.Context, overhead time.Duration) (time.Duration, error) {
	script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do sh -c true; i=$((i+1)); done", forkLoop)
	d, err := b.command(ctx, script, "")
	if err != nil {
		return 0, fmt.Errorf("fork floor: %w", err)
	}
	return max(0, d-overhead) / forkLoop, nil
}

// floorSample measures the floor right after the last n `true`s, whose p50
// is the loop command's own round trip.
func (b *box) floorSample(ctx context.Context, res *commandResult, n int) error {
	p50 := res.trueCmd[len(res.trueCmd)-n:].pct(50)
	f, err := b.forkFloor(ctx, p50)
	if err != nil {
		return err
	}
	res.fork = append(res.fork, f)
	res.blockTrue = append(res.blockTrue, p50)
	return nil
}

// forkRows reports the floor and the command `true` against it: the p50s of
// the whole run, and, less exposed to load that changes during the run, the
// median of the ratios of each floor sample and the `true`s just before it.
func (r *report) forkRows(cmd commandResult) {
	r.latency("sh -c true forked in the sandbox p50", cmd.fork.pct(50), 0, 0, 0)
	r.latency("command true p50 vs sh -c true", cmd.trueCmd.pct(50), cmd.fork.pct(50), targetCommandToFork, 0)
	var ratios []float64
	for i, f := range cmd.fork {
		if f > 0 {
			ratios = append(ratios, float64(cmd.blockTrue[i])/float64(f))
		}
	}
	if len(ratios) == 0 {
		return
	}
	m := median(ratios)
	r.add(row{name: "command true vs sh -c true, median of samples", value: fmt.Sprintf("%d samples, %.2f×–%.2f×", len(ratios), slices.Min(ratios), slices.Max(ratios)),
		baseline: "—", ratio: fmt.Sprintf("%.2f×", m), target: fmt.Sprintf("≤ %.2g×", float64(targetCommandToFork)), met: yesNo(m <= targetCommandToFork)})
}
