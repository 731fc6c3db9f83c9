package lifecycle

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/sandboxd/sandboxd/runtime/agent"
)

// maxRecordedPrefix is how much of an upload body is kept to find where a
// file part's data starts: a metadata part and the file part's headers.
const maxRecordedPrefix = 72 << 10

// maxReadBuffer bounds the buffer an upload body is read through.
const maxReadBuffer = 256 << 10

// PutUpload writes the files of an execd upload form, the body of r, into
// a stopped sandbox (see FilesTransport) with PutFile. The form is read by
// the agent's own parser, so both paths accept and refuse the same forms.
func (m *Manager) PutUpload(ctx context.Context, id string, r *http.Request) error {
	_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	boundary := params["boundary"]
	// multipart reads 4 KiB at a time: a larger buffer below it saves a
	// system call per 4 KiB of a large upload.
	buffered := bufio.NewReaderSize(r.Body, int(min(uint64(r.ContentLength), maxReadBuffer)))
	prefix := &prefixRecorder{r: buffered, limit: maxRecordedPrefix}
	r.Body = io.NopCloser(prefix)
	err := agent.ReadUpload(r, "", func(meta agent.UploadMeta, part int, content io.Reader) error {
		fm := FileMeta{Path: meta.Path, Mode: meta.Mode, Owner: nonEmpty(meta.Owner), Group: nonEmpty(meta.Group)}
		// A client that sent Content-Length has told us the size of its
		// last part, which lets the file stream straight into the sandbox
		// instead of being spooled first.
		if size, ok := lastPartSize(prefix.buf, boundary, r.ContentLength, part); ok {
			content = &Announced{Reader: content, Size: size}
		}
		return m.PutFile(ctx, id, fm, content)
	})
	var uerr *agent.UploadError
	if errors.As(err, &uerr) {
		kind := KindInvalid
		if uerr.Status >= 500 {
			kind = KindInternal
		}
		return &Error{Kind: kind, Code: uerr.Code, Message: uerr.Message}
	}
	return err
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
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
// claim, not a fact: Announced checks it against the data.
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
