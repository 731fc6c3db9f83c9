package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// forkTask is the part of a fork task the client follows.
type forkTask struct {
	ID     string `json:"id"`
	Status struct {
		State   string `json:"state"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"status"`
	SandboxIDs     []string `json:"sandboxIds"`
	CleanupPending bool     `json:"cleanupPending"`
}

// forkPoll is how often fork asks for its task's progress.
const forkPoll = 200 * time.Millisecond

func runFork(ctx context.Context, e *env, args []string) (int, error) {
	fs := e.flags()
	n := fs.Int("n", 1, "number of sandboxes to make (the server allows at most 10)")
	timeout := fs.Duration("timeout", 10*time.Minute, "the new sandboxes expire after this long (at least 1m)")
	key := fs.String("key", "", "idempotency key: the same key gives back the same fork task")
	c, rest, err := e.connect(fs, args)
	if err != nil {
		return 0, err
	}
	if len(rest) != 1 {
		return 0, usagef("fork takes one sandbox id")
	}
	if *n < 1 {
		return 0, usagef("-n must be at least 1")
	}
	hdr := http.Header{"Sandboxd-Fork-Count": {strconv.Itoa(*n)}}
	if *key != "" {
		hdr.Set("Idempotency-Key", *key)
	}
	res, err := c.send(ctx, http.MethodPost, sandboxPath(rest[0], "/fork"), nil, map[string]any{"timeout": int(timeout.Seconds())}, "", hdr)
	if err != nil {
		return 0, err
	}
	var task forkTask
	err = json.NewDecoder(res.Body).Decode(&task)
	res.Body.Close()
	if err != nil {
		return 0, fmt.Errorf("decode the fork task: %w", err)
	}
	state := ""
	for {
		if task.Status.State != state {
			state = task.Status.State
			fmt.Fprintf(e.stderr, "fork %s: %s\n", task.ID, state)
		}
		switch {
		case task.Status.State == "Succeeded":
			for _, id := range task.SandboxIDs {
				fmt.Fprintln(e.stdout, id)
			}
			return 0, nil
		case task.Status.State == "Failed" && !task.CleanupPending:
			return 1, fmt.Errorf("fork %s failed: %s (%s)", task.ID, task.Status.Message, task.Status.Reason)
		}
		select {
		case <-ctx.Done():
			return 1, fmt.Errorf("fork %s still %s: %w", task.ID, task.Status.State, ctx.Err())
		case <-time.After(forkPoll):
		}
		if err := c.json(ctx, http.MethodGet, "/v1/forks/"+url.PathEscape(task.ID), nil, nil, &task); err != nil {
			return 1, err
		}
	}
}
