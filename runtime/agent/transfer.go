//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// upload serves POST /files/upload, writing each file as it arrives.
func (s *server) upload(w http.ResponseWriter, r *http.Request) {
	err := transfer.ReadUpload(r, transfer.Spooler{Dir: s.opts.TempDir}, func(meta transfer.Meta, _ int, content io.Reader) error {
		if uerr := s.writeUpload(meta, content); uerr != nil {
			return uerr
		}
		return nil
	})
	var uerr *transfer.Error
	switch {
	case errors.As(err, &uerr):
		writeError(w, uerr.Status, uerr.Code, uerr.Message)
	case err != nil:
		writeError(w, http.StatusInternalServerError, codeRuntimeError, err.Error())
	}
}

// writeUpload writes src to meta.Path, creating parents, and replaces the
// path atomically: the data goes to a temp file in the same directory,
// which gets its mode and owner, then is renamed over the path (not
// fsynced: a sync costs more than the rest of a small upload, and Docker's
// archive API, which this path replaced, never synced either). A
// reader never sees half a file, and a symlink at the path is replaced,
// not followed: the new file has the default mode 0644 (not the link's
// 0777), and the link's target is left alone. An existing regular file
// keeps its mode and owner unless the metadata sets them.
func (s *server) writeUpload(meta transfer.Meta, src io.Reader) *transfer.Error {
	up, uerr := s.startUpload(meta)
	if uerr != nil {
		return uerr
	}
	defer up.abort()
	if _, err := transfer.CopyFilled(up.tmp, src); err != nil {
		return runtimeError("error writing file %s: %v", up.path, err)
	}
	return up.finish()
}

func runtimeError(format string, args ...any) *transfer.Error {
	return &transfer.Error{Status: http.StatusInternalServerError, Code: codeRuntimeError, Message: fmt.Sprintf(format, args...)}
}

// pendingUpload is an upload's temp file, waiting for its data.
type pendingUpload struct {
	meta     transfer.Meta
	path     string
	tmp      *os.File
	mode     fs.FileMode
	uid, gid int
	done     bool
}

// startUpload checks meta, creates the parents and the temp file.
func (s *server) startUpload(meta transfer.Meta) (*pendingUpload, *transfer.Error) {
	p, err := absPath(meta.Path)
	if err != nil {
		return nil, &transfer.Error{Status: http.StatusBadRequest, Code: codeInvalidFileMetadata, Message: err.Error()}
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, runtimeError("error creating target directory: %v", err)
	}
	up := &pendingUpload{meta: meta, path: p, mode: 0o644, uid: -1, gid: -1}
	if fi, err := os.Lstat(p); err == nil {
		switch {
		case fi.IsDir():
			return nil, &transfer.Error{Status: http.StatusBadRequest, Code: codeInvalidFileMetadata, Message: p + " is a directory"}
		case fi.Mode().IsRegular():
			up.mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				up.uid, up.gid = int(st.Uid), int(st.Gid)
			}
		}
	}
	if meta.Mode != 0 {
		up.mode, _ = fileMode(meta.Mode) // checked by parseUploadMeta
	}
	if u, g := s.owner(p, meta.Permission); u != -1 || g != -1 {
		up.uid, up.gid = u, g
	}
	if up.tmp, err = os.CreateTemp(dir, ".sandboxd-upload-*"); err != nil {
		return nil, runtimeError("error opening destination file %s: %v", p, err)
	}
	return up, nil
}

// abort removes the temp file unless the upload finished.
func (up *pendingUpload) abort() {
	up.tmp.Close()
	if !up.done {
		os.Remove(up.tmp.Name())
	}
}

// finish gives the written temp file its owner and mode and renames it
// over the path.
func (up *pendingUpload) finish() *transfer.Error {
	p, tmp := up.path, up.tmp
	// Owner first: a chown clears setuid and setgid bits.
	if up.uid != -1 || up.gid != -1 {
		if err := tmp.Chown(up.uid, up.gid); err != nil && (up.meta.Owner != "" || up.meta.Group != "") {
			return runtimeError("error setting permissions of %s: %v", p, err)
		}
	}
	if err := tmp.Chmod(up.mode); err != nil {
		return runtimeError("error setting permissions of %s: %v", p, err)
	}
	if err := tmp.Close(); err != nil {
		return runtimeError("error writing file %s: %v", p, err)
	}
	err := os.Rename(tmp.Name(), p)
	if errors.Is(err, syscall.EBUSY) {
		// p is a mount point (Docker's /etc/hosts, a bind-mounted file):
		// it can only be written in place.
		err = overwrite(p, tmp.Name())
	} else {
		up.done = err == nil
	}
	if err != nil {
		return runtimeError("error writing file %s: %v", p, err)
	}
	return nil
}

// uploadByFd serves UploadRoute on a bulk connection (bulk.go): it starts
// the upload of the file its query's meta describes (as JSON, like a
// metadata part), passes the temp file's
// descriptor to sandboxd, which writes the data into it, and finishes the
// upload once sandboxd's request body says "done" (anything else, or the
// connection's end, leaves the path as it was).
func (s *server) uploadByFd(w http.ResponseWriter, r *http.Request) {
	raw := rawConn(r.Context())
	if raw == nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, UploadRoute+" is served on bulk connections only")
		return
	}
	// sandboxd sends the body only with a descriptor in hand: an error is
	// answered without waiting for it (then sandboxd closes the connection).
	_ = http.NewResponseController(w).EnableFullDuplex()
	meta, uerr := transfer.ParseMeta([]byte(r.URL.Query().Get("meta")))
	if uerr == nil {
		var up *pendingUpload
		if up, uerr = s.startUpload(meta); uerr == nil {
			defer up.abort()
			if err := sendFd(raw, up.tmp); err != nil {
				return
			}
			verdict, err := io.ReadAll(io.LimitReader(r.Body, int64(len(uploadDone))+1))
			if err != nil || string(verdict) != uploadDone {
				return
			}
			uerr = up.finish()
		}
	}
	if uerr != nil {
		writeError(w, uerr.Status, uerr.Code, uerr.Message)
	}
}

// overwrite copies the finished temp file into p in place, without
// following a symlink at p.
func overwrite(p, tmp string) error {
	src, err := os.Open(tmp)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	if _, err := transfer.CopyFilled(f, src); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// download serves GET /files/download?path=: the file's bytes, with the
// first range of a Range header served by seeking, or with offset and limit
// the selected lines (execd 1.0.19's line mode). A directory or other
// non-regular file is refused up front rather than failing halfway through
// the body.
func (s *server) download(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'path'")
		return
	}
	lineMode := q.Get("offset") != "" || q.Get("limit") != ""
	if lineMode && r.Header.Get("Range") != "" {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "line-based reading (offset/limit) and byte range (Range header) are mutually exclusive")
		return
	}
	abs, err := absPath(p)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidFile, err.Error())
		return
	}
	// Stat before opening: opening a FIFO would block.
	fi, err := os.Stat(abs)
	if err == nil && !fi.Mode().IsRegular() {
		kind := "not a regular file"
		if fi.IsDir() {
			kind = "a directory"
		}
		writeError(w, http.StatusBadRequest, codeInvalidFile, fmt.Sprintf("path is %s: %s", kind, p))
		return
	}
	var f *os.File
	if err == nil {
		f, err = os.Open(abs)
	}
	if err != nil {
		fileError(w, fmt.Errorf("open %s: %w", p, err))
		return
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		fileError(w, err)
		return
	}
	if !fi.Mode().IsRegular() {
		writeError(w, http.StatusBadRequest, codeInvalidFile, "path is not a regular file: "+p)
		return
	}
	if lineMode {
		serveLines(w, r, f)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", contentDisposition(filepath.Base(abs)))
	h.Set("Accept-Ranges", "bytes")
	h.Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	size := fi.Size()
	start, length, partial, ok := parseRange(r.Header.Get("Range"), size)
	if !ok {
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		writeError(w, http.StatusRequestedRangeNotSatisfiable, codeInvalidFile, "requested range not satisfiable")
		return
	}
	status := http.StatusOK
	if partial {
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			fileError(w, err)
			return
		}
		status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, start+length-1, size))
	}
	raw := rawConn(r.Context())
	if raw != nil && r.Method == http.MethodGet && r.Header.Get(FdHeader) != "" {
		// sandboxd asked for the open file itself (bulk.go).
		h.Set(FdHeader, strconv.FormatInt(start, 10)+" "+strconv.FormatInt(length, 10))
		h.Set("Content-Length", "0")
		if err := sendFd(raw, f); err == nil {
			w.WriteHeader(status)
		}
		return
	}
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		// The file may change meanwhile: never send more than announced.
		if raw != nil {
			// The kernel sends the file (http's ReadFrom: sendfile).
			_, _ = io.Copy(w, io.LimitReader(f, length))
			return
		}
		// Whole buffers make fewer, larger yamux frames on the way out.
		buf, release := transfer.Buffer()
		_, _ = io.CopyBuffer(struct{ io.Writer }{w}, io.LimitReader(f, length), buf)
		release()
	}
}

// parseRange interprets the first range of a Range header against size.
// It returns partial=false for no (or an ignorable) header, ok=false when
// the range cannot be satisfied.
func parseRange(h string, size int64) (start, length int64, partial, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if h == "" || !found {
		return 0, size, false, true
	}
	spec, _, _ = strings.Cut(spec, ",")
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false, false
	}
	switch {
	case a == "": // suffix: the last b bytes
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 || size == 0 {
			return 0, 0, false, false
		}
		n = min(n, size)
		return size - n, n, true, true
	default:
		first, err := strconv.ParseInt(a, 10, 64)
		if err != nil || first < 0 || first >= size {
			return 0, 0, false, false
		}
		last := size - 1
		if b != "" {
			l, err := strconv.ParseInt(b, 10, 64)
			if err != nil || l < first {
				return 0, 0, false, false
			}
			last = min(l, size-1)
		}
		return first, last - first + 1, true, true
	}
}

// serveLines answers line mode: lines offset (1-based, default 1) to
// offset+limit-1 (default: to the end), each without its trailing run of
// \r and \n, joined with \n, with no newline at the end. The parameters
// are checked only once the file is open, as execd does.
func serveLines(w http.ResponseWriter, r *http.Request, f io.Reader) {
	q := r.URL.Query()
	param := func(name string) (int64, bool) {
		v := q.Get(name)
		if v == "" {
			return 0, true
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("invalid query parameter '%s': %s", name, v))
			return 0, false
		}
		return n, true
	}
	offset, ok := param("offset")
	if !ok {
		return
	}
	limit, ok := param("limit")
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_ = writeLines(w, f, max(offset, 1), limit)
	}
}

// writeLines writes the selected lines of src to w (limit 0: all), reading
// a line at a time through a fixed buffer, so a long line costs no memory.
func writeLines(w io.Writer, src io.Reader, offset, limit int64) error {
	if limit > math.MaxInt64-offset {
		limit = 0 // past any file's last line; offset+limit would overflow
	}
	br := bufio.NewReaderSize(src, 64<<10)
	line := int64(1)
	inLine := false // the current line continues past the buffer
	heldCR := 0     // \r at the end of a piece: dropped if the line ends there
	for limit == 0 || line < offset+limit {
		piece, err := br.ReadSlice('\n')
		more := errors.Is(err, bufio.ErrBufferFull)
		if err != nil && !more && !errors.Is(err, io.EOF) {
			return err
		}
		if len(piece) == 0 && !inLine {
			return nil // the end of the file, after a whole line
		}
		if line >= offset {
			if !inLine && line > offset {
				if _, werr := w.Write([]byte{'\n'}); werr != nil {
					return werr
				}
			}
			cut := "\r\n"
			if more {
				cut = "\r"
			}
			text := bytes.TrimRight(piece, cut)
			if len(text) > 0 {
				if heldCR > 0 {
					if _, werr := w.Write(bytes.Repeat([]byte{'\r'}, heldCR)); werr != nil {
						return werr
					}
				}
				if _, werr := w.Write(text); werr != nil {
					return werr
				}
				heldCR = 0
			}
			if more {
				heldCR += len(piece) - len(text)
			} else {
				heldCR = 0
			}
		}
		inLine = more
		if !more {
			line++
		}
		if err != nil && !more {
			return nil
		}
	}
	return nil
}

// contentDisposition names the download, with RFC 5987 encoding for
// non-ASCII names.
func contentDisposition(name string) string {
	for _, c := range []byte(name) {
		if c >= 0x80 {
			enc := url.PathEscape(name)
			return `attachment; filename="` + enc + `"; filename*=UTF-8''` + enc
		}
	}
	return `attachment; filename="` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name) + `"`
}
