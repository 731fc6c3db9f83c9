package lifecycle

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// execd error codes used by the file routes sandboxd serves itself.
const (
	CodeFileNotFound    = "FILE_NOT_FOUND"
	CodeInvalidFile     = "INVALID_FILE"
	CodeInvalidFileMeta = "INVALID_FILE_METADATA"
	CodeMissingQuery    = "MISSING_QUERY"
	CodeRuntimeError    = "RUNTIME_ERROR"
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

// ParseMode reads upstream's "octal digits as a decimal int" mode.
func ParseMode(m int) (os.FileMode, error) {
	if m < 0 || m > 7777 {
		return 0, fmt.Errorf("mode %d is not 0..7777", m)
	}
	var out os.FileMode
	for shift, n := 0, m; n > 0; shift, n = shift+3, n/10 {
		d := n % 10
		if d > 7 {
			return 0, fmt.Errorf("mode %d has a digit that is not octal", m)
		}
		out |= os.FileMode(d) << shift
	}
	return out, nil
}

// Spooled is an upload buffered so that its size is known (a tar header
// needs it up front): in memory when small, else in a temp file.
type Spooled struct {
	io.Reader
	Size int64
	file *os.File
}

// Close removes the temp file, if any.
func (s *Spooled) Close() error {
	if s.file == nil {
		return nil
	}
	s.file.Close()
	return os.Remove(s.file.Name())
}

// Spool reads r to its end.
func Spool(r io.Reader) (*Spooled, error) {
	buf := make([]byte, spoolInMemory+1)
	n, err := io.ReadFull(r, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &Spooled{Reader: bytes.NewReader(buf[:n]), Size: int64(n)}, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "sandboxd-upload-*")
	if err != nil {
		return nil, fmt.Errorf("spool upload: %w", err)
	}
	s := &Spooled{Reader: f, file: f}
	s.Size, err = io.Copy(f, io.MultiReader(bytes.NewReader(buf[:n]), r))
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("spool upload: %w", err)
	}
	return s, nil
}

// cleanPath validates an absolute in-sandbox path.
func cleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "\x00") {
		return "", errf(KindInvalid, CodeInvalidFileMeta, "path %q must be absolute", p)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", errf(KindInvalid, CodeInvalidFileMeta, "path %q names the root directory, not a file", p)
	}
	return c, nil
}

// PutFile writes one uploaded file into a sandbox with Docker's archive
// API, so it works for any size and even when the sandbox's main process
// has exited. Missing parent directories are created.
func (m *Manager) PutFile(ctx context.Context, id string, meta FileMeta, content io.Reader) error {
	rec, err := m.record(id)
	if err != nil {
		return err
	}
	m.Touch(id)
	p, err := cleanPath(meta.Path)
	if err != nil {
		return err
	}
	mode, err := ParseMode(meta.Mode)
	if err != nil {
		return errf(KindInvalid, CodeInvalidFileMeta, "file %s: %v", p, err)
	}
	if rec.ReadOnlyRootfs {
		return m.putFileViaAgent(ctx, rec, p, meta, content)
	}
	announced, streamed := content.(*Announced)
	streamed = streamed && announced.Size > spoolInMemory
	body, spooled := content.(*Spooled)
	if !spooled && !streamed {
		if body, err = Spool(content); err != nil {
			return &Error{Kind: KindInvalid, Code: CodeInvalidFile, Message: "read upload of " + p, Err: err}
		}
		defer body.Close()
	}
	dir, missing, err := m.existingAncestor(ctx, rec.ContainerID, path.Dir(p))
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
		if st, err := m.rt.StatPath(ctx, rec.ContainerID, p); err == nil && !st.IsDir {
			mode = st.Mode.Perm()
		}
	}
	t := archiveTarget{cid: rec.ContainerID, dir: dir, missing: missing, name: path.Base(p), mode: mode}
	if streamed {
		err = m.putAnnounced(ctx, t, announced)
	} else {
		err = m.putArchive(ctx, t, body.Size, body)
	}
	var bad *bodyError
	if errors.As(err, &bad) {
		return &Error{Kind: KindInvalid, Code: CodeInvalidFile, Message: "read upload of " + p, Err: bad.err}
	}
	if err != nil {
		return m.fileError(err, p)
	}
	if meta.Owner != nil && *meta.Owner != "" || meta.Group != nil && *meta.Group != "" {
		return m.chown(ctx, rec, p, meta.Owner, meta.Group)
	}
	return nil
}

// chown asks the agent to change an uploaded file's owner, because user
// and group names are only meaningful inside the sandbox.
func (m *Manager) chown(ctx context.Context, rec *Record, p string, owner, group *string) error {
	perm := map[string]string{}
	if owner != nil {
		perm["owner"] = *owner
	}
	if group != nil {
		perm["group"] = *group
	}
	body, _ := json.Marshal(map[string]any{p: perm})
	resp, err := m.agentCall(ctx, rec, http.MethodPost, "/files/permissions", "application/json", bytes.NewReader(body), "set owner of "+p)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// agentCall sends one request to a sandbox's agent and returns its 200
// response; any other answer becomes an error carrying the agent's message.
func (m *Manager) agentCall(ctx context.Context, rec *Record, method, target, contentType string, body io.Reader, what string) (*http.Response, error) {
	rt, err := m.rt.Agent(ctx, rec.ContainerID)
	if err != nil {
		return nil, &Error{Kind: KindConflict, Code: CodeRuntimeError, Message: what + ": the sandbox's agent is not running", Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+target, body)
	if err != nil {
		return nil, &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: what, Err: err}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: what, Err: err}
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	// The agent answers with execd's envelope; its code is passed on.
	e := &Error{Kind: KindInvalid, Code: CodeRuntimeError}
	var ae struct{ Code, Message string }
	if json.Unmarshal(msg, &ae) == nil && ae.Message != "" {
		msg = []byte(ae.Message)
		if ae.Code != "" {
			e.Code = ae.Code
		}
	}
	e.Message = fmt.Sprintf("%s: %s", what, msg)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		e.Kind = KindNotFound
	case resp.StatusCode >= 500:
		e.Kind = KindInternal
	}
	return nil, e
}

// putFileViaAgent uploads through the agent's own /files/upload, for
// sandboxes whose root filesystem is read-only: Docker's archive API
// refuses to write into them and cannot see their tmpfs.
func (m *Manager) putFileViaAgent(ctx context.Context, rec *Record, p string, meta FileMeta, content io.Reader) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(writeUploadForm(mw, p, meta, content))
	}()
	resp, err := m.agentCall(ctx, rec, http.MethodPost, "/files/upload", mw.FormDataContentType(), pr, "upload "+p)
	pr.CloseWithError(errors.New("upload finished"))
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// writeUploadForm writes execd's upload form: a metadata part then the
// file part, both as file parts as execd expects.
func writeUploadForm(mw *multipart.Writer, p string, meta FileMeta, content io.Reader) error {
	perm := map[string]any{"path": p, "mode": meta.Mode}
	if meta.Owner != nil {
		perm["owner"] = *meta.Owner
	}
	if meta.Group != nil {
		perm["group"] = *meta.Group
	}
	mpart, err := mw.CreateFormFile("metadata", "metadata.json")
	if err != nil {
		return err
	}
	if err := json.NewEncoder(mpart).Encode(perm); err != nil {
		return err
	}
	fpart, err := mw.CreateFormFile("file", path.Base(p))
	if err != nil {
		return err
	}
	if _, err := io.Copy(fpart, content); err != nil {
		return err
	}
	return mw.Close()
}

// archiveTarget is where one uploaded file goes: the deepest existing
// directory, the directories to create below it, and the file.
type archiveTarget struct {
	cid, dir string
	missing  []string
	name     string
	mode     os.FileMode
}

// putArchive streams size bytes of body into the container as a one-file
// tar, read by the Docker client straight from body: no pipe, no copying
// goroutine. A failure to read body, or a body of another size, is
// returned over Docker's error, which is only its consequence.
func (m *Manager) putArchive(ctx context.Context, t archiveTarget, size int64, body io.Reader) error {
	head, err := tarHead(t.missing, t.name, t.mode, size)
	if err != nil {
		return err
	}
	src := &exactReader{r: body, left: size}
	// The file's data is padded to a whole block, then two zero blocks end
	// the archive.
	tail := make([]byte, (tarBlock-size%tarBlock)%tarBlock+2*tarBlock)
	err = m.rt.PutArchive(ctx, t.cid, t.dir, io.MultiReader(bytes.NewReader(head), src, bytes.NewReader(tail)))
	if src.err != nil {
		return src.err
	}
	return err
}

// Announced is an upload whose size the client announced but that is not
// checked yet (api derives it from Content-Length). It is streamed into
// the sandbox as it arrives, and kept in a temp file meanwhile: if its
// real size differs, the file is written again from that copy.
type Announced struct {
	io.Reader
	Size int64
}

// putAnnounced streams an announced upload, falling back to spooling it
// when the announcement was wrong.
func (m *Manager) putAnnounced(ctx context.Context, t archiveTarget, a *Announced) error {
	f, err := os.CreateTemp("", "sandboxd-upload-*")
	if err != nil {
		return fmt.Errorf("spool upload: %w", err)
	}
	copied := &Spooled{Reader: f, file: f}
	defer copied.Close()
	err = m.putArchive(ctx, t, a.Size, io.TeeReader(fullReader{a.Reader}, f))
	if !errors.Is(err, errSizeMismatch) {
		return err
	}
	// The copy holds all that was read; the rest of the upload joins it.
	if _, err := io.Copy(f, a.Reader); err != nil {
		return &bodyError{err}
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return fmt.Errorf("spool upload: %w", err)
	}
	return m.putArchive(ctx, t, size, f)
}

// fullReader fills every read it can: a multipart part yields a few KiB
// per read, and passed on like that each would cost a write to the copy
// and a chunk of its own in the request to Docker.
type fullReader struct{ r io.Reader }

func (f fullReader) Read(p []byte) (n int, err error) {
	for n < len(p) && err == nil {
		var m int
		m, err = f.r.Read(p[n:])
		n += m
	}
	return n, err
}

// errSizeMismatch says an announced upload was not of the announced size.
var errSizeMismatch = errors.New("upload size differs from the announced size")

// bodyError is a failure to read the client's upload, as opposed to a
// failure to write it into the sandbox.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "read upload: " + e.err.Error() }

// exactReader passes on r if it holds exactly left bytes, and fails with
// errSizeMismatch as soon as it is clear that it does not. err keeps the
// failure, whatever the reader's reader does with it.
type exactReader struct {
	r    io.Reader
	left int64
	err  error
	one  [1]byte
}

func (e *exactReader) Read(b []byte) (int, error) {
	n, err := e.read(b)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

func (e *exactReader) read(b []byte) (int, error) {
	if e.left == 0 {
		n, err := io.ReadFull(e.r, e.one[:])
		switch {
		case n > 0:
			return 0, errSizeMismatch
		case errors.Is(err, io.EOF):
			return 0, io.EOF
		default:
			return 0, &bodyError{err}
		}
	}
	if int64(len(b)) > e.left {
		b = b[:e.left]
	}
	n, err := e.r.Read(b)
	e.left -= int64(n)
	switch {
	case errors.Is(err, io.EOF) && e.left > 0:
		return n, errSizeMismatch
	case errors.Is(err, io.EOF):
		return n, nil
	case err != nil:
		return n, &bodyError{err}
	}
	return n, nil
}

const tarBlock = 512

// tarHead is the start of a one-file tar: the missing directories, then
// the file's header.
func tarHead(dirs []string, name string, mode os.FileMode, size int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	rel := ""
	for _, d := range dirs {
		rel = path.Join(rel, d)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: now}); err != nil {
			return nil, err
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(rel, name), Mode: int64(mode), Size: size, ModTime: now}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// existingAncestor returns the deepest existing directory above dir and the
// path components below it that must be created.
func (m *Manager) existingAncestor(ctx context.Context, cid, dir string) (string, []string, error) {
	var missing []string
	for {
		st, err := m.rt.StatPath(ctx, cid, dir)
		if err == nil {
			if !st.IsDir && st.Mode&os.ModeSymlink == 0 {
				return "", nil, errf(KindInvalid, CodeInvalidFileMeta, "%s exists and is not a directory", dir)
			}
			return dir, missing, nil
		}
		if !errors.Is(err, runtime.ErrNotFound) {
			return "", nil, m.fileError(err, dir)
		}
		missing = append([]string{path.Base(dir)}, missing...)
		dir = path.Dir(dir)
		if dir == "/" {
			return "/", missing, nil
		}
	}
}

// fileError maps an archive failure on path p.
func (m *Manager) fileError(err error, p string) error {
	if errors.Is(err, runtime.ErrNotFound) {
		return errf(KindNotFound, CodeFileNotFound, "file not found: %s", p)
	}
	if errors.Is(err, runtime.ErrUnavailable) || errors.Is(err, runtime.ErrContainerTimeout) {
		return m.engineError(err, "file transfer "+p)
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

// OpenFile streams one regular file out of a sandbox through the archive
// API, following symlinks. A directory is a clean 400, a missing path 404.
func (m *Manager) OpenFile(ctx context.Context, id, p string) (*File, error) {
	rec, err := m.record(id)
	if err != nil {
		return nil, err
	}
	m.Touch(id)
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "\x00") {
		return nil, errf(KindInvalid, CodeInvalidFile, "path %q must be absolute", p)
	}
	p = path.Clean(p)
	if rec.ReadOnlyRootfs {
		return m.openFileViaAgent(ctx, rec, p)
	}
	for hops := 0; hops < 16; hops++ {
		rc, st, err := m.rt.GetArchive(ctx, rec.ContainerID, p)
		if err != nil {
			return nil, m.fileError(err, p)
		}
		if st.IsDir {
			rc.Close()
			return nil, errf(KindInvalid, CodeInvalidFile, "%s is a directory, not a file", p)
		}
		tr := tar.NewReader(rc)
		hdr, err := tr.Next()
		if err != nil {
			rc.Close()
			return nil, m.fileError(err, p)
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

// openFileViaAgent downloads through the agent's /files/download, for
// sandboxes with a read-only root whose writable tmpfs the archive API
// cannot see.
func (m *Manager) openFileViaAgent(ctx context.Context, rec *Record, p string) (*File, error) {
	resp, err := m.agentCall(ctx, rec, http.MethodGet, "/files/download?path="+url.QueryEscape(p), "", nil, "download "+p)
	if err != nil {
		return nil, err
	}
	f := &File{Reader: resp.Body, Size: resp.ContentLength, Name: path.Base(p), closer: resp.Body}
	if f.Size < 0 {
		resp.Body.Close()
		return nil, errf(KindInternal, CodeRuntimeError, "download %s: the agent sent no Content-Length", p)
	}
	f.ModTime, _ = http.ParseTime(resp.Header.Get("Last-Modified"))
	return f, nil
}
