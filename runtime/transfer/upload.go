package transfer

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"mime"
	"net/http"
)

// maxRecordedPrefix is how much of an upload body is kept to find where a
// file part's data starts: a metadata part and the file part's headers.
const maxRecordedPrefix = 72 << 10

// maxReadBuffer bounds the buffer an upload body is read through.
const maxReadBuffer = 256 << 10

// Sink is where the files of an upload go.
type Sink interface {
	// Put writes one file: content is its part as it arrives, a *Spooled
	// (a part that came before its metadata) or, for a SizedSink, an
	// *Announced (the last part, whose size the request tells).
	Put(ctx context.Context, meta Meta, content io.Reader) error
}

// SizedSink is a Sink that needs each file's size before its data (a tar
// header does): Upload announces the last part's size where the request's
// Content-Length tells it, so that it can stream instead of being
// spooled, and spools early parts with the sink's Spooler.
type SizedSink interface {
	Sink
	Spooler() Spooler
}

// Upload reads the execd upload form of r and hands each file to sink as
// it arrives, with ReadUpload, so that every path accepts and refuses the
// same forms. A malformed form is an *Error; the sink's errors are
// returned as they are.
func Upload(ctx context.Context, r *http.Request, sink Sink) error {
	// multipart reads 4 KiB at a time: a larger buffer below it saves a
	// system call per 4 KiB of a large upload.
	buffered := bufio.NewReaderSize(r.Body, int(min(uint64(r.ContentLength), maxReadBuffer)))
	sized, isSized := sink.(SizedSink)
	if !isSized {
		r.Body = io.NopCloser(buffered)
		return ReadUpload(r, Spooler{}, func(meta Meta, _ int, content io.Reader) error {
			return sink.Put(ctx, meta, content)
		})
	}
	_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	boundary, total := params["boundary"], r.ContentLength
	prefix := &prefixRecorder{r: buffered, limit: maxRecordedPrefix}
	r.Body = io.NopCloser(prefix)
	return ReadUpload(r, sized.Spooler(), func(meta Meta, part int, content io.Reader) error {
		// A part spooled before its metadata came has its size known, and
		// was not the last part.
		if _, spooled := content.(*Spooled); !spooled {
			if size, ok := lastPartSize(prefix.buf, boundary, total, part); ok {
				content = &Announced{Reader: content, Size: size}
			}
		}
		return sink.Put(ctx, meta, content)
	})
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
