package agent

import (
	"bufio"
	"encoding/binary"
	"io"
)

// yamux's frame header: version, type, flags (2), stream id (4), length (4).
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
	// yamuxTypeWindowUpdate also opens, acknowledges and closes streams.
	yamuxTypeWindowUpdate = 1
	yamuxTypePing         = 2
	yamuxFlagSYN          = 1
	// maxCoalesce is the largest body joined to its header; bigger bodies
	// are written after it, as yamux does, so no connection keeps a big
	// buffer.
	maxCoalesce = 32 << 10
)

// framedConn makes each small yamux frame a single Write. yamux writes a
// frame's header and its body separately; on the agent's connection every
// write crosses a pipe, dockerd and the exec stream as a chunk of its own,
// so joining them halves the hops of every message. Only yamux's send loop
// writes, one frame at a time, so a data header is always followed by its
// body.
type framedConn struct {
	io.ReadWriteCloser
	pending []byte // the header of a data frame, waiting for its body
	buf     []byte
	r       *bufio.Reader
	in      io.Reader // what Read reads: r, or a filter of it
}

// readBuffer is what one read of the connection may fetch: yamux reads
// through 4 KiB, and each read of the exec stream is a system call.
const readBuffer = 64 << 10

func framed(conn io.ReadWriteCloser) *framedConn {
	return framedReader(conn, bufio.NewReaderSize(conn, readBuffer))
}

// framedReader is framed with r, a buffer that may already hold the
// first bytes of conn.
func framedReader(conn io.ReadWriteCloser, r *bufio.Reader) *framedConn {
	return &framedConn{ReadWriteCloser: conn, pending: make([]byte, 0, yamuxHeaderSize), r: r, in: r}
}

func (c *framedConn) Read(p []byte) (int, error) { return c.in.Read(p) }

func (c *framedConn) Write(p []byte) (int, error) {
	if len(c.pending) > 0 {
		hdr := c.pending
		c.pending = c.pending[:0]
		if len(p) > maxCoalesce {
			if _, err := c.ReadWriteCloser.Write(hdr); err != nil {
				return 0, err
			}
			return c.ReadWriteCloser.Write(p)
		}
		c.buf = append(append(c.buf[:0], hdr...), p...)
		if _, err := c.ReadWriteCloser.Write(c.buf); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:]) > 0 {
		c.pending = append(c.pending, p...)
		return len(p), nil
	}
	return c.ReadWriteCloser.Write(p)
}
