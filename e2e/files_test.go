//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// dockerRecorder is a unix-socket proxy in front of the engine's socket
// that records every request path: what sandboxd asked Docker, seen from
// outside sandboxd.
type dockerRecorder struct {
	Sock  string
	mu    sync.Mutex
	paths []string
}

func startDockerRecorder(t *testing.T) *dockerRecorder {
	t.Helper()
	// A short path: unix socket names are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "dockrec-")
	if err != nil {
		t.Fatal(err)
	}
	r := &dockerRecorder{Sock: filepath.Join(dir, "docker.sock")}
	l, err := net.Listen("unix", r.Sock)
	if err != nil {
		t.Fatal(err)
	}
	engine := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", "/var/run/docker.sock")
	}}
	// ReverseProxy also passes on the upgraded (hijacked) exec streams.
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "docker"
		},
		Transport:     engine,
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.paths = append(r.paths, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		proxy.ServeHTTP(w, req)
	})}
	go srv.Serve(l)
	t.Cleanup(func() {
		srv.Close()
		engine.CloseIdleConnections()
		os.RemoveAll(dir)
	})
	return r
}

// archiveCalls returns the recorded archive requests on container cid
// (by id or by name).
func (r *dockerRecorder) archiveCalls(cid, name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.paths {
		if strings.Contains(p, "/containers/"+cid+"/archive") || strings.Contains(p, "/containers/"+name+"/archive") {
			out = append(out, p)
		}
	}
	return out
}

// filesServer is a sandboxd whose engine is reached through a recorder.
func filesServer(t *testing.T) (*Server, *dockerRecorder) {
	rec := startDockerRecorder(t)
	return startServer(t, withTOML(fmt.Sprintf("[docker]\nhost = %q\n", "unix://"+rec.Sock))), rec
}

// noArchive fails the test if any archive call reached the engine for the
// sandbox.
func noArchive(t *testing.T, rec *dockerRecorder, id string) {
	t.Helper()
	cid := sandboxContainer(t, id).ID
	if calls := rec.archiveCalls(cid, "sandbox-"+id); len(calls) > 0 {
		t.Errorf("archive calls reached the engine for running sandbox %s: %v", id, calls)
	}
}

// pattern is size bytes of deterministic, binary, incompressible-looking
// content (every byte value, NULs and CRLFs included), generated as read.
type pattern struct {
	left  int64
	state uint64
}

func newPattern(size int64, seed uint64) *pattern { return &pattern{left: size, state: seed | 1} }

func (p *pattern) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	for i := range b {
		p.state ^= p.state << 13
		p.state ^= p.state >> 7
		p.state ^= p.state << 17
		b[i] = byte(p.state >> 32)
	}
	p.left -= int64(len(b))
	return len(b), nil
}

// patternSum is the SHA-256 of a pattern.
func patternSum(size int64, seed uint64) string {
	h := sha256.New()
	io.Copy(h, newPattern(size, seed))
	return hex.EncodeToString(h.Sum(nil))
}

// multipartUpload streams execd's upload form for one file (as the Python
// SDK lays it out) from content, and returns the body and its type. With
// sized, the body is a bytes.Reader (a Content-Length is sent); otherwise
// a pipe (chunked, as the TypeScript SDK sends a stream).
func multipartUpload(t *testing.T, path string, mode int, content io.Reader, sized bool) (io.Reader, string) {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		meta, _ := json.Marshal(map[string]any{"path": path, "owner": nil, "group": nil, "mode": mode})
		err := func() error {
			for _, p := range []struct {
				name, filename, ctype string
				data                  io.Reader
			}{
				{"metadata", "metadata", "application/json", bytes.NewReader(meta)},
				{"file", path, "application/octet-stream", content},
			} {
				h := textproto.MIMEHeader{}
				h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p.name, p.filename))
				h.Set("Content-Type", p.ctype)
				w, err := mw.CreatePart(h)
				if err != nil {
					return err
				}
				if _, err := io.Copy(w, p.data); err != nil {
					return err
				}
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	if !sized {
		return struct{ io.Reader }{pr}, mw.FormDataContentType()
	}
	body, err := io.ReadAll(pr)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(body), mw.FormDataContentType()
}

// stream sends one execd request with the endpoint's headers and returns
// the response, its body unread.
func (b *execdBox) stream(t *testing.T, ctx context.Context, method, rest string, body io.Reader, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, b.s.URL+b.path(rest), body)
	if err != nil {
		t.Fatal(err)
	}
	if br, ok := body.(*bytes.Reader); ok {
		req.ContentLength = int64(br.Len())
	}
	for k, v := range b.Headers {
		req.Header.Set(k, v)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rest, err)
	}
	return resp
}

// upload sends an upload and returns its status and body.
func (b *execdBox) upload(t *testing.T, path string, mode int, content io.Reader, sized bool) (int, []byte) {
	t.Helper()
	body, ctype := multipartUpload(t, path, mode, content, sized)
	resp := b.stream(t, t.Context(), http.MethodPost, "/files/upload", body, map[string]string{"Content-Type": ctype})
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// downloadSum downloads a file and returns its status, Content-Length,
// size read and SHA-256.
func (b *execdBox) downloadSum(t *testing.T, path string) (int, int64, int64, string) {
	t.Helper()
	resp := b.stream(t, t.Context(), http.MethodGet, "/files/download?path="+url.QueryEscape(path), nil, nil)
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatalf("download %s: %v", path, err)
	}
	return resp.StatusCode, resp.ContentLength, n, hex.EncodeToString(h.Sum(nil))
}

// shell runs a command in the sandbox and returns its stdout lines joined.
func (b *execdBox) shell(t *testing.T, cmd string) string {
	t.Helper()
	return runCommand(t, b.s, b.ID, cmd)
}

// TestFilesThroughAgent: uploads and downloads of a running sandbox, of
// every size, with and without Content-Length, are exact and never reach
// Docker's archive API.
func TestFilesThroughAgent(t *testing.T) {
	s, rec := filesServer(t)
	b := newExecdBox(t, s, busyboxRequest())
	sizes := []int64{0, 1 << 10, 1 << 20, 100 << 20}
	for i, size := range sizes {
		for _, sized := range []bool{true, false} {
			name := fmt.Sprintf("%d bytes, Content-Length %v", size, sized)
			t.Run(name, func(t *testing.T) {
				seed := uint64(i*2 + 7)
				if sized {
					seed++
				}
				p := fmt.Sprintf("/data/sub%d/f-%v.bin", i, sized)
				if status, body := b.upload(t, p, 0, newPattern(size, seed), sized); status != http.StatusOK {
					t.Fatalf("upload: %d %s", status, body)
				}
				want := patternSum(size, seed)
				// Checked inside the sandbox, not only by the download.
				if got := b.shell(t, "sha256sum "+p+" | cut -d' ' -f1; stat -c '%s %a' "+p); got != want+"\n"+fmt.Sprint(size)+" 644" {
					t.Errorf("in the sandbox: %q, want sum %s, size %d, mode 644", got, want, size)
				}
				status, length, n, sum := b.downloadSum(t, p)
				if status != http.StatusOK || length != size || n != size || sum != want {
					t.Errorf("download: status %d, Content-Length %d, %d bytes, sum %s; want 200, %d, %d, %s", status, length, n, sum, size, size, want)
				}
			})
		}
	}
	// Ranges are served by the agent.
	resp := b.stream(t, t.Context(), http.MethodGet, "/files/download?path=/data/sub1/f-true.bin", nil, map[string]string{"Range": "bytes=1000-"})
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	whole, _ := io.ReadAll(newPattern(1<<10, 10))
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(got, whole[1000:]) || resp.Header.Get("Content-Range") != "bytes 1000-1023/1024" {
		t.Errorf("range: %d %q %q", resp.StatusCode, got, resp.Header.Get("Content-Range"))
	}
	// A range at the end of a 1 TiB sparse file is a seek: reading and
	// discarding what comes before it would take hours.
	b.shell(t, "truncate -s 1099511627776 /tmp/sparse && printf end >> /tmp/sparse")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a hang guard only
	defer cancel()
	resp = b.stream(t, ctx, http.MethodGet, "/files/download?path=/tmp/sparse", nil, map[string]string{"Range": "bytes=-3"})
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusPartialContent || string(got) != "end" || resp.Header.Get("Content-Range") != "bytes 1099511627776-1099511627778/1099511627779" {
		t.Errorf("range at the end of a sparse file: %d %q %q %v", resp.StatusCode, got, resp.Header.Get("Content-Range"), err)
	}
	noArchive(t, rec, b.ID)
}

// TestFilesLineMode is GET /files/download?offset&limit (execd-1.1.md
// §1.2, upstream's JS e2e 03a).
func TestFilesLineMode(t *testing.T) {
	s, rec := filesServer(t)
	b := newExecdBox(t, s, busyboxRequest())
	if status, body := b.upload(t, "/tmp/lines.txt", 0, strings.NewReader("line1\nline2\nline3\nline4\nline5"), true); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, body := b.upload(t, "/tmp/crlf.txt", 0, strings.NewReader("a\r\nb\r\r\nc\rd\n\nlast\r"), true); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, body)
	}
	for _, tt := range []struct{ query, want string }{
		{"path=/tmp/lines.txt&offset=2&limit=2", "line2\nline3"},
		{"path=/tmp/lines.txt&offset=4", "line4\nline5"},
		{"path=/tmp/lines.txt&limit=2", "line1\nline2"},
		{"path=/tmp/lines.txt&offset=9", ""},
		{"path=/tmp/crlf.txt&offset=1", "a\nb\nc\rd\n\nlast"},
	} {
		status, hdr, body := b.do(t, http.MethodGet, "/files/download?"+tt.query, nil, nil)
		if status != http.StatusOK || string(body) != tt.want || hdr.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("%s: %d %q (%s), want 200 %q", tt.query, status, body, hdr.Get("Content-Type"), tt.want)
		}
	}
	for _, tt := range []struct {
		query, rng string
		status     int
		code       string
	}{
		{"offset=1", "", http.StatusBadRequest, "MISSING_QUERY"},
		{"path=/tmp/lines.txt&offset=1", "bytes=0-1", http.StatusBadRequest, "INVALID_REQUEST_BODY"},
		{"path=/tmp/missing&offset=x", "", http.StatusNotFound, "FILE_NOT_FOUND"},
		{"path=/tmp/lines.txt&offset=0", "", http.StatusBadRequest, "INVALID_REQUEST_BODY"},
		{"path=/tmp/lines.txt&limit=-2", "", http.StatusBadRequest, "INVALID_REQUEST_BODY"},
	} {
		status, _, body := b.do(t, http.MethodGet, "/files/download?"+tt.query, nil, map[string]string{"Range": tt.rng})
		wantError(t, tt.query, status, body, tt.status, tt.code)
	}
	noArchive(t, rec, b.ID)
}

// TestFilesLineModeSDK is line mode and ranges through the official
// TypeScript SDK.
func TestFilesLineModeSDK(t *testing.T) { runExecdNode(t, "execd_lines.test.mjs") }

// TestFilesSafeReplace: an upload over a symlink replaces the link with a
// file of the default mode (never the link's 0777) and does not write
// through it; an existing file keeps its mode; a directory is refused.
func TestFilesSafeReplace(t *testing.T) {
	s, rec := filesServer(t)
	b := newExecdBox(t, s, busyboxRequest())
	b.shell(t, "mkdir -p /outside && echo keep > /outside/target && chmod 600 /outside/target && ln -s /outside/target /tmp/link && printf old > /tmp/run.sh && chmod 750 /tmp/run.sh && mkdir /tmp/dir")
	if status, body := b.upload(t, "/tmp/link", 0, strings.NewReader("new"), true); status != http.StatusOK {
		t.Fatalf("upload over a symlink: %d %s", status, body)
	}
	if got := b.shell(t, "stat -c '%F %a' /tmp/link; cat /tmp/link; echo; cat /outside/target; stat -c %a /outside/target"); got != "regular file 644\nnew\nkeep\n600" {
		t.Errorf("after an upload over a symlink: %q; want a regular 0644 file, the target untouched", got)
	}
	if status, body := b.upload(t, "/tmp/run.sh", 0, strings.NewReader("new"), true); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, body)
	}
	if got := b.shell(t, "stat -c %a /tmp/run.sh; cat /tmp/run.sh"); got != "750\nnew" {
		t.Errorf("overwritten file: %q, want mode 750 kept and the new content", got)
	}
	status, body := b.upload(t, "/tmp/dir", 0, strings.NewReader("x"), true)
	wantError(t, "upload over a directory", status, body, http.StatusBadRequest, "INVALID_FILE_METADATA")
	// Docker's /etc/hosts is a bind mount: it is written in place.
	if status, body := b.upload(t, "/etc/hosts", 0, strings.NewReader("127.0.0.1 localhost\n"), true); status != http.StatusOK {
		t.Fatalf("upload over a mount point: %d %s", status, body)
	}
	if got := b.shell(t, "cat /etc/hosts"); got != "127.0.0.1 localhost" {
		t.Errorf("/etc/hosts = %q", got)
	}
	noArchive(t, rec, b.ID)
}

// TestFilesHardenedSandbox: a read-only root and a configured user (whose
// uploads failed on Docker 20.10, which looked the user up on the host).
func TestFilesHardenedSandbox(t *testing.T) {
	s, rec := filesServer(t)
	for _, tt := range []struct {
		name  string
		ext   map[string]string
		owner string
	}{
		{"user", map[string]string{"sandboxd.io/user": "1000:1000"}, "1000"},
		{"read-only root", map[string]string{"sandboxd.io/read-only-rootfs": "true"}, "0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newExecdBox(t, s, busyboxWith(map[string]any{"extensions": tt.ext}))
			if status, body := b.upload(t, "/tmp/up/f.bin", 600, newPattern(1<<20, 3), true); status != http.StatusOK {
				t.Fatalf("upload: %d %s", status, body)
			}
			status, _, n, sum := b.downloadSum(t, "/tmp/up/f.bin")
			if status != http.StatusOK || n != 1<<20 || sum != patternSum(1<<20, 3) {
				t.Errorf("download: %d, %d bytes, sum %s", status, n, sum)
			}
			if got := b.shell(t, "stat -c '%a %u' /tmp/up/f.bin"); got != "600 "+tt.owner {
				t.Errorf("uploaded file: %q", got)
			}
			if tt.ext["sandboxd.io/read-only-rootfs"] != "" {
				status, body := b.upload(t, "/etc/probe", 0, strings.NewReader("x"), true)
				wantError(t, "upload to the read-only root", status, body, http.StatusInternalServerError, "RUNTIME_ERROR")
			}
			noArchive(t, rec, b.ID)
		})
	}
}

// TestFilesPausedAndStopped: a paused sandbox's files are refused with a
// clear 409 (its processes resume with it, and the archive API is not
// used); a stopped one's go through the archive API, chosen automatically.
func TestFilesPausedAndStopped(t *testing.T) {
	s, rec := filesServer(t)
	b := newExecdBox(t, s, busyboxRequest())
	uploadFile(t, s, b.ID, "/tmp/a.txt", "hello")
	if status, _, body := s.do(t, http.MethodPost, sandboxPath(b.ID, "/pause"), nil, nil); status != http.StatusAccepted {
		t.Fatalf("pause: %d %s", status, body)
	}
	status, body := b.upload(t, "/tmp/b.txt", 0, strings.NewReader("x"), true)
	wantError(t, "upload to a paused sandbox", status, body, http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
	status, _, body = b.do(t, http.MethodGet, "/files/download?path=/tmp/a.txt", nil, nil)
	wantError(t, "download from a paused sandbox", status, body, http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
	if status, _, body := s.do(t, http.MethodPost, sandboxPath(b.ID, "/resume"), nil, nil); status != http.StatusAccepted {
		t.Fatalf("resume: %d %s", status, body)
	}
	if got := downloadFile(t, s, b.ID, "/tmp/a.txt"); got != "hello" {
		t.Errorf("after resume: %q", got)
	}
	noArchive(t, rec, b.ID)

	// A sandbox whose main process has exited.
	stopped := newExecdBox(t, s, busyboxWith(map[string]any{"entrypoint": []string{"sh", "-c", "echo early > /early.txt; sleep 3"}}))
	waitState(t, s, stopped.ID, "Terminated")
	if got := downloadFile(t, s, stopped.ID, "/early.txt"); got != "early\n" {
		t.Errorf("download from a stopped sandbox: %q", got)
	}
	uploadFile(t, s, stopped.ID, "/late/b.txt", "late")
	if got := downloadFile(t, s, stopped.ID, "/late/b.txt"); got != "late" {
		t.Errorf("round trip in a stopped sandbox: %q", got)
	}
	// A file part before its metadata (held by sandboxd until the metadata
	// comes, then written from that one copy) arrives whole.
	var early bytes.Buffer
	mw := multipart.NewWriter(&early)
	data := strings.Repeat("0123456789abcdef", (3<<20)/16)
	fw, _ := mw.CreateFormFile("file", "early.bin")
	io.WriteString(fw, data)
	meta, _ := mw.CreateFormFile("metadata", "metadata")
	io.WriteString(meta, `{"path":"/late/early.bin"}`)
	mw.Close()
	if status, _, body := stopped.do(t, http.MethodPost, "/files/upload", early.Bytes(), map[string]string{"Content-Type": mw.FormDataContentType()}); status != http.StatusOK {
		t.Fatalf("upload of a file part before its metadata into a stopped sandbox: %d %s", status, body)
	}
	if got := downloadFile(t, s, stopped.ID, "/late/early.bin"); got != data {
		t.Errorf("file part before its metadata: %d bytes arrived, want %d", len(got), len(data))
	}
	if calls := rec.archiveCalls(sandboxContainer(t, stopped.ID).ID, "sandbox-"+stopped.ID); len(calls) == 0 {
		t.Error("no archive call for the stopped sandbox: the test does not see the engine's traffic")
	}
	status, _, body = stopped.do(t, http.MethodGet, "/files/download?path=/early.txt", nil, map[string]string{"Range": "bytes=0-1"})
	wantError(t, "range from a stopped sandbox", status, body, http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING")
}

// TestFilesDoNotStallOtherStreams: a 100 MiB download whose client stops
// reading, and one in progress, leave the sandbox's other requests served.
func TestFilesDoNotStallOtherStreams(t *testing.T) {
	s, _ := filesServer(t)
	b := newExecdBox(t, s, busyboxRequest())
	b.shell(t, "head -c 104857600 /dev/urandom > /tmp/big")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stalled := b.stream(t, ctx, http.MethodGet, "/files/download?path=/tmp/big", nil, nil)
	defer stalled.Body.Close()
	// Read a little, then nothing: the windows between here and the agent
	// fill up.
	io.ReadFull(stalled.Body, make([]byte, 64<<10))
	done := make(chan error, 1)
	go func() {
		resp := b.stream(t, ctx, http.MethodGet, "/files/download?path=/tmp/big", nil, nil)
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && n != 100<<20 {
			err = fmt.Errorf("read %d bytes", n)
		}
		done <- err
	}()
	for i := 0; i < 5; i++ {
		if got := b.shell(t, "echo alive"); got != "alive" {
			t.Fatalf("command during transfers: %q", got)
		}
		if status, _, _ := b.do(t, http.MethodGet, "/ping", nil, nil); status != http.StatusOK {
			t.Fatalf("ping during transfers: %d", status)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("concurrent download: %v", err)
		}
	case <-time.After(5 * time.Minute): // a hang guard only
		t.Fatal("a download next to a stalled one did not finish")
	}
}

// gate passes r on until it has passed first bytes, then waits for open.
type gate struct {
	r     io.Reader
	first int64
	open  chan struct{}
}

func (g *gate) Read(p []byte) (int, error) {
	if g.first <= 0 {
		<-g.open
		return g.r.Read(p)
	}
	n, err := g.r.Read(p[:min(int64(len(p)), g.first)])
	g.first -= int64(n)
	return n, err
}

// TestFilesUploadDoesNotStallOtherStreams: a 100 MiB upload whose client
// pauses mid-file leaves the sandbox's commands and pings served, and then
// completes exactly, with and without a Content-Length.
func TestFilesUploadDoesNotStallOtherStreams(t *testing.T) {
	s, _ := filesServer(t)
	b := newExecdBox(t, s, busyboxRequest())
	for _, sized := range []bool{true, false} {
		const size = 100 << 20
		body, ctype := multipartUpload(t, "/tmp/up.bin", 0, newPattern(size, 9), sized)
		g := &gate{r: body, first: 8 << 20, open: make(chan struct{})}
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+b.path("/files/upload"), g)
			if br, ok := body.(*bytes.Reader); ok {
				req.ContentLength = int64(br.Len())
			}
			for k, v := range b.Headers {
				req.Header.Set(k, v)
			}
			req.Header.Set("Content-Type", ctype)
			resp, err := s.client.Do(req)
			if err != nil {
				t.Errorf("upload: %v", err)
				done <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		for i := 0; i < 5; i++ {
			if got := b.shell(t, "echo alive"); got != "alive" {
				t.Fatalf("command during a paused upload (sized %v): %q", sized, got)
			}
			if status, _, _ := b.do(t, http.MethodGet, "/ping", nil, nil); status != http.StatusOK {
				t.Fatalf("ping during a paused upload (sized %v): %d", sized, status)
			}
		}
		close(g.open)
		select {
		case status := <-done:
			if status != http.StatusOK {
				t.Fatalf("upload after the pause (sized %v): %d", sized, status)
			}
		case <-time.After(5 * time.Minute): // a hang guard only
			t.Fatal("a paused upload did not finish")
		}
		if status, _, n, sum := b.downloadSum(t, "/tmp/up.bin"); status != http.StatusOK || n != size || sum != patternSum(size, 9) {
			t.Fatalf("uploaded file (sized %v): status %d, %d bytes, sum %s", sized, status, n, sum)
		}
	}
}
