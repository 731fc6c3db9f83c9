package agent

import (
	"context"
	"fmt"
	"sync"
)

// Sessions keeps one agent session per sandbox for a runtime, connecting
// it on first use and again whenever it ended (the agent was killed from
// inside, OOM, a restart of the sandbox).
type Sessions struct {
	mu sync.Mutex
	m  map[string]*slot
}

type slot struct {
	// start serialises connects for one sandbox; a channel, so that a
	// caller waiting for another's connect can give up.
	start  chan struct{}
	client *Client
	// logLimit bounds the agent's stderr lines sandboxd logs, across
	// restarts of the agent: sandbox code can write there.
	logLimit *LogLimit
}

// NewSessions returns an empty set.
func NewSessions() *Sessions { return &Sessions{m: map[string]*slot{}} }

func (s *Sessions) slot(id string) *slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.m[id]
	if sl == nil {
		sl = &slot{start: make(chan struct{}, 1), logLimit: NewStderrLimit()}
		s.m[id] = sl
	}
	return sl
}

// Get returns the live session of sandbox id, or the one connect makes.
// Only one connect per sandbox runs at a time.
func (s *Sessions) Get(ctx context.Context, id string, connect func(context.Context) (*Client, error)) (*Client, error) {
	sl := s.slot(id)
	select {
	case sl.start <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("start agent in %s: wait for another start: %w", id, ctx.Err())
	}
	defer func() { <-sl.start }()
	if sl.client != nil {
		select {
		case <-sl.client.Done():
		default:
			return sl.client, nil
		}
	}
	client, err := connect(ctx)
	if err != nil {
		return nil, err
	}
	sl.client = client
	return client, nil
}

// LogLimit returns the stderr limiter of sandbox id (see NewStderrLog).
func (s *Sessions) LogLimit(id string) *LogLimit { return s.slot(id).logLimit }

// Drop closes and forgets the session of sandbox id.
func (s *Sessions) Drop(id string) {
	s.mu.Lock()
	sl := s.m[id]
	delete(s.m, id)
	s.mu.Unlock()
	if sl != nil && sl.client != nil {
		sl.client.Close()
	}
}

// Close closes every session.
func (s *Sessions) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, sl := range s.m {
		if sl.client != nil {
			sl.client.Close()
		}
		delete(s.m, id)
	}
}
