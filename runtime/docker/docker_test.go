package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/runtime"
)

func TestReadPullProgress(t *testing.T) {
	tests := []struct {
		name    string
		stream  string
		wantErr string
		want    []string
	}{
		{
			name: "progress lines, one per status change",
			stream: `{"status":"Pulling from library/x","id":"latest"}
{"status":"Downloading","id":"abc"}
{"status":"Downloading","id":"abc"}
{"status":"Pull complete","id":"abc"}
{"status":"Digest: sha256:1"}`,
			want: []string{"latest: Pulling from library/x", "abc: Downloading", "abc: Pull complete", "Digest: sha256:1"},
		},
		{
			name:    "error message ends the pull",
			stream:  `{"status":"Pulling"}` + "\n" + `{"error":"manifest unknown"}`,
			wantErr: "manifest unknown",
			want:    []string{"Pulling"},
		},
		{name: "garbage", stream: `{"status":`, wantErr: "read pull progress"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := readPullProgress(strings.NewReader(tt.stream), func(s string) { got = append(got, s) })
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("progress = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWrapMapsEngineErrors(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{errdefs.ErrNotFound, runtime.ErrNotFound},
		{errdefs.ErrConflict, runtime.ErrConflict},
		{context.DeadlineExceeded, runtime.ErrUnavailable},
	}
	for _, tt := range tests {
		if got := wrap(tt.err, "op %s", "x"); !errors.Is(got, tt.want) || !strings.HasPrefix(got.Error(), "op x") {
			t.Errorf("wrap(%v) = %v, want it to match %v", tt.err, got, tt.want)
		}
	}
	if wrap(nil, "op") != nil {
		t.Error("wrap(nil) != nil")
	}
	if err := wrap(errors.New("boom"), "op"); errors.Is(err, runtime.ErrNotFound) || errors.Is(err, runtime.ErrUnavailable) {
		t.Errorf("plain error mapped to a sentinel: %v", err)
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// TestExecConnDemultiplexes checks that the agent connection reads only the
// exec's stdout, routes stderr aside, and writes to stdin.
func TestExecConnDemultiplexes(t *testing.T) {
	server, client := net.Pipe()
	var mux bytes.Buffer
	stdcopy.NewStdWriter(&mux, stdcopy.Stdout).Write([]byte("hello "))
	stdcopy.NewStdWriter(&mux, stdcopy.Stderr).Write([]byte("log line\n"))
	stdcopy.NewStdWriter(&mux, stdcopy.Stdout).Write([]byte("world"))
	var stderr bytes.Buffer
	conn := newExecConn(types.HijackedResponse{Conn: client, Reader: bufio.NewReader(&mux)}, nopCloser{&stderr})

	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello world" {
		t.Errorf("stdout = %q", got)
	}
	if stderr.String() != "log line\n" {
		t.Errorf("stderr = %q", stderr.String())
	}
	go conn.Write([]byte("to stdin"))
	buf := make([]byte, 8)
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "to stdin" {
		t.Errorf("stdin got %q, %v", buf, err)
	}
	conn.Close()
}
