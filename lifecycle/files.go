package lifecycle

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// execd error codes used by the file routes sandboxd serves itself.
// They are transfer's, the one vocabulary of file transfers.
const (
	CodeFileNotFound    = transfer.CodeFileNotFound
	CodeInvalidFile     = transfer.CodeInvalidFile
	CodeInvalidFileMeta = transfer.CodeInvalidFileMetadata
	CodeMissingQuery    = transfer.CodeMissingQuery
	CodeRuntimeError    = transfer.CodeRuntimeError
)

// spoolInMemory is the largest upload kept in memory; bigger ones are
// spooled to a temp file, because a tar header needs the size up front.
const spoolInMemory = 1 << 20

// FileMeta is the metadata part of one upload.
type FileMeta struct {
	Path  string  `json:"path"`
	Owner *string `json:"owner"`
	Group *string `json:"group"`
	Mode  int     `json:"mode"` // octal digits written as a decimal number; 0 = default
}

// Files is the service of file transfers: it says which way a sandbox's
// files move now, and moves them with the archive API when no process of
// the sandbox can run.
type Files struct {
	*deps
	sandboxes fileSandboxes
	// spooler holds uploads into a stopped sandbox; tests count its temp
	// files.
	spooler transfer.Spooler
}

// fileSandboxes is what Files needs of the sandboxes service.
type fileSandboxes interface {
	Transport(ctx context.Context, id string) (http.RoundTripper, error)
	isPaused(id string) bool
	ready(ctx context.Context, id string) (*Record, runtime.Container, error)
}

// FilesTransport says how files of a sandbox move. While the sandbox can
// run processes they go through its agent, the transport returned: Docker's
// archive API resolves paths in dockerd, where sandbox code can race it
// (swap a directory for a symlink to a host path) and make dockerd mount
// over host directories. Only when no process can run (a stopped
// container) is the transport nil: then PutFile and OpenFile use the
// archive API. A paused sandbox is refused: its agent is frozen, and its
// processes run again when it is resumed. Each call counts as activity.
func (f *Files) FilesTransport(ctx context.Context, id string) (http.RoundTripper, error) {
	if f.sandboxes.isPaused(id) {
		return nil, errPausedFiles(id)
	}
	rt, err := f.sandboxes.Transport(ctx, id)
	var e *Error
	if err == nil || !errors.As(err, &e) || e.Code != CodeNotRunning {
		return rt, err
	}
	// The agent cannot run: find out whether any process can.
	if _, _, serr := f.stopped(ctx, id); serr != nil {
		return nil, serr
	}
	return nil, nil
}

func errPausedFiles(id string) error {
	return errf(KindConflict, CodeNotRunning, "sandbox %s is paused: files can be moved once it is resumed", id)
}

// stopped returns the record of a sandbox whose container runs no process,
// and the container, or a conflict when it can run one: the archive API is
// used on nothing else.
func (f *Files) stopped(ctx context.Context, id string) (*Record, runtime.Container, error) {
	rec, c, err := f.sandboxes.ready(ctx, id)
	switch {
	case err != nil:
		return nil, c, err
	case c.State == runtime.StatePaused:
		return nil, c, errPausedFiles(id)
	case c.State.Active():
		return nil, c, errf(KindConflict, CodeNotRunning, "sandbox %s is running but its agent is not: files cannot be moved", id)
	}
	if f.rt.Features().Archive == nil {
		return nil, c, errf(KindConflict, CodeNotRunning, "sandbox %s is not running, and this runtime moves files only through the sandbox's agent", id)
	}
	return rec, c, nil
}

// archive is the runtime's archive copy; only called on a sandbox that
// stopped returned, which checked that the runtime has it.
func (f *Files) archive() runtime.Archive { return f.rt.Features().Archive }

// PutFile writes one uploaded file into a stopped sandbox with Docker's
// archive API (see FilesTransport). Missing parent directories are
// created; a new file gets mode 0644, an existing file keeps its mode.
func (f *Files) PutFile(ctx context.Context, id string, meta FileMeta, content io.Reader) error {
	p, perr := transfer.UploadPath(meta.Path)
	if perr != nil {
		return transferError(perr)
	}
	mode, err := transfer.ParseMode(meta.Mode)
	if err != nil {
		return errf(KindInvalid, CodeInvalidFileMeta, "file %s: %v", p, err)
	}
	uid, gid, err := archiveOwner(meta)
	if err != nil {
		return err
	}
	rec, _, err := f.stopped(ctx, id)
	if err != nil {
		return err
	}
	if rec.ReadOnlyRootfs {
		return errf(KindConflict, CodeNotRunning, "sandbox %s has a read-only root and is not running: files cannot be written", id)
	}
	// The target is found once the content is at hand (spooled unless
	// its announced size lets it stream), and kept if it is written again.
	var t *archiveTarget
	err = transfer.PutSized(content, f.spooler, spoolInMemory, func(size int64, body io.Reader) error {
		if t == nil {
			tt, err := f.target(ctx, rec.ContainerID, p, mode, uid, gid)
			if err != nil {
				return err
			}
			t = &tt
		}
		return f.putArchive(ctx, *t, size, body)
	})
	var bad *transfer.BodyError
	switch {
	case errors.As(err, &bad):
		return &Error{Kind: KindInvalid, Code: CodeInvalidFile, Message: "read upload of " + p, Err: bad.Err}
	case err == nil:
		return nil
	}
	if _, ok := AsError(err); ok {
		return err
	}
	return f.fileError(err, p)
}

// target is where file p of container cid goes: its deepest existing
// directory, the directories to create below it, and its mode (mode, else
// the existing file's, else 0644) and owner.
func (f *Files) target(ctx context.Context, cid, p string, mode os.FileMode, uid, gid int) (archiveTarget, error) {
	dir, missing, err := f.existingAncestor(ctx, cid, path.Dir(p))
	if err != nil {
		return archiveTarget{}, err
	}
	if mode == 0 {
		// Only a regular file's mode is kept: a symlink's is 0777.
		mode = 0o644
		if st, err := f.archive().StatPath(ctx, cid, p); err == nil && st.Mode.IsRegular() {
			mode = st.Mode.Perm()
		}
	}
	return archiveTarget{cid: cid, dir: dir, missing: missing, name: path.Base(p), mode: mode, uid: uid, gid: gid}, nil
}

// archiveOwner is the owner an upload into a stopped sandbox gets, written
// into the tar header: numeric ids only, since names mean something only
// inside the sandbox. Without one the file is root's, as Docker's copy does.
func archiveOwner(meta FileMeta) (uid, gid int, err error) {
	id := func(p *string, what string) (int, error) {
		if p == nil || *p == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(*p)
		if err != nil || n < 0 {
			return 0, errf(KindConflict, CodeNotRunning, "%s %q of %s: names are resolved inside the sandbox, which is not running; give a numeric id", what, *p, meta.Path)
		}
		return n, nil
	}
	if uid, err = id(meta.Owner, "owner"); err != nil {
		return 0, 0, err
	}
	gid, err = id(meta.Group, "group")
	return uid, gid, err
}

// archiveTarget is where one uploaded file goes: the deepest existing
// directory, the directories to create below it, and the file.
type archiveTarget struct {
	cid, dir string
	missing  []string
	name     string
	mode     os.FileMode
	uid, gid int
}

// putArchive streams size bytes of body into the container as a one-file
// tar, read by the engine's client straight from body: no pipe, no
// copying goroutine.
func (f *Files) putArchive(ctx context.Context, t archiveTarget, size int64, body io.Reader) error {
	head, err := tarHead(t, size)
	if err != nil {
		return err
	}
	// The file's data is padded to a whole block, then two zero blocks end
	// the archive.
	tail := make([]byte, (tarBlock-size%tarBlock)%tarBlock+2*tarBlock)
	return f.archive().PutArchive(ctx, t.cid, t.dir, io.MultiReader(bytes.NewReader(head), body, bytes.NewReader(tail)))
}

const tarBlock = 512

// tarHead is the start of a one-file tar: the missing directories, then
// the file's header.
func tarHead(t archiveTarget, size int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	rel := ""
	for _, d := range t.missing {
		rel = path.Join(rel, d)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: now}); err != nil {
			return nil, err
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(rel, t.name), Mode: int64(t.mode), Size: size, ModTime: now, Uid: t.uid, Gid: t.gid}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// existingAncestor returns the deepest existing directory above dir and the
// path components below it that must be created.
func (f *Files) existingAncestor(ctx context.Context, cid, dir string) (string, []string, error) {
	var missing []string
	for {
		st, err := f.archive().StatPath(ctx, cid, dir)
		if err == nil {
			if !st.IsDir && st.Mode&os.ModeSymlink == 0 {
				return "", nil, errf(KindInvalid, CodeInvalidFileMeta, "%s exists and is not a directory", dir)
			}
			return dir, missing, nil
		}
		if !errors.Is(err, runtime.ErrNotFound) {
			return "", nil, f.fileError(err, dir)
		}
		missing = append([]string{path.Base(dir)}, missing...)
		dir = path.Dir(dir)
		if dir == "/" {
			return "/", missing, nil
		}
	}
}

// fileError maps an archive failure on path p.
func (f *Files) fileError(err error, p string) error {
	if errors.Is(err, runtime.ErrNotFound) {
		return errf(KindNotFound, CodeFileNotFound, "file not found: %s", p)
	}
	if errors.Is(err, runtime.ErrUnavailable) || errors.Is(err, runtime.ErrContainerTimeout) {
		return f.engineError(err, "file transfer "+p)
	}
	if errors.Is(err, runtime.ErrConflict) {
		// A pause, resume or delete cut the transfer short.
		return &Error{Kind: KindConflict, Code: CodeNotRunning, Message: "file transfer " + p + " was cut short: the sandbox was paused, resumed or deleted meanwhile; retry", Err: err}
	}
	return &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: fmt.Sprintf("file transfer %s: %v", p, err), Err: err}
}

// File is an open file being read out of a sandbox.
type File struct {
	io.Reader
	Size    int64
	ModTime time.Time
	Name    string
	closer  io.Closer
}

// Close releases the archive stream.
func (f *File) Close() error { return f.closer.Close() }

// OpenFile streams one regular file out of a stopped sandbox through the
// archive API (see FilesTransport), following symlinks. A directory is a
// clean 400, a missing path 404.
func (f *Files) OpenFile(ctx context.Context, id, p string) (*File, error) {
	p, perr := transfer.CleanPath(p, CodeInvalidFile)
	if perr != nil {
		return nil, transferError(perr)
	}
	rec, _, err := f.stopped(ctx, id)
	if err != nil {
		return nil, err
	}
	for hops := 0; hops < 16; hops++ {
		rc, st, err := f.archive().GetArchive(ctx, rec.ContainerID, p)
		if err != nil {
			return nil, f.fileError(err, p)
		}
		if st.IsDir {
			rc.Close()
			return nil, errf(KindInvalid, CodeInvalidFile, "%s is a directory, not a file", p)
		}
		tr := tar.NewReader(rc)
		hdr, err := tr.Next()
		if err != nil {
			rc.Close()
			return nil, f.fileError(err, p)
		}
		switch hdr.Typeflag {
		case tar.TypeReg:
			return &File{Reader: tr, Size: hdr.Size, ModTime: hdr.ModTime, Name: path.Base(p), closer: rc}, nil
		case tar.TypeSymlink:
			rc.Close()
			target := hdr.Linkname
			if !strings.HasPrefix(target, "/") {
				target = path.Join(path.Dir(p), target)
			}
			p = path.Clean(target)
		default:
			rc.Close()
			return nil, errf(KindInvalid, CodeInvalidFile, "%s is not a regular file", p)
		}
	}
	return nil, errf(KindInvalid, CodeInvalidFile, "%s: too many levels of symbolic links", p)
}

// UploadSink is where the files of an upload into sandbox id go, the way
// FilesTransport said they move: through fw, the writer FileWriter found
// on the sandbox's files transport, or, when fw is nil (a stopped
// sandbox), with the archive API (PutFile). The api reads the form with
// transfer.Upload into it.
func (f *Files) UploadSink(id string, fw runtime.FileWriter) transfer.Sink {
	if fw != nil {
		return agentSink{fw}
	}
	return &archiveSink{files: f, id: id}
}

// FileWriter returns the writer of rt, a sandbox's files transport, when
// it writes an upload's files itself (then UploadSink writes through it); nil when the agent reads the form.
func (f *Files) FileWriter(rt http.RoundTripper) runtime.FileWriter {
	if bulk := f.rt.Features().BulkFiles; bulk != nil && rt != nil {
		return bulk.FileWriter(rt)
	}
	return nil
}

// UploadError is err, a failed upload, as an *Error: a refusal of the
// transfer (a malformed form, a path or mode the agent refused) keeps its
// code, and its status if it is a 500 or a 413, else is a 400.
func UploadError(err error) error {
	var te *transfer.Error
	if !errors.As(err, &te) {
		return err
	}
	return transferError(te)
}

func transferError(te *transfer.Error) error {
	kind := KindInvalid
	switch {
	case te.Status >= 500:
		kind = KindInternal
	case te.Status == http.StatusRequestEntityTooLarge:
		kind = KindTooLarge
	}
	return &Error{Kind: kind, Code: te.Code, Message: te.Message}
}

// agentSink writes each file through the agent, which is given its data
// as it arrives, whatever its size: nothing is spooled.
type agentSink struct{ fw runtime.FileWriter }

func (s agentSink) Put(ctx context.Context, meta transfer.Meta, content io.Reader) error {
	src := &readErr{r: content}
	err := s.fw.WriteFile(ctx, runtime.FileMeta{Path: meta.Path, Owner: meta.Owner, Group: meta.Group, Mode: meta.Mode}, src)
	var te *transfer.Error
	switch {
	case err == nil:
		return nil
	case src.err != nil:
		return &Error{Kind: KindInvalid, Code: CodeInvalidFile, Message: "read upload of " + meta.Path, Err: src.err}
	case errors.As(err, &te):
		return transferError(te)
	}
	return &Error{Kind: KindUnavailable, Code: CodeAgentFailed, Message: "upload of " + meta.Path + " through the agent failed", Err: err}
}

// readErr keeps what its reader failed with: the client's fault, unlike
// what fails after.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// archiveSink writes each file into a stopped sandbox with PutFile. A tar
// header needs the file's size up front: it is a transfer.SizedSink, so
// that the last part of an upload whose size the request tells streams
// straight into the sandbox instead of being spooled first.
type archiveSink struct {
	files *Files
	id    string
}

func (s *archiveSink) Spooler() transfer.Spooler { return s.files.spooler }

func (s *archiveSink) Put(ctx context.Context, meta transfer.Meta, content io.Reader) error {
	fm := FileMeta{Path: meta.Path, Mode: meta.Mode, Owner: nonEmpty(meta.Owner), Group: nonEmpty(meta.Group)}
	return s.files.PutFile(ctx, s.id, fm, content)
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
