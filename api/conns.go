package api

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/time/rate"
)

// evictOnExhaustion is how many idle connections are closed when accept
// finds no free file descriptor: one for the new connection, the rest for
// what serving it needs (a connection to the engine, a file).
const evictOnExhaustion = 16

// ConnLimiter is the listener of the HTTP server together with its
// ConnState hook. It keeps count of the open client connections and, when
// there are more than max() or the process runs out of file descriptors,
// closes the ones idle longest (keep-alive connections between requests,
// and connections that have not sent a request yet), so that anonymous
// clients holding connections open cannot keep a key holder's request or
// /health from being served.
type ConnLimiter struct {
	net.Listener
	// max is asked at every accept: the descriptor limit it follows can
	// change while the process runs (prlimit).
	max func() int
	log *slog.Logger
	// warn limits the warnings about closed connections (one per
	// connection in a flood).
	warn *rate.Limiter

	mu    sync.Mutex
	conns map[net.Conn]*connState
}

type connState struct {
	idle  bool
	since time.Time // when it became idle
}

// NewConnLimiter wraps ln; set the server's ConnState to its ConnState.
func NewConnLimiter(ln net.Listener, max func() int, log *slog.Logger) *ConnLimiter {
	return &ConnLimiter{Listener: ln, max: max, log: log, warn: rate.NewLimiter(rate.Every(10*time.Second), 1), conns: map[net.Conn]*connState{}}
}

// Accept accepts the next connection, closing idle ones first when the
// process has no descriptor left for it or too many are open.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) && l.closeIdle(evictOnExhaustion, "out of file descriptors") > 0 {
				continue
			}
			return nil, err // http.Server retries temporary errors with a backoff
		}
		l.mu.Lock()
		n := len(l.conns)
		l.mu.Unlock()
		over := n + 1 - l.max()
		if over > 0 {
			l.closeIdle(over, "too many connections")
		}
		return c, nil
	}
}

// ConnState tracks which connections are idle; http.Server calls it.
func (l *ConnLimiter) ConnState(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateNew:
		l.conns[c] = &connState{idle: true, since: time.Now()}
	case http.StateIdle, http.StateActive:
		// A connection closeIdle already closed is not added back.
		if s := l.conns[c]; s != nil {
			s.idle, s.since = state == http.StateIdle, time.Now()
		}
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, c)
	}
}

// closeIdle closes up to n connections, the longest idle first, and
// returns how many it closed.
func (l *ConnLimiter) closeIdle(n int, why string) int {
	l.mu.Lock()
	var idle []net.Conn
	for c, s := range l.conns {
		if s.idle {
			idle = append(idle, c)
		}
	}
	slices.SortFunc(idle, func(a, b net.Conn) int { return l.conns[a].since.Compare(l.conns[b].since) })
	idle = idle[:min(n, len(idle))]
	for _, c := range idle {
		delete(l.conns, c)
	}
	open := len(l.conns)
	l.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	if len(idle) > 0 && l.warn.Allow() {
		l.log.Warn("closed idle client connections", "reason", why, "closed", len(idle), "open", open)
	}
	return len(idle)
}
