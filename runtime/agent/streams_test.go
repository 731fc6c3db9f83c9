//go:build linux

package agent

import (
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// hostileAgent serves h on a raw yamux server session, as sandbox code that
// replaced the agent would, and hands the session to with (alone, if h is
// nil).
func hostileAgent(t *testing.T, h http.Handler, with func(*yamux.Session)) *Client {
	t.Helper()
	c, _, _ := dialPipes(t, func(stdin io.Reader, stdout io.Writer) error {
		conf := yamuxConfig(discardLogger)
		conf.MaxStreamWindowSize = 16 << 20
		sess, err := yamux.Server(stdioConn{stdin, stdout}, conf)
		if err != nil {
			return err
		}
		defer sess.Close()
		if h == nil {
			with(sess)
			return nil
		}
		if with != nil {
			go with(sess)
		}
		return (&http.Server{Handler: h}).Serve(sess)
	})
	return c
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func get(t *testing.T, c *Client, path string) *http.Response {
	t.Helper()
	resp, err := (&http.Client{Transport: c.Transport()}).Get("http://agent" + path)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Streams the agent side opens are refused before anything is buffered
// for them: 64 streams with 256 KiB each leave sandboxd's session without
// a stream and its heap as it was.
func TestAgentOpenedStreamsRefused(t *testing.T) {
	const streams, each = 64, 256 << 10
	var sent atomic.Int64
	flooded := make(chan struct{})
	c := hostileAgent(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), func(sess *yamux.Session) {
		defer close(flooded)
		chunk := make([]byte, 32<<10)
		for range streams {
			s, err := sess.OpenStream()
			if err != nil {
				return
			}
			for written := 0; written < each; written += len(chunk) {
				// The initial window lets each stream send this much unasked.
				s.SetWriteDeadline(time.Now().Add(2 * time.Second))
				n, err := s.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		}
	})
	before := heapInUse()
	<-flooded
	// The answer comes after every frame of the flood on the connection.
	get(t, c, "/ping").Body.Close()
	if sent.Load() < streams*each/2 {
		t.Fatalf("the agent side sent only %d bytes", sent.Load())
	}
	grew := int64(heapInUse()) - int64(before)
	if n := c.session.NumStreams(); n > 1 {
		t.Errorf("sandboxd's session holds %d streams after the agent side opened %d", n, streams)
	}
	if grew > 4<<20 {
		t.Errorf("heap grew by %d bytes for %d bytes sent on streams the agent side opened", grew, sent.Load())
	}
}

// A stream whose response is not read holds at most StreamWindow bytes:
// the agent side cannot send more.
func TestStalledStreamHoldsOneWindow(t *testing.T) {
	var sent atomic.Int64
	c := hostileAgent(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 16<<10)
		for {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
			http.NewResponseController(w).Flush()
		}
	}), nil)
	resp := get(t, c, "/big")
	defer resp.Body.Close()
	var last int64 = -1
	for range 50 {
		time.Sleep(50 * time.Millisecond)
		if n := sent.Load(); n == last {
			break
		} else {
			last = n
		}
	}
	// The transport's reader takes a few KiB, and the agent's own HTTP
	// server buffers what it could not send yet.
	if n := sent.Load(); n > StreamWindow+64<<10 {
		t.Errorf("the agent sent %d bytes into a stream nobody reads, more than the window (%d)", n, StreamWindow)
	}
}

// A stream sandboxd closed holds nothing, even when the agent side never
// closes it and goes on sending.
func TestClosedStreamHoldsNothing(t *testing.T) {
	const requests = 48
	var wg sync.WaitGroup
	c := hostileAgent(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 16<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				break
			}
			http.NewResponseController(w).Flush()
		}
		wg.Done()
		select {} // never closes its side
	}), nil)
	before := heapInUse()
	for range requests {
		wg.Add(1)
		resp := get(t, c, "/big")
		// Let the window fill before the body is dropped unread.
		time.Sleep(20 * time.Millisecond)
		resp.Body.Close()
	}
	time.Sleep(200 * time.Millisecond)
	grew := int64(heapInUse()) - int64(before)
	if grew > requests*StreamWindow/4 {
		t.Errorf("heap grew by %d bytes after %d streams closed unread (a window each would be %d)", grew, requests, requests*StreamWindow)
	}
}

// A session never has more than MaxStreams streams, open or closing.
func TestStreamCap(t *testing.T) {
	c := hostileAgent(t, nil, func(sess *yamux.Session) {
		for {
			if _, err := sess.Accept(); err != nil { // accepted, never closed
				return
			}
		}
	})
	open := newOpenStreams()
	var streams []io.Closer
	for i := range MaxStreams {
		s, err := openStream(c.session, open)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		streams = append(streams, s)
	}
	for _, s := range streams[:MaxStreams/2] {
		s.Close() // closing ones count too while the agent side keeps them
	}
	if _, err := openStream(c.session, open); !errors.Is(err, errTooManyStreams) {
		t.Fatalf("stream %d opened: %v", MaxStreams+1, err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://agent/", nil)
	if _, err := c.Transport().RoundTrip(req); err == nil || !strings.Contains(err.Error(), "too many streams") {
		t.Errorf("a request over a full session: %v", err)
	}
}

// Frames an agent side writes raw: a flood of pings (yamux would answer
// each on a goroutine that waits while nobody reads its answers) and
// streams opened with odd ids, as sandboxd's own are: none of it reaches
// yamux.
func TestAgentPingsAndOddStreamsDropped(t *testing.T) {
	before := runtime.NumGoroutine()
	written, release := make(chan struct{}), make(chan struct{})
	c, _, _ := dialPipes(t, func(stdin io.Reader, stdout io.Writer) error {
		frame := func(typ byte, flags uint16, id, length uint32) []byte {
			h := make([]byte, yamuxHeaderSize)
			h[1] = typ
			binary.BigEndian.PutUint16(h[2:], flags)
			binary.BigEndian.PutUint32(h[4:], id)
			binary.BigEndian.PutUint32(h[8:], length)
			return h
		}
		var out []byte
		for i := range uint32(100000) {
			out = append(out, frame(yamuxTypePing, yamuxFlagSYN, 0, i)...)
		}
		for id := uint32(10001); id < 10001+2*300; id += 2 {
			out = append(out, frame(yamuxTypeData, yamuxFlagSYN, id, 4096)...)
			out = append(out, make([]byte, 4096)...)
		}
		_, err := stdout.Write(out)
		close(written)
		<-release // stdin stays open and unread while the test counts
		return err
	})
	t.Cleanup(func() { close(release) })
	<-written
	// The last frames are read after the write returned, and goroutines of
	// earlier tests may still be ending: wait for the count to settle. A
	// ping that reached yamux would hold a goroutine waiting to send its
	// answer into the unread pipe.
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before+100 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+100 {
		t.Errorf("%d goroutines after a ping flood, %d before", n, before)
	}
	if n := c.session.NumStreams(); n != 0 {
		t.Errorf("sandboxd's session holds %d streams the agent side opened", n)
	}
}
