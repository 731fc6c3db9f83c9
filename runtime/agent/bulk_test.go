//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// directClient dials the daemon on name as sandboxd's direct path does,
// counting the bulk connections it opens.
func directClient(t *testing.T, name string) (*Client, *atomic.Int32) {
	t.Helper()
	addr := &net.UnixAddr{Name: name, Net: "unix"}
	conn, err := net.DialUnix("unix", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	var redials atomic.Int32
	c, err := DialDaemon(conn, time.Now().Add(10*time.Second), func() (*net.UnixConn, error) {
		redials.Add(1)
		return net.DialUnix("unix", nil, addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, &redials
}

// bulkClient spawns a daemon and dials it directly, with bulk
// connections (counted as directClient counts them).
func bulkClient(t *testing.T) (*Client, *atomic.Int32) {
	t.Helper()
	name, ln := listen(t)
	ds := &daemons{t: t}
	if err := ds.spawn(ln); err != nil {
		t.Fatal(err)
	}
	c, redials := directClient(t, name)
	if c.bulk == nil {
		t.Fatal("a daemon that serves bulk connections got no bulk transport")
	}
	return c, redials
}

// The bulk probe at session start keeps no connection: the first transfer
// dials its own.
func TestBulkProbeKeepsNoConnection(t *testing.T) {
	c, redials := bulkClient(t)
	if n := redials.Load(); n != 1 {
		t.Fatalf("the probe dialed %d bulk connections, want 1", n)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://agent/ping", nil)
	resp, err := c.bulk.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := redials.Load(); n != 2 {
		t.Fatalf("bulk connections dialed after a request: %d, want 2 (the probe's was kept idle)", n)
	}
}

func listen(t *testing.T) (string, *net.UnixListener) {
	t.Helper()
	name := testSocket()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	return name, ln
}

// File transfers on a direct session go through connections of their own,
// which the daemon serves as plain HTTP (a download with sendfile), with
// the same bytes as over yamux; everything else stays on the session.
func TestBulkConnections(t *testing.T) {
	c, redials := bulkClient(t)
	a := viaClient(t, c)
	a.dir = t.TempDir()
	afterProbe := redials.Load()

	p := filepath.Join(a.dir, "big.bin")
	data := bytes.Repeat([]byte("0123456789abcdef\x00\r\n--"), 150000) // 3 MiB, binary, boundary-like bytes
	if resp := a.upload(t, []uploadPart{meta(p, 0), file(p, string(data))}); resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatalf("uploaded %d bytes, want %d", len(got), len(data))
	}
	resp := a.do(t, http.MethodGet, "/files/download?path="+p, nil)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, len(got), err)
	}
	if redials.Load() == afterProbe {
		t.Error("file transfers opened no bulk connection")
	}

	// Uploads one by one, by descriptor: the file, its mode, and errors as
	// the multipart route gives them.
	fw := Files(c.Transport())
	if fw == nil {
		t.Fatal("a session with bulk connections writes no files")
	}
	q := filepath.Join(a.dir, "sub", "by-fd.bin")
	if err := fw.WriteFile(t.Context(), transfer.Meta{Path: q, Permission: transfer.Permission{Mode: 600}}, bytes.NewReader(data)); err != nil {
		t.Fatalf("write by descriptor: %v", err)
	}
	if got, _ := os.ReadFile(q); !bytes.Equal(got, data) {
		t.Fatalf("written %d bytes, want %d", len(got), len(data))
	}
	if fi, _ := os.Stat(q); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %o, want 0600", fi.Mode().Perm())
	}
	var uerr *transfer.Error
	if err := fw.WriteFile(t.Context(), transfer.Meta{Path: a.dir}, strings.NewReader("x")); !errors.As(err, &uerr) || uerr.Status != http.StatusBadRequest || uerr.Code != codeInvalidFileMetadata {
		t.Errorf("write over a directory: %v", err)
	}
	boom := errors.New("client went away")
	if err := fw.WriteFile(t.Context(), transfer.Meta{Path: q}, io.MultiReader(strings.NewReader("half"), iotest.ErrReader(boom))); !errors.Is(err, boom) {
		t.Errorf("write of a failing body: %v, want %v", err, boom)
	}
	if got, _ := os.ReadFile(q); !bytes.Equal(got, data) {
		t.Error("a failed write changed the file")
	}
	eventually(t, "temp files removed", func() bool {
		left, _ := filepath.Glob(filepath.Join(a.dir, "sub", ".sandboxd-upload-*"))
		return len(left) == 0
	})

	before := redials.Load()
	if r := a.run(t, "/command", map[string]any{"command": "true"}); r.exitCode(t) != "0" {
		t.Fatal("command failed")
	}
	if redials.Load() != before {
		t.Error("a command opened a bulk connection")
	}
}

// A download whose client stops reading holds its own connection only: a
// command and another download on the same session are served meanwhile.
func TestBulkDoesNotStallSession(t *testing.T) {
	c, _ := bulkClient(t)
	p := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(p, bytes.Repeat([]byte{7}, 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard only
	defer cancel()
	get := func() *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/files/download?path="+p, nil)
		resp, err := c.Transport().RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	stalled := get()
	defer stalled.Body.Close()
	io.ReadFull(stalled.Body, make([]byte, 64<<10))
	a := viaClient(t, c)
	if r := a.run(t, "/command", map[string]any{"command": "echo alive"}); r.exitCode(t) != "0" {
		t.Fatal("command next to a stalled download failed")
	}
	other := get()
	n, err := io.Copy(io.Discard, other.Body)
	other.Body.Close()
	if err != nil || n != 32<<20 {
		t.Fatalf("download next to a stalled one: %d bytes, %v", n, err)
	}
}

// A daemon that speaks only yamux on every connection (an older agent)
// gets no bulk transport: transfers stay on the session and work.
func TestBulkFallsBackToSession(t *testing.T) {
	name, ln := listen(t)
	t.Cleanup(func() { ln.Close() })
	srv := &http.Server{Handler: Handler(Options{TempDir: t.TempDir()})}
	t.Cleanup(func() { srv.Close() })
	go func() {
		for {
			conn, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			io.WriteString(conn, hello)
			sess, err := yamux.Server(framed(conn), yamuxConfig(slog.New(slog.DiscardHandler)))
			if err != nil {
				conn.Close()
				continue
			}
			go srv.Serve(sess)
		}
	}()
	c, _ := directClient(t, name)
	if c.bulk != nil {
		t.Fatal("a daemon without bulk connections got a bulk transport")
	}
	a := viaClient(t, c)
	p := filepath.Join(t.TempDir(), "f")
	if resp := a.upload(t, []uploadPart{meta(p, 0), file(p, "over yamux")}); resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	if got, _ := os.ReadFile(p); string(got) != "over yamux" {
		t.Fatalf("file holds %q", got)
	}
}

// What the agent passes for a download by descriptor is checked: exactly
// one descriptor, with the marker, of a regular file.
func TestDownloadByDescriptorChecks(t *testing.T) {
	regular, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	regular.WriteString("0123456789")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	pair := func() (*net.UnixConn, *net.UnixConn) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		conn := func(fd int) *net.UnixConn {
			f := os.NewFile(uintptr(fd), "pair")
			defer f.Close()
			c, err := net.FileConn(f)
			if err != nil {
				t.Fatal(err)
			}
			return c.(*net.UnixConn)
		}
		return conn(fds[0]), conn(fds[1])
	}
	read := func(marker byte, files ...*os.File) (*os.File, error) {
		a, b := pair()
		defer a.Close()
		defer b.Close()
		var fds []int
		for _, f := range files {
			fds = append(fds, int(f.Fd()))
		}
		if _, _, err := a.WriteMsgUnix([]byte{marker, 'H'}, syscall.UnixRights(fds...), nil); err != nil {
			t.Fatal(err)
		}
		f, rest, err := readFd(b)
		if f != nil && string(rest) != "H" {
			t.Errorf("read %q after the marker, want H", rest)
		}
		return f, err
	}
	if f, err := read(fdMarker, regular, regular); err == nil || f != nil {
		t.Error("two descriptors were taken")
	}
	if f, err := read('H', regular); err == nil || f != nil {
		t.Error("a descriptor without the marker was taken")
	}
	pipe, err := read(fdMarker, pr)
	if err != nil || pipe == nil {
		t.Fatalf("one descriptor with the marker: %v", err)
	}
	if _, err := fileBody(pipe, "0 10"); err == nil {
		t.Error("a pipe was accepted as a file to send")
	}
	if err := writeInto(pipe, strings.NewReader("x")); err == nil {
		t.Error("a pipe was accepted as a file to write")
	}
	f, err := read(fdMarker, regular)
	if err != nil || f == nil {
		t.Fatalf("a regular file: %v", err)
	}
	body, err := fileBody(f, "2 5")
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	if got, _ := io.ReadAll(body); string(got) != "23456" {
		t.Errorf("body %q, want the part asked for", got)
	}
	for _, bad := range []string{"", "1", "-1 2", "1 -2", "x 2"} {
		if _, err := fileBody(regular, bad); err == nil {
			t.Errorf("part %q accepted", bad)
		}
	}
}
