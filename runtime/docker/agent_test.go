package docker

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/pkg/stdcopy"
)

// TestExecConnStreamErrors checks how the demultiplexer ends: cleanly at a
// frame boundary, and with an error on a cut frame or a daemon error frame.
func TestExecConnStreamErrors(t *testing.T) {
	frame := func(typ stdcopy.StdType, s string) []byte {
		var b bytes.Buffer
		stdcopy.NewStdWriter(&b, typ).Write([]byte(s))
		return b.Bytes()
	}
	tests := []struct {
		name    string
		stream  []byte
		want    string
		wantErr string // "" for a clean EOF
	}{
		{"clean end", frame(stdcopy.Stdout, "abc"), "abc", ""},
		{"cut inside a payload", frame(stdcopy.Stdout, "abcdef")[:8+3], "abc", io.ErrUnexpectedEOF.Error()},
		{"cut inside a header", append(frame(stdcopy.Stdout, "abc"), 1, 0, 0), "abc", io.ErrUnexpectedEOF.Error()},
		{"daemon error", append(frame(stdcopy.Stdout, "abc"), frame(stdcopy.Systemerr, "exec died")...), "abc", "exec died"},
		{"unknown frame", append(frame(stdcopy.Stdout, "abc"), 9, 0, 0, 0, 0, 0, 0, 1, 'x'), "abc", "unknown frame type 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, client := net.Pipe()
			defer client.Close()
			conn := newExecConn(types.HijackedResponse{Conn: client, Reader: bufio.NewReader(bytes.NewReader(tt.stream))}, nopCloser{io.Discard})
			got, err := io.ReadAll(conn)
			if string(got) != tt.want {
				t.Errorf("read %q, want %q", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v, want a clean EOF", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			case tt.wantErr == io.ErrUnexpectedEOF.Error() && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Errorf("err = %v, want io.ErrUnexpectedEOF", err)
			}
		})
	}
}
