//go:build linux

package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

const maxUploadMetadata = 1 << 20

// httpError is an error answer decided deep inside a handler.
type httpError struct {
	status        int
	code, message string
}

type uploadMeta struct {
	Path string `json:"path"`
	permission
}

// upload serves POST /files/upload: multipart/form-data whose "metadata"
// and "file" parts are both file parts (they carry a filename), paired by
// index. Parts are streamed to disk as they arrive; a file part that comes
// before its metadata is spooled until the metadata arrives.
func (s *server) upload(w http.ResponseWriter, r *http.Request) {
	if herr := s.receiveUpload(r); herr != nil {
		writeError(w, herr.status, herr.code, herr.message)
	}
}

func (s *server) receiveUpload(r *http.Request) *httpError {
	mr, err := r.MultipartReader()
	if err != nil {
		return &httpError{http.StatusBadRequest, codeInvalidFile, "multipart form is empty: " + err.Error()}
	}
	buf := make([]byte, 256<<10)
	var metas []uploadMeta
	spooled := map[int]*spool{}
	defer func() {
		for _, sp := range spooled {
			sp.release()
		}
	}()
	files := 0
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return &httpError{http.StatusBadRequest, codeInvalidFile, "error reading multipart form: " + err.Error()}
		}
		if part.FileName() == "" {
			continue // like execd, only file parts count
		}
		switch part.FormName() {
		case "metadata":
			meta, herr := readUploadMeta(part)
			if herr != nil {
				return herr
			}
			metas = append(metas, meta)
			if sp := spooled[len(metas)-1]; sp != nil {
				delete(spooled, len(metas)-1)
				herr := s.writeUpload(meta, sp.reader(), buf)
				sp.release()
				if herr != nil {
					return herr
				}
			}
		case "file":
			i := files
			files++
			if i < len(metas) {
				if herr := s.writeUpload(metas[i], part, buf); herr != nil {
					return herr
				}
				continue
			}
			sp, err := s.spoolPart(part, buf)
			if err != nil {
				return &httpError{http.StatusInternalServerError, codeRuntimeError, "error buffering file part: " + err.Error()}
			}
			spooled[i] = sp
		}
	}
	switch {
	case len(metas) == 0:
		return &httpError{http.StatusBadRequest, codeInvalidFileMetadata, "metadata file is missing"}
	case files == 0:
		return &httpError{http.StatusBadRequest, codeInvalidFileContent, "file is missing"}
	case len(metas) != files:
		return &httpError{http.StatusBadRequest, codeInvalidFile, fmt.Sprintf("metadata and file count mismatch: %d vs %d", len(metas), files)}
	}
	return nil
}

func readUploadMeta(part io.Reader) (uploadMeta, *httpError) {
	var meta uploadMeta
	b, err := io.ReadAll(io.LimitReader(part, maxUploadMetadata+1))
	switch {
	case err != nil:
		return meta, &httpError{http.StatusBadRequest, codeInvalidFileMetadata, "error reading metadata: " + err.Error()}
	case len(b) > maxUploadMetadata:
		return meta, &httpError{http.StatusBadRequest, codeInvalidFileMetadata, "metadata is too large"}
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return meta, &httpError{http.StatusBadRequest, codeInvalidFileMetadata, "invalid metadata format: " + err.Error()}
	}
	if meta.Path == "" {
		return meta, &httpError{http.StatusBadRequest, codeInvalidFileMetadata, "metadata path is empty"}
	}
	if meta.Mode != 0 {
		if _, err := parseOctalDigits(meta.Mode); err != nil {
			return meta, &httpError{http.StatusBadRequest, codeInvalidFileMetadata, err.Error()}
		}
	}
	return meta, nil
}

// writeUpload writes src to meta.Path (truncating, creating parents),
// syncs it and applies the permission.
func (s *server) writeUpload(meta uploadMeta, src io.Reader, buf []byte) *httpError {
	runtimeErr := func(format string, args ...any) *httpError {
		return &httpError{http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf(format, args...)}
	}
	p, err := absPath(meta.Path)
	if err != nil {
		return &httpError{http.StatusBadRequest, codeInvalidFileMetadata, err.Error()}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return runtimeErr("error creating target directory: %v", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return runtimeErr("error opening destination file %s: %v", p, err)
	}
	if _, err := io.CopyBuffer(f, src, buf); err != nil {
		f.Close()
		return runtimeErr("error writing file %s: %v", p, err)
	}
	if err := f.Sync(); err != nil {
		s.log.Warn("upload fsync failed", "path", p, "err", err)
	}
	if err := f.Close(); err != nil {
		return runtimeErr("error writing file %s: %v", p, err)
	}
	if err := s.applyPermission(p, meta.permission); err != nil {
		return runtimeErr("error setting permissions of %s: %v", p, err)
	}
	return nil
}

// spool holds a file part until its metadata arrives: in a temp file, or
// in memory if no temp file can be made.
type spool struct {
	file *os.File
	mem  *bytes.Buffer
}

func (s *server) spoolPart(part io.Reader, buf []byte) (*spool, error) {
	f, err := os.CreateTemp(s.opts.TempDir, "sandboxd-upload-*")
	if err != nil {
		var mem bytes.Buffer
		if _, err := io.CopyBuffer(&mem, part, buf); err != nil {
			return nil, err
		}
		return &spool{mem: &mem}, nil
	}
	os.Remove(f.Name()) // the open file is enough
	if _, err := io.CopyBuffer(f, part, buf); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return &spool{file: f}, nil
}

func (sp *spool) reader() io.Reader {
	if sp.file != nil {
		return sp.file
	}
	return sp.mem
}

func (sp *spool) release() {
	if sp.file != nil {
		sp.file.Close()
	}
}

// download serves GET /files/download?path=: the file's bytes, with Range
// support. A directory or other non-regular file is refused up front rather
// than failing halfway through the body.
func (s *server) download(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'path'")
		return
	}
	abs, err := absPath(p)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	// Stat before opening: opening a FIFO would block.
	fi, err := os.Stat(abs)
	if err == nil && !fi.Mode().IsRegular() {
		kind := "not a regular file"
		if fi.IsDir() {
			kind = "a directory"
		}
		writeError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("path is %s: %s", kind, p))
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
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "path is not a regular file: "+p)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", contentDisposition(filepath.Base(abs)))
	http.ServeContent(w, r, "", fi.ModTime(), f)
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
