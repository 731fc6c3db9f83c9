package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// The sleep phase (-only-sleep, docs/sleep.md) measures what a sandbox
// asleep costs and what waking it costs: the first command's answer after
// an idle pause and after an idle stop, next to a create and a command
// to a sandbox awake, and the memory the sandbox's container holds awake,
// paused and stopped. It runs a second sandboxd whose test-only
// [lifecycle] test_min_idle_seconds lets sandboxes sleep after 1 s.

// sleepResult is the sleep phase's samples.
type sleepResult struct {
	create, command    durations
	wakePause, wakeStp durations
	// memory held by the container (cgroup usage less inactive file
	// pages, as docker stats shows it): awake, paused, stopped.
	memAwake, memPaused, memStopped int64
}

func (b *bench) sleep(ctx context.Context) (sleepResult, error) {
	var res sleepResult
	if b.o.start == "" {
		return res, errors.New("-only-sleep needs -start: its sandboxd runs with the test-only [lifecycle] test_min_idle_seconds")
	}
	b.progress("sleep: a second sandboxd, with [lifecycle] test_min_idle_seconds = 1")
	srv, err := startServer(b.o.start, false, b.o.transport, "test_min_idle_seconds = 1\nreaper_interval = \"250ms\"\n", "")
	if err != nil {
		return res, err
	}
	defer func() {
		srv.stop()
		b.r.removeLabelled(context.Background(), labelInstance, srv.instance)
	}()
	other := &bench{o: b.o, a: newAPI(srv.url, srv.key), r: b.r, boxes: map[string]bool{}}
	defer other.cleanup()

	for i := range b.o.creates {
		bx, d, err := other.create(ctx, b.coldRequest())
		if err != nil {
			return res, err
		}
		res.create = append(res.create, d)
		if i == 0 {
			for range b.o.commands {
				d, err := bx.command(ctx, "true", "")
				if err != nil {
					return res, err
				}
				res.command = append(res.command, d)
			}
			if res.memAwake, err = b.r.memory(ctx, bx.id); err != nil {
				return res, err
			}
		}
		if err := other.delete(ctx, bx.id); err != nil {
			return res, err
		}
	}
	for _, level := range []string{"pause", "stop"} {
		req := b.coldRequest()
		req["extensions"] = map[string]string{"access.pause.after.idle.seconds": "1", "sandboxd.io/idle-action": level}
		bx, _, err := other.create(ctx, req)
		if err != nil {
			return res, err
		}
		reason := map[string]string{"pause": "IDLE_PAUSED", "stop": "IDLE_STOPPED"}[level]
		for i := range b.o.sleeps {
			if err := other.waitAsleep(ctx, bx.id, reason); err != nil {
				return res, err
			}
			if i == 0 {
				mem, err := b.r.memory(ctx, bx.id)
				if err != nil {
					return res, err
				}
				if level == "pause" {
					res.memPaused = mem
				} else {
					res.memStopped = mem
				}
			}
			d, err := bx.command(ctx, "true", "")
			if err != nil {
				return res, fmt.Errorf("first command after %s: %w", reason, err)
			}
			if level == "pause" {
				res.wakePause = append(res.wakePause, d)
			} else {
				res.wakeStp = append(res.wakeStp, d)
			}
		}
		b.progress("sleep: %d wakes from %s", b.o.sleeps, level)
	}
	return res, nil
}

// waitAsleep polls the sandbox until it reports the sleep reason.
func (b *bench) waitAsleep(ctx context.Context, id, reason string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var sb struct {
			Status struct{ State, Reason string }
		}
		if err := b.a.call(ctx, http.MethodGet, "/v1/sandboxes/"+id, nil, &sb, http.StatusOK); err != nil {
			return err
		}
		if sb.Status.State == "Paused" && sb.Status.Reason == reason {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox %s not %s after a minute (it is %s/%s)", id, reason, sb.Status.State, sb.Status.Reason)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// memory is what a sandbox's container holds in memory, as docker stats
// shows it: the cgroup's usage less its inactive file pages (0 when it
// is stopped).
func (r *raw) memory(ctx context.Context, id string) (int64, error) {
	c, err := r.sandboxContainer(ctx, id)
	if err != nil {
		return 0, err
	}
	st, err := r.cli.ContainerStatsOneShot(ctx, c.ID)
	if err != nil {
		return 0, err
	}
	defer st.Body.Close()
	var s struct {
		MemoryStats struct {
			Usage int64            `json:"usage"`
			Stats map[string]int64 `json:"stats"`
		} `json:"memory_stats"`
	}
	if err := json.NewDecoder(st.Body).Decode(&s); err != nil {
		return 0, err
	}
	return max(0, s.MemoryStats.Usage-s.MemoryStats.Stats["inactive_file"]), nil
}

// sleepRows reports the phase.
func (r *report) sleepRows(s sleepResult) {
	r.latency("create-to-ready p50", s.create.pct(50), 0, 0, 0)
	r.latency("command true p50 (awake)", s.command.pct(50), 0, 0, 0)
	r.latency("wake from pause, first command p50", s.wakePause.pct(50), 0, 0, 0)
	r.latency("wake from pause, first command p90", s.wakePause.pct(90), 0, 0, 0)
	r.latency("wake from stop, first command p50", s.wakeStp.pct(50), 0, 0, 0)
	r.latency("wake from stop, first command p90", s.wakeStp.pct(90), 0, 0, 0)
	for _, m := range []struct {
		name string
		v    int64
	}{{"memory held awake (idle)", s.memAwake}, {"memory held asleep, paused", s.memPaused}, {"memory held asleep, stopped", s.memStopped}} {
		r.add(row{name: m.name, value: mib(m.v), baseline: "—"})
	}
}
