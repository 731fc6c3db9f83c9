package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Events describes the state transitions the engine knows of a sandbox's
// container (upstream's Docker "runtime" events: Docker keeps no event
// history per container, so they are rebuilt from its state), one per line.
func (m *Manager) Events(ctx context.Context, id string) ([]string, error) {
	_, c, err := m.ready(ctx, id)
	if err != nil {
		return nil, err
	}
	short := c.ID
	if len(short) > 12 {
		short = short[:12]
	}
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	lines := []string{
		fmt.Sprintf("Container:  %s (%s)", short, c.Name),
		"Status:     " + c.Status,
		"Created:    " + at(c.Created),
	}
	if !c.StartedAt.IsZero() {
		lines = append(lines, "Started:    "+at(c.StartedAt))
	}
	if !c.FinishedAt.IsZero() {
		lines = append(lines, "Finished:   "+at(c.FinishedAt))
	}
	if c.Paused {
		lines = append(lines, "Event:      Paused")
	}
	if c.OOMKilled {
		lines = append(lines, "Event:      OOMKilled - container was killed for exceeding its memory limit")
	}
	if !c.Running && !c.FinishedAt.IsZero() {
		lines = append(lines, fmt.Sprintf("Event:      Exited with code %d", c.ExitCode))
	}
	if e := strings.TrimSpace(c.Error); e != "" {
		lines = append(lines, "Event:      Error - "+e)
	}
	return lines, nil
}
