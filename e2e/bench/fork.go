package main

import (
	"context"
	"fmt"
	"time"
)

// Issue 17: a command `true` costs at most twice what forking `sh -c true`
// costs inside the same container.
const targetCommandToFork = 2

// forkLoop is how many `sh -c true` one floor measurement forks.
const forkLoop = 100

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

// forkRows reports the floor and the command `true` against it.
func (r *report) forkRows(cmd commandResult) {
	r.latency("sh -c true forked in the sandbox p50", cmd.fork.pct(50), 0, 0, 0)
	r.latency("command true p50 vs sh -c true", cmd.trueCmd.pct(50), cmd.fork.pct(50), targetCommandToFork, 0)
}
