//go:build linux

package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The daemon has no stderr of its own (it outlives the exec that started
// it), so its warnings go to every bridge that asks for them, and each
// bridge writes them on its stderr, which sandboxd logs for the sandbox.

// logRoute streams the daemon's log lines as they are written.
const logRoute = "/_sandboxd/log"

// Lines pass at logRate a second on average, logBurst at once: a workload
// that makes the daemon warn in a loop (say, by connecting to its socket as
// another user) must not flood sandboxd's log.
const (
	logRate  = 10
	logBurst = 50
)

// logHub passes each line written to it to every current follower. A
// follower that falls behind loses lines rather than slowing the daemon.
type logHub struct {
	mu        sync.Mutex
	followers map[chan []byte]struct{}
	limit     *rate.Limiter // made at the first line
	dropped   int
}

// Write takes one formatted record (slog writes each in one call).
func (h *logHub) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.limit == nil {
		h.limit = rate.NewLimiter(logRate, logBurst)
	}
	if !h.limit.Allow() {
		h.dropped++
		return len(p), nil
	}
	if h.dropped > 0 {
		h.send(fmt.Appendf(nil, "level=WARN msg=\"agent daemon: %d log lines dropped (over %d a second)\"\n", h.dropped, logRate))
		h.dropped = 0
	}
	h.send(append([]byte(nil), p...))
	return len(p), nil
}

func (h *logHub) send(line []byte) {
	for ch := range h.followers {
		select {
		case ch <- line:
		default:
		}
	}
}

func (h *logHub) follow() chan []byte {
	ch := make(chan []byte, 64)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.followers == nil {
		h.followers = map[chan []byte]struct{}{}
	}
	h.followers[ch] = struct{}{}
	return ch
}

func (h *logHub) unfollow(ch chan []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.followers, ch)
}

// serve answers GET logRoute: the lines written from now on, until the
// client goes.
func (h *logHub) serve(w http.ResponseWriter, r *http.Request) {
	ch := h.follow()
	defer h.unfollow(ch)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case line := <-ch:
			if _, err := w.Write(line); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// relayLog follows the log of the daemon on the abstract socket name and
// copies it to w until ctx is done or the daemon goes. It is best effort:
// the bridge works without it.
func relayLog(ctx context.Context, name string, w io.Writer) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return
	}
	if err := greet(conn, time.Now().Add(helloTimeout)); err != nil {
		conn.Close()
		return
	}
	c, err := Dial(conn)
	if err != nil {
		conn.Close()
		return
	}
	defer c.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+logRoute, nil)
	if err != nil {
		return
	}
	resp, err := c.Transport().RoundTrip(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	_, _ = io.Copy(w, resp.Body)
}
