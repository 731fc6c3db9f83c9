package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"
)

// recordingConn records each Write as one chunk.
type recordingConn struct {
	io.Reader
	chunks [][]byte
	err    error
}

func (c *recordingConn) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.chunks = append(c.chunks, slices.Clone(p))
	return len(p), nil
}

func (c *recordingConn) Close() error { return nil }

func header(typ byte, length int) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:], 7)
	binary.BigEndian.PutUint32(h[8:], uint32(length))
	return h
}

func TestFramedConn(t *testing.T) {
	small := []byte("event")
	big := bytes.Repeat([]byte("x"), maxCoalesce+1)
	windowUpdate := header(1, 4096)
	tests := []struct {
		name   string
		writes [][]byte
		want   [][]byte
	}{
		{"data frame joined", [][]byte{header(0, len(small)), small}, [][]byte{append(header(0, len(small)), small...)}},
		{"window update alone", [][]byte{windowUpdate}, [][]byte{windowUpdate}},
		{"empty data frame alone", [][]byte{header(0, 0)}, [][]byte{header(0, 0)}},
		{"big body after its header", [][]byte{header(0, len(big)), big}, [][]byte{header(0, len(big)), big}},
		{"frames in a row", [][]byte{header(0, 5), small, windowUpdate, header(0, 5), small}, [][]byte{
			append(header(0, 5), small...), windowUpdate, append(header(0, 5), small...),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recordingConn{}
			c := framed(rc)
			for _, w := range tt.writes {
				if n, err := c.Write(w); n != len(w) || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", len(w), n, err)
				}
			}
			if len(rc.chunks) != len(tt.want) {
				t.Fatalf("%d writes reached the connection, want %d", len(rc.chunks), len(tt.want))
			}
			for i := range tt.want {
				if !bytes.Equal(rc.chunks[i], tt.want[i]) {
					t.Errorf("write %d = %q, want %q", i, rc.chunks[i], tt.want[i])
				}
			}
		})
	}

	boom := errors.New("boom")
	c := framed(&recordingConn{err: boom})
	c.Write(header(0, 5))
	if _, err := c.Write(small); !errors.Is(err, boom) {
		t.Errorf("error of the joined write = %v, want %v", err, boom)
	}
}
