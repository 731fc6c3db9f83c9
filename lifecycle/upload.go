package lifecycle

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/transfer"
)

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
