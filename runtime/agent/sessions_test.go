package agent

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// pipeClient returns a client over one end of a pipe and the other end,
// whose closing ends the session.
func pipeClient(t *testing.T) (*Client, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	c, err := Dial(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); b.Close() })
	return c, b
}

func TestSessionsReconnectOnlyWhenEnded(t *testing.T) {
	s := NewSessions()
	defer s.Close()
	var peers []net.Conn
	connect := func(context.Context) (*Client, error) {
		c, peer := pipeClient(t)
		peers = append(peers, peer)
		return c, nil
	}
	first, err := s.Get(context.Background(), "a", connect)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Get(context.Background(), "a", connect); again != first || len(peers) != 1 {
		t.Fatalf("a live session was replaced (%d connects)", len(peers))
	}
	peers[0].Close()
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session did not end when its stream closed")
	}
	next, err := s.Get(context.Background(), "a", connect)
	if err != nil || next == first || len(peers) != 2 {
		t.Fatalf("ended session not replaced: %v, %d connects", err, len(peers))
	}
	limit := s.LogLimit("a")
	if next, _ := s.Get(context.Background(), "a", connect); next == nil || s.LogLimit("a") != limit {
		t.Error("the stderr limiter changed between calls")
	}
	s.Drop("a")
	select {
	case <-next.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Drop did not close the session")
	}
}

// A caller waiting for another's connect gives up with its context; a
// failed connect leaves no session behind.
func TestSessionsWaitAndFailure(t *testing.T) {
	s := NewSessions()
	defer s.Close()
	release := make(chan struct{})
	started := make(chan struct{})
	go s.Get(context.Background(), "a", func(context.Context) (*Client, error) {
		close(started)
		<-release
		return nil, errors.New("engine said no")
	})
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Get(ctx, "a", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting Get = %v, want its context's error", err)
	}
	close(release)
	calls := 0
	_, err := s.Get(context.Background(), "a", func(context.Context) (*Client, error) {
		calls++
		c, _ := pipeClient(t)
		return c, nil
	})
	if err != nil || calls != 1 {
		t.Errorf("Get after a failed connect = %v with %d connects, want a new connect", err, calls)
	}
}
