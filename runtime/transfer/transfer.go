// Package transfer is the one owner of moving files between a client and a
// sandbox: it reads execd's upload form, spools what must be held, checks
// announced sizes, hands each file to a sink, and says which paths and
// modes are valid, with one error vocabulary (execd's codes). sandboxd's
// api uses it for uploads that sandboxd reads itself, the agent for those
// it reads; lifecycle only decides which sink a sandbox allows now.
//
// It links only the standard library (and runtime's FileWriter), so that
// the agent stays small.
package transfer

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
)

// execd's error codes of file transfers (reference §2.1).
const (
	CodeMissingQuery        = "MISSING_QUERY"
	CodeRuntimeError        = "RUNTIME_ERROR"
	CodeInvalidFile         = "INVALID_FILE"
	CodeInvalidFileContent  = "INVALID_FILE_CONTENT"
	CodeInvalidFileMetadata = "INVALID_FILE_METADATA"
	CodeFileNotFound        = "FILE_NOT_FOUND"
)

// Error is a transfer refused or failed: the status and execd error code
// to answer with.
type Error struct {
	Status        int
	Code, Message string
}

func (e *Error) Error() string { return e.Message }

// Permission is execd's Permission: mode as octal digits (755 → 0755, 0
// leaves the mode alone), owner and group as names or numeric ids.
type Permission struct {
	Owner string `json:"owner"`
	Group string `json:"group"`
	Mode  int    `json:"mode"`
}

// Meta is the metadata part of one uploaded file.
type Meta struct {
	Path string `json:"path"`
	Permission
}

// maxMetadata bounds one metadata part.
const maxMetadata = 1 << 20

func readMeta(part io.Reader) (Meta, *Error) {
	b, err := io.ReadAll(io.LimitReader(part, maxMetadata+1))
	switch {
	case err != nil:
		return Meta{}, &Error{http.StatusBadRequest, CodeInvalidFileMetadata, "error reading metadata: " + err.Error()}
	case len(b) > maxMetadata:
		return Meta{}, &Error{http.StatusBadRequest, CodeInvalidFileMetadata, "metadata is too large"}
	}
	return ParseMeta(b)
}

// ParseMeta decodes and checks one file's metadata.
func ParseMeta(b []byte) (Meta, *Error) {
	var meta Meta
	if err := json.Unmarshal(b, &meta); err != nil {
		return meta, &Error{http.StatusBadRequest, CodeInvalidFileMetadata, "invalid metadata format: " + err.Error()}
	}
	if meta.Path == "" {
		return meta, &Error{http.StatusBadRequest, CodeInvalidFileMetadata, "metadata path is empty"}
	}
	if meta.Mode != 0 {
		if _, err := ParseMode(meta.Mode); err != nil {
			return meta, &Error{http.StatusBadRequest, CodeInvalidFileMetadata, err.Error()}
		}
	}
	return meta, nil
}

// ParseMode reads execd's mode, octal digits written as a decimal number
// (755 → 0755), into permission bits: setuid, setgid and sticky are
// 0o4000, 0o2000 and 0o1000, as in a tar header or chmod(2).
func ParseMode(n int) (fs.FileMode, error) {
	m, err := strconv.ParseUint(strconv.Itoa(n), 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("invalid mode %d: want octal digits such as 644", n)
	}
	return fs.FileMode(m), nil
}

// Path rules of sandboxd's own transfers (a stopped sandbox's, through
// the archive API). The agent resolves paths inside the sandbox as execd
// does (~ and $VAR expanded, relative to its directory); here, with no
// process to ask, a path must be absolute.

// CleanPath checks that p is an absolute in-sandbox path and cleans it.
// code is the error code of the request's context: execd answers a bad
// path in a query with INVALID_FILE, in an upload's metadata with
// INVALID_FILE_METADATA (see UploadPath).
func CleanPath(p, code string) (string, *Error) {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "\x00") {
		return "", &Error{http.StatusBadRequest, code, fmt.Sprintf("path %q must be absolute", p)}
	}
	return path.Clean(p), nil
}

// UploadPath checks the path of an uploaded file: CleanPath, and not the
// root directory.
func UploadPath(p string) (string, *Error) {
	c, err := CleanPath(p, CodeInvalidFileMetadata)
	if err == nil && c == "/" {
		err = &Error{http.StatusBadRequest, CodeInvalidFileMetadata, fmt.Sprintf("path %q names the root directory, not a file", p)}
	}
	return c, err
}

// bufferSize is the unit in which uploads are written: a multipart part
// yields at most 4 KiB per read, and each read written as it comes would
// cost a system call per 4 KiB.
const bufferSize = 256 << 10

var buffers = sync.Pool{New: func() any { b := make([]byte, bufferSize); return &b }}

// Buffer lends a transfer buffer of bufferSize bytes; give it back with
// its release.
func Buffer() (buf []byte, release func()) {
	bp := buffers.Get().(*[]byte)
	return *bp, func() { buffers.Put(bp) }
}

// CopyFilled copies src to dst in writes of a whole buffer (a pooled one,
// so memory per transfer is bounded and reused).
func CopyFilled(dst io.Writer, src io.Reader) (int64, error) {
	buf, release := Buffer()
	defer release()
	var total int64
	for {
		// Not io.ReadFull: it reports a short last read as
		// io.ErrUnexpectedEOF, which is also what a multipart part says
		// when the client went away mid-file.
		n, err := 0, error(nil)
		for n < len(buf) && err == nil {
			var m int
			m, err = src.Read(buf[n:])
			n += m
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		switch {
		case err == io.EOF:
			return total, nil
		case err != nil:
			return total, err
		}
	}
}
