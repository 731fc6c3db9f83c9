package agent

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// What sandboxd buffers for a session. Whatever is at the other end of a
// session (the agent, or sandbox code that replaced it) decides what it
// sends, so sandboxd's memory for it is bounded here by construction, not
// by its good behaviour (SECURITY.md, "Memory held for sandboxes"):
//
//   - Each stream sandboxd opens buffers at most StreamWindow bytes that
//     were received and not yet read: yamux never grants the sender more.
//   - The agent side cannot open streams: every frame of a stream it
//     offers (a SYN, or an even id: sandboxd's are odd) is dropped before
//     yamux sees it, so there is no accept backlog and nothing allocated
//     for them. Nor can it ping (yamux would answer each ping on a
//     goroutine that waits while the agent side does not read).
//   - A stream sandboxd has closed holds nothing: what it had buffered is
//     read away, and data that still comes for it is dropped before yamux
//     sees it (the frame goes on with its flags, without its body).
//   - A session has at most MaxStreams streams, open or closing (a stream
//     the agent side never closes lingers until yamux's close timeout);
//     beyond, opening one fails as a dial error.
const (
	// StreamWindow is sandboxd's receive window per stream, yamux's
	// smallest. Bulk transfers on the direct path use connections of
	// their own (bulk.go), where the kernel's socket buffers take this
	// role.
	StreamWindow = 256 << 10
	// MaxStreams bounds the streams of one session, open or closing.
	MaxStreams = 512
	// streamCloseTimeout is how long a stream sandboxd closed waits for
	// the agent's side to close too before yamux frees it anyway.
	streamCloseTimeout = 30 * time.Second
)

// clientConfig is the yamux configuration of sandboxd's end of a session.
func clientConfig() *yamux.Config {
	c := yamuxConfig(discardLogger)
	c.MaxStreamWindowSize = StreamWindow
	c.StreamCloseTimeout = streamCloseTimeout
	return c
}

// openStreams is the set of streams sandboxd has open on one session.
type openStreams struct {
	mu  sync.Mutex
	ids map[uint32]struct{}
}

func newOpenStreams() *openStreams { return &openStreams{ids: map[uint32]struct{}{}} }

func (o *openStreams) add(id uint32) {
	o.mu.Lock()
	o.ids[id] = struct{}{}
	o.mu.Unlock()
}

func (o *openStreams) remove(id uint32) {
	o.mu.Lock()
	delete(o.ids, id)
	o.mu.Unlock()
}

func (o *openStreams) has(id uint32) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.ids[id]
	return ok
}

// inboundFilter passes the frames read from the agent on to yamux, but
// none of a stream the agent side opened, and not the bodies of data
// frames for streams sandboxd has closed: their header goes on with a
// length of 0 (yamux still sees the FIN or RST that frees the stream),
// their body is skipped.
type inboundFilter struct {
	r    io.Reader
	open *openStreams
	hdr  [yamuxHeaderSize]byte
	head []byte // what is left of hdr to pass on
	body uint32 // body bytes left of the current frame
	drop bool   // whether they are skipped
}

func (f *inboundFilter) Read(p []byte) (int, error) {
	for {
		switch {
		case len(f.head) > 0:
			n := copy(p, f.head)
			f.head = f.head[n:]
			return n, nil
		case f.body > 0 && f.drop:
			n, err := io.CopyN(io.Discard, f.r, int64(f.body))
			f.body -= uint32(n)
			if err != nil {
				return 0, unexpected(err)
			}
		case f.body > 0:
			if uint32(len(p)) > f.body {
				p = p[:f.body]
			}
			n, err := f.r.Read(p)
			f.body -= uint32(n)
			if err == io.EOF && f.body > 0 {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		default:
			if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
				return 0, err
			}
			typ, id := f.hdr[1], binary.BigEndian.Uint32(f.hdr[4:])
			flags := binary.BigEndian.Uint16(f.hdr[2:])
			switch typ {
			case yamuxTypePing:
				// sandboxd never pings, and yamux answers each ping on a
				// goroutine of its own, which waits while the other side
				// does not read: the whole frame goes.
				continue
			case yamuxTypeData:
				f.body = binary.BigEndian.Uint32(f.hdr[8:])
			case yamuxTypeWindowUpdate:
			default:
				f.head = f.hdr[:] // go away: a length that is no body
				continue
			}
			if id%2 == 0 || flags&yamuxFlagSYN != 0 {
				f.drop = true // a stream the agent side opens: the whole frame goes
				continue
			}
			f.head = f.hdr[:]
			f.drop = f.body > 0 && !f.open.has(id)
			if f.drop {
				binary.BigEndian.PutUint32(f.hdr[8:], 0)
			}
		}
	}
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// clientStream is a stream sandboxd opened. Close leaves nothing behind.
type clientStream struct {
	*yamux.Stream
	open *openStreams
	once sync.Once
}

var errTooManyStreams = errors.New("the session has too many streams open or closing")

// openStream opens a stream on session, if it has room for one.
func openStream(session *yamux.Session, open *openStreams) (net.Conn, error) {
	if session.NumStreams() >= MaxStreams {
		return nil, errTooManyStreams
	}
	s, err := session.OpenStream()
	if err != nil {
		return nil, err
	}
	open.add(s.StreamID())
	return &clientStream{Stream: s, open: open}, nil
}

// Close stops taking data for the stream, reads away what it holds and
// closes it.
func (s *clientStream) Close() error {
	s.once.Do(func() {
		s.open.remove(s.StreamID())
		_ = s.SetReadDeadline(time.Unix(1, 0))
		var buf [4 << 10]byte
		for {
			if _, err := s.Stream.Read(buf[:]); err != nil {
				break
			}
		}
		s.Shrink()
	})
	return s.Stream.Close()
}
