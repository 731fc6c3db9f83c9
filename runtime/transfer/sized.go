package transfer

import (
	"errors"
	"io"
)

// Announced is an upload whose size the client announced but that is not
// checked yet (Upload derives it from the request's Content-Length). It
// is streamed as it arrives, and kept in a temp file meanwhile: if its
// real size differs, it is written again from that copy (PutSized).
type Announced struct {
	io.Reader
	Size int64
}

// BodyError is a failure to read the client's upload, as opposed to a
// failure to write it into the sandbox.
type BodyError struct{ Err error }

func (e *BodyError) Error() string { return "read upload: " + e.Err.Error() }

// errSizeMismatch says an announced upload was not of the announced size.
var errSizeMismatch = errors.New("upload size differs from the announced size")

// PutSized hands content to put with its size, for a writer that needs
// the size before the data (a tar header does): a *Spooled as it is; an
// *Announced of more than inMemory bytes as it arrives, written again
// from a copy if it was not of its size; anything else spooled with sp
// first (up to inMemory bytes in memory). put is given a reader of
// exactly size bytes; a failure to read the upload (a *BodyError) is
// returned over put's error, which is only its consequence.
func PutSized(content io.Reader, sp Spooler, inMemory int64, put func(size int64, body io.Reader) error) error {
	if a, ok := content.(*Announced); ok && a.Size > inMemory {
		return putAnnounced(a, sp, put)
	}
	body, spooled := content.(*Spooled)
	if !spooled {
		var err error
		if body, err = sp.Spool(content, inMemory); err != nil {
			return &BodyError{err}
		}
		defer body.Close()
	}
	return putExact(body.Size, body, put)
}

// putExact calls put with body, checked to hold exactly size bytes.
func putExact(size int64, body io.Reader, put func(int64, io.Reader) error) error {
	src := &exactReader{r: body, left: size}
	err := put(size, src)
	if src.err != nil {
		return src.err
	}
	return err
}

// putAnnounced streams an announced upload, falling back to spooling it
// when the announcement was wrong.
func putAnnounced(a *Announced, sp Spooler, put func(int64, io.Reader) error) error {
	copied, err := sp.File()
	if err != nil {
		return err
	}
	defer copied.Close()
	err = putExact(a.Size, io.TeeReader(fullReader{a.Reader}, copied), put)
	if !errors.Is(err, errSizeMismatch) {
		return err
	}
	// The copy holds all that was read; the rest of the upload joins it.
	if _, err := io.Copy(copied, a.Reader); err != nil {
		return &BodyError{err}
	}
	if err := copied.Rewind(); err != nil {
		return err
	}
	return putExact(copied.Size, copied, put)
}

// fullReader fills every read it can: a multipart part yields a few KiB
// per read, and passed on like that each would cost a write to the copy
// and a chunk of its own in the request to the engine.
type fullReader struct{ r io.Reader }

func (f fullReader) Read(p []byte) (n int, err error) {
	for n < len(p) && err == nil {
		var m int
		m, err = f.r.Read(p[n:])
		n += m
	}
	return n, err
}

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
			return 0, &BodyError{err}
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
		return n, &BodyError{err}
	}
	return n, nil
}
