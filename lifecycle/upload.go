package lifecycle

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/agent"
)

// maxRecordedPrefix is how much of an upload body is kept to find where a
// file part's data starts: a metadata part and the file part's headers.
const maxRecordedPrefix = 72 << 10

// maxReadBuffer bounds the buffer an upload body is read through.
const maxReadBuffer = 256 << 10

// PutUpload writes the files of an execd upload form, the body of r, into
// sandbox id, one by one as they arrive: through fw, the writer FileWriter
// found on the sandbox's files transport, or, when fw is nil (a stopped
// sandbox), with Docker's archive API. The form is read here, by the
// agent's parser, the one parser of uploads (the agent uses it too, when a
// transport that cannot write files passes it the form), so every path
// accepts and refuses the same forms.
func (f *Files) PutUpload(ctx context.Context, id string, r *http.Request, fw runtime.FileWriter) error {
	var sink fileSink = &archiveSink{files: f, id: id}
	if fw != nil {
		sink = agentSink{fw}
	}
	// multipart reads 4 KiB at a time: a larger buffer below it saves a
	// system call per 4 KiB of a large upload.
	buffered := bufio.NewReaderSize(r.Body, int(min(uint64(r.ContentLength), maxReadBuffer)))
	sink.start(r, buffered)
	err := agent.ReadUpload(r, f.spooler, func(meta agent.UploadMeta, part int, content io.Reader) error {
		return sink.put(ctx, meta, part, content)
	})
	var uerr *agent.UploadError
	if errors.As(err, &uerr) {
		return uploadError(uerr)
	}
	return err
}

// FileWriter returns the writer of rt, a sandbox's files transport, when
// it writes an upload's files itself (then the api hands it the upload,
// PutUpload); nil when the agent reads the form.
func (f *Files) FileWriter(rt http.RoundTripper) runtime.FileWriter {
	if bulk := f.rt.Features().BulkFiles; bulk != nil && rt != nil {
		return bulk.FileWriter(rt)
	}
	return nil
}

func uploadError(uerr *agent.UploadError) error {
	kind := KindInvalid
	switch {
	case uerr.Status >= 500:
		kind = KindInternal
	case uerr.Status == http.StatusRequestEntityTooLarge:
		kind = KindTooLarge
	}
	return &Error{Kind: kind, Code: uerr.Code, Message: uerr.Message}
}

// fileSink is where the files of an upload go: the sandbox's agent, or
// Docker's archive API.
type fileSink interface {
	// start sees the request before its form is read; body is what the
	// form will be read from (and r.Body afterwards).
	start(r *http.Request, body io.Reader)
	// put writes one file, the index-th part of the form.
	put(ctx context.Context, meta agent.UploadMeta, index int, content io.Reader) error
}

// agentSink writes each file through the agent, which is given its data
// as it arrives, whatever its size: nothing is spooled.
type agentSink struct{ fw runtime.FileWriter }

func (agentSink) start(r *http.Request, body io.Reader) { r.Body = io.NopCloser(body) }

func (s agentSink) put(ctx context.Context, meta agent.UploadMeta, _ int, content io.Reader) error {
	src := &readErr{r: content}
	err := s.fw.WriteFile(ctx, runtime.FileMeta{Path: meta.Path, Owner: meta.Owner, Group: meta.Group, Mode: meta.Mode}, src)
	var uerr *agent.UploadError
	switch {
	case err == nil:
		return nil
	case src.err != nil:
		return &Error{Kind: KindInvalid, Code: CodeInvalidFile, Message: "read upload of " + meta.Path, Err: src.err}
	case errors.As(err, &uerr):
		return uploadError(uerr)
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
// header needs the file's size up front: when the client sent a
// Content-Length it tells the size of the last part, which then streams
// straight into the sandbox instead of being spooled first. A part that
// came before its metadata was spooled already, and is spooled only once.
type archiveSink struct {
	files    *Files
	id       string
	boundary string
	total    int64
	prefix   *prefixRecorder
}

func (s *archiveSink) start(r *http.Request, body io.Reader) {
	_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	s.boundary, s.total = params["boundary"], r.ContentLength
	s.prefix = &prefixRecorder{r: body, limit: maxRecordedPrefix}
	r.Body = io.NopCloser(s.prefix)
}

func (s *archiveSink) put(ctx context.Context, meta agent.UploadMeta, index int, content io.Reader) error {
	fm := FileMeta{Path: meta.Path, Mode: meta.Mode, Owner: nonEmpty(meta.Owner), Group: nonEmpty(meta.Group)}
	// A part spooled before its metadata came has its size known, and
	// was not the last part.
	if _, spooled := content.(*agent.Spooled); !spooled {
		if size, ok := lastPartSize(s.prefix.buf, s.boundary, s.total, index); ok {
			content = &Announced{Reader: content, Size: size}
		}
	}
	return s.files.PutFile(ctx, s.id, fm, content)
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
