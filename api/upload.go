package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// maxMetadataPart bounds one upload metadata part.
const maxMetadataPart = 64 << 10

// maxRecordedPrefix is how much of an upload body is kept to find where a
// file part's data starts: a metadata part and the file part's headers.
const maxRecordedPrefix = maxMetadataPart + 8<<10

// maxReadBuffer bounds the buffer an upload body is read through.
const maxReadBuffer = 256 << 10

// proxyTransport returns the agent transport a proxied request goes
// through. Uploads and downloads of a sandbox that runs no process (nil
// transport from FilesTransport) are served here with Docker's archive API;
// then, or on an error, it returns nil having answered (or with the error).
func (s *Server) proxyTransport(w http.ResponseWriter, r *http.Request, id string, port int, rest string) (http.RoundTripper, error) {
	upload := r.Method == http.MethodPost && rest == "/files/upload"
	download := (r.Method == http.MethodGet || r.Method == http.MethodHead) && rest == "/files/download"
	if port != lifecycle.ExecdPort || !upload && !download {
		return s.mgr.Transport(r.Context(), id)
	}
	rt, err := s.mgr.FilesTransport(r.Context(), id)
	switch {
	case err != nil || rt != nil:
		return rt, err
	case upload:
		s.handleUpload(w, r, id)
	default:
		s.handleDownload(w, r, id)
	}
	return nil, nil
}

// handleDownload streams a whole file out of a stopped sandbox. Byte
// ranges and line mode need seeking and reading inside the sandbox, which
// only its agent does: the archive API would make dockerd read everything
// before the range.
func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeMissingQuery, "query parameter path is required")
		return
	}
	if r.Header.Get("Range") != "" || q.Get("offset") != "" || q.Get("limit") != "" {
		writeError(w, r, http.StatusConflict, lifecycle.CodeNotRunning, "sandbox "+id+" is not running: byte ranges and line mode (offset, limit) are served only while it runs; download the whole file")
		return
	}
	f, err := s.mgr.OpenFile(r.Context(), id, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.Name}))
	if !f.ModTime.IsZero() {
		h.Set("Last-Modified", f.ModTime.UTC().Format(http.TimeFormat))
	}
	h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, f)
	}
}

// handleUpload implements execd's multipart upload into a stopped sandbox:
// metadata and file parts paired by index, each file streamed into it.
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request, id string) {
	media, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	boundary := params["boundary"]
	if err != nil || media != "multipart/form-data" && media != "multipart/mixed" || boundary == "" {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidFile, "upload must be multipart/form-data with a boundary")
		return
	}
	// multipart reads 4 KiB at a time: a larger buffer below it saves a
	// system call per 4 KiB of a large upload.
	buffered := bufio.NewReaderSize(r.Body, int(min(uint64(r.ContentLength), maxReadBuffer)))
	prefix := &prefixRecorder{r: buffered, limit: maxRecordedPrefix}
	mr := multipart.NewReader(prefix, boundary)

	var metas []lifecycle.FileMeta
	var early []*lifecycle.Spooled // file parts that came before their metadata
	defer func() {
		for _, f := range early {
			f.Close()
		}
	}()
	files := 0
	put := func(meta lifecycle.FileMeta, body io.Reader) bool {
		if err := s.mgr.PutFile(r.Context(), id, meta, body); err != nil {
			s.fail(w, r, err)
			return false
		}
		return true
	}
	for index := 0; ; index++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidFile, "malformed multipart body: "+err.Error())
			return
		}
		switch part.FormName() {
		case "metadata":
			var meta lifecycle.FileMeta
			buf, err := io.ReadAll(io.LimitReader(part, maxMetadataPart+1))
			if err != nil || len(buf) > maxMetadataPart || json.Unmarshal(buf, &meta) != nil {
				writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidFileMeta, fmt.Sprintf("metadata part %d is not a JSON object {path, owner, group, mode}", len(metas)))
				return
			}
			metas = append(metas, meta)
			// A file part that arrived first is written now.
			if i := len(metas) - 1; i < files {
				f := early[0]
				early = early[1:]
				ok := put(meta, f)
				f.Close()
				if !ok {
					return
				}
			}
		case "file":
			if files < len(metas) {
				var body io.Reader = part
				// A client that sent Content-Length has told us the size
				// of its last part, which lets the file stream straight
				// into the sandbox instead of being spooled first.
				if size, ok := lastPartSize(prefix.buf, boundary, r.ContentLength, index); ok {
					body = &lifecycle.Announced{Reader: part, Size: size}
				}
				if !put(metas[files], body) {
					return
				}
			} else {
				f, err := lifecycle.Spool(part)
				if err != nil {
					writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidFile, "read file part: "+err.Error())
					return
				}
				early = append(early, f)
			}
			files++
		}
		part.Close()
	}
	if len(metas) != files || files == 0 {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodeInvalidFile, fmt.Sprintf("upload needs one metadata part per file part (got %d metadata, %d files)", len(metas), files))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// prefixRecorder keeps the first limit bytes read through it.
type prefixRecorder struct {
	r     io.Reader
	limit int
	buf   []byte
}

func (p *prefixRecorder) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if room := p.limit - len(p.buf); room > 0 {
		p.buf = append(p.buf, b[:min(n, room)]...)
	}
	return n, err
}

// lastPartSize is the size of the data of part number index (from 0) of a
// multipart body of total bytes, if that part is the last one and the body
// ends the way multipart writers end it ("\r\n--boundary--\r\n"). prefix is
// the start of the body and must hold the part's headers. The result is a
// claim, not a fact: lifecycle.Announced checks it against the data.
func lastPartSize(prefix []byte, boundary string, total int64, index int) (int64, bool) {
	if boundary == "" || total <= 0 {
		return 0, false
	}
	delim := []byte("\r\n--" + boundary)
	off := 0
	for i := 0; i <= index; i++ {
		// The first delimiter may open the body, without the CRLF.
		if i == 0 && bytes.HasPrefix(prefix, delim[2:]) {
			off = len(delim) - 2
			continue
		}
		j := bytes.Index(prefix[off:], delim)
		if j < 0 {
			return 0, false
		}
		off += j + len(delim)
	}
	end := bytes.Index(prefix[off:], []byte("\r\n\r\n"))
	if end < 0 {
		return 0, false
	}
	size := total - int64(off+end+4) - int64(len(delim)+len("--\r\n"))
	return size, size >= 0
}
