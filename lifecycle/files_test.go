package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// stopSandbox makes a sandbox's container exited, the only state in which
// files move through the archive API.
func stopSandbox(t *testing.T, e *testEnv, cid string) {
	e.rt.Set(t, cid, func(c *runtime.Container) { c.State = runtime.StateExited })
}

// TestFilesTransport checks which path files take in each state: the agent
// while the sandbox runs, the archive API only once it is stopped, and
// neither while it is paused.
func TestFilesTransport(t *testing.T) {
	e := newEnv(t, nil)
	sb, cid := e.create(t, validRequest())
	ctx := context.Background()

	if rt, err := e.m.Files.FilesTransport(ctx, sb.ID); err != nil || rt == nil {
		t.Fatalf("running: FilesTransport = %v, %v; want the agent", rt, err)
	}
	puts := e.rt.Puts()
	wantCode(t, e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/f"}, strings.NewReader("x")), KindConflict, CodeNotRunning)
	wantCode(t, openErr(e.m, sb.ID, "/etc/hostname"), KindConflict, CodeNotRunning)
	if e.rt.Puts() != puts {
		t.Error("an archive write reached a running sandbox")
	}

	if err := e.m.Sandboxes.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err := e.m.Files.FilesTransport(ctx, sb.ID)
	wantCode(t, err, KindConflict, CodeNotRunning)
	wantCode(t, e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/f"}, strings.NewReader("x")), KindConflict, CodeNotRunning)
	if err := e.m.Sandboxes.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if rt, err := e.m.Files.FilesTransport(ctx, sb.ID); err != nil || rt == nil {
		t.Fatalf("resumed: FilesTransport = %v, %v; want the agent", rt, err)
	}

	stopSandbox(t, e, cid)
	if rt, err := e.m.Files.FilesTransport(ctx, sb.ID); err != nil || rt != nil {
		t.Fatalf("stopped: FilesTransport = %v, %v; want the archive API (nil, nil)", rt, err)
	}
	// Names mean something only inside the sandbox; numeric ids go into
	// the tar header.
	wantCode(t, e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/f", Owner: ptr("alice")}, strings.NewReader("x")), KindConflict, CodeNotRunning)
	if err := e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/f", Owner: ptr("1000")}, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if e.rt.Puts() != puts+1 {
		t.Errorf("%d archive writes to the stopped sandbox, want 1", e.rt.Puts()-puts)
	}

	// A read-only root cannot be written through the archive API.
	req := validRequest()
	req.Extensions = map[string]string{ExtReadOnlyRootfs: "true"}
	ro, rocid := e.create(t, req)
	stopSandbox(t, e, rocid)
	wantCode(t, e.m.Files.PutFile(ctx, ro.ID, FileMeta{Path: "/f"}, strings.NewReader("x")), KindConflict, CodeNotRunning)
}

func TestPutFileOpenFile(t *testing.T) {
	e := newEnv(t, nil)
	sb, cid := e.create(t, validRequest())
	stopSandbox(t, e, cid)
	ctx := context.Background()

	// Upload into a directory that does not exist yet: parents are created.
	if err := e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/work/a/b.txt", Mode: 600}, strings.NewReader("hello")); err != nil {
		t.Fatalf("PutFile: %v", err)
	}
	for _, d := range []string{"/work", "/work/a"} {
		if fl, ok := e.rt.File(cid, d); !ok || !fl.Dir {
			t.Errorf("directory %s not created", d)
		}
	}
	if fl, ok := e.rt.File(cid, "/work/a/b.txt"); !ok || string(fl.Data) != "hello" || fl.Mode != 0o600 {
		t.Errorf("uploaded file = %+v, %v; want hello with mode 0600", fl, ok)
	}

	// Mode 0 keeps an existing file's mode; a new file gets 0644.
	e.rt.PutFile(t, cid, "/work/run.sh", runtimetest.File{Data: []byte("old"), Mode: 0o755})
	if err := e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/work/run.sh"}, strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if fl, _ := e.rt.File(cid, "/work/run.sh"); fl.Mode != 0o755 || string(fl.Data) != "new" {
		t.Errorf("overwritten file mode %o data %q, want 0755 new", fl.Mode, fl.Data)
	}
	if err := e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/work/new.txt"}, strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if fl, _ := e.rt.File(cid, "/work/new.txt"); fl.Mode != 0o644 {
		t.Errorf("new file mode %o, want 0644", fl.Mode)
	}

	e.rt.PutFile(t, cid, "/work/link", runtimetest.File{Link: "a/b.txt"})
	e.rt.PutFile(t, cid, "/loop", runtimetest.File{Link: "/loop"})
	for _, p := range []string{"/work/a/b.txt", "/work/link", "/work/./a/../a/b.txt"} {
		f, err := e.m.Files.OpenFile(ctx, sb.ID, p)
		if err != nil {
			t.Fatalf("OpenFile(%s): %v", p, err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != "hello" || f.Size != 5 || f.Name != "b.txt" {
			t.Errorf("OpenFile(%s) = %q size %d name %q", p, got, f.Size, f.Name)
		}
	}

	errTests := []struct {
		name string
		err  error
		kind Kind
		code string
	}{
		{"put relative", e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "rel.txt"}, strings.NewReader("")), KindInvalid, CodeInvalidFileMeta},
		{"put root", e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/"}, strings.NewReader("")), KindInvalid, CodeInvalidFileMeta},
		{"put bad mode", e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/x", Mode: 999}, strings.NewReader("")), KindInvalid, CodeInvalidFileMeta},
		{"put under a file", e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/work/a/b.txt/c"}, strings.NewReader("")), KindInvalid, CodeInvalidFileMeta},
		{"put unknown sandbox", e.m.Files.PutFile(ctx, "nope", FileMeta{Path: "/x"}, strings.NewReader("")), KindNotFound, CodeSandboxNotFound},
		{"open missing", openErr(e.m, sb.ID, "/missing"), KindNotFound, CodeFileNotFound},
		{"open directory", openErr(e.m, sb.ID, "/work"), KindInvalid, CodeInvalidFile},
		{"open relative", openErr(e.m, sb.ID, "work"), KindInvalid, CodeInvalidFile},
		{"open symlink loop", openErr(e.m, sb.ID, "/loop"), KindInvalid, CodeInvalidFile},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.err, tt.kind, tt.code) })
	}
}

func openErr(m *Manager, id, p string) error {
	f, err := m.Files.OpenFile(context.Background(), id, p)
	if err == nil {
		f.Close()
	}
	return err
}

// failingReader returns its data, then err instead of EOF.
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(b []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(b, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestPutFileAnnounced(t *testing.T) {
	e := newEnv(t, nil)
	sb, cid := e.create(t, validRequest())
	stopSandbox(t, e, cid)
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), (3<<20)/16)
	size := int64(len(data))
	spools := spoolFiles(t, e.m)
	tests := []struct {
		name      string
		announced int64
		puts      int // archive calls: 1 when streamed as announced, 2 when written again
	}{
		{"right size", size, 1},
		{"announced too small", size - 2, 2},
		{"announced too large", size + 2, 2},
		{"announced far too large", 2 * size, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.rt.Puts()
			a := &transfer.Announced{Reader: bytes.NewReader(data), Size: tt.announced}
			if err := e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/work/big.bin"}, a); err != nil {
				t.Fatalf("PutFile: %v", err)
			}
			if fl, ok := e.rt.File(cid, "/work/big.bin"); !ok || !bytes.Equal(fl.Data, data) {
				t.Errorf("uploaded file has %d bytes, want the %d sent", len(fl.Data), size)
			}
			if got := e.rt.Puts() - before; got != tt.puts {
				t.Errorf("%d archive writes, want %d", got, tt.puts)
			}
		})
	}

	// A client that goes away mid-upload is a bad upload, not a runtime error.
	broken := &transfer.Announced{Reader: &failingReader{data: data[:1<<20], err: io.ErrUnexpectedEOF}, Size: size}
	wantCode(t, e.m.Files.PutFile(ctx, sb.ID, FileMeta{Path: "/work/broken.bin"}, broken), KindInvalid, CodeInvalidFile)
	if made, left := spools(); made != len(tests)+1 || left != 0 {
		t.Errorf("%d spool files made, %d left behind; want %d, none left", made, left, len(tests)+1)
	}
}

// spoolFiles makes m spool into a temp dir of the test's, and returns how
// many temp files it has made there and how many of them are left: still
// open, or still in the directory.
func spoolFiles(t *testing.T, m *Manager) func() (made, left int) {
	dir := t.TempDir()
	var files []*os.File
	m.Files.spooler = transfer.Spooler{Dir: dir, CreateTemp: func(dir, pattern string) (*os.File, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err == nil {
			files = append(files, f)
		}
		return f, err
	}}
	return func() (made, left int) {
		for _, f := range files {
			if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
				left++
			}
		}
		names, _ := os.ReadDir(dir)
		return len(files), left + len(names)
	}
}
