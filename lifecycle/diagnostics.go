package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// LogTail returns the last tail lines of a sandbox's output (since, if not
// zero), at most maxBytes of them, and whether there was more: older lines,
// or the start of what is returned.
func (s *Sandboxes) LogTail(ctx context.Context, id string, tail int, since time.Time, maxBytes int) (string, bool, error) {
	rc, err := s.Logs(ctx, id, tail+1, since) // one more line tells whether there were more
	if err != nil {
		return "", false, err
	}
	defer rc.Close()
	data, cut, err := readTail(rc, maxBytes)
	if err != nil {
		return "", false, &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "read logs", Err: err}
	}
	lines := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		lines++
	}
	if !cut && lines > tail {
		data, cut = data[bytes.IndexByte(data, '\n')+1:], true
	}
	return strings.ToValidUTF8(string(data), "\uFFFD"), cut, nil
}

// Events describes the state transitions the engine knows of a sandbox's
// container (upstream's Docker "runtime" events: Docker keeps no event
// history per container, so they are rebuilt from its state), one per line.
func (s *Sandboxes) Events(ctx context.Context, id string) ([]string, error) {
	_, c, err := s.ready(ctx, id)
	if err != nil {
		return nil, err
	}
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	lines := []string{
		fmt.Sprintf("Container:  %s (%s)", runtime.ShortID(c.ID), c.Name),
		"Status:     " + c.State.String(),
		"Created:    " + at(c.Created),
	}
	if !c.StartedAt.IsZero() {
		lines = append(lines, "Started:    "+at(c.StartedAt))
	}
	if !c.FinishedAt.IsZero() {
		lines = append(lines, "Finished:   "+at(c.FinishedAt))
	}
	if c.State == runtime.StatePaused {
		lines = append(lines, "Event:      Paused")
	}
	if c.OOMKilled {
		lines = append(lines, "Event:      OOMKilled - container was killed for exceeding its memory limit")
	}
	if !c.State.Active() && !c.FinishedAt.IsZero() {
		lines = append(lines, fmt.Sprintf("Event:      Exited with code %d", c.ExitCode))
	}
	if e := strings.TrimSpace(c.Error); e != "" {
		lines = append(lines, "Event:      Error - "+e)
	}
	return lines, nil
}

// Logs returns the sandbox container's output.
func (s *Sandboxes) Logs(ctx context.Context, id string, tail int, since time.Time) (io.ReadCloser, error) {
	rec, _, err := s.ready(ctx, id)
	if err != nil {
		return nil, err
	}
	rc, err := s.rt.Logs(ctx, rec.ContainerID, tail, since)
	if err != nil {
		return nil, s.engineError(err, "read logs")
	}
	return rc, nil
}
