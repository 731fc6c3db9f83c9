package transfer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// Spooler says where content is spooled. The zero value spools to
// os.TempDir().
type Spooler struct {
	// Dir holds the temp files; "" is os.TempDir().
	Dir string
	// CreateTemp makes each temp file; nil is os.CreateTemp. Tests count
	// spools with it.
	CreateTemp func(dir, pattern string) (*os.File, error)
}

// Spooled is content held whole, so that its size is known (a tar header
// needs it up front) or until it can be used (a file part that comes
// before its metadata): in memory, or in a temp file. Whoever spooled it
// closes it; a consumer that finds content is a *Spooled uses it as it is.
type Spooled struct {
	io.Reader
	Size int64
	file *os.File
	name string // the temp file's name, until it is removed
}

// Spool reads r to its end: up to inMemory bytes into memory (a buffer
// that grows with the data, so small content costs little), more into a
// temp file.
func (s Spooler) Spool(r io.Reader, inMemory int64) (*Spooled, error) {
	return s.spool(r, inMemory, nil)
}

// spool is Spool, and where no temp file can be made, holds the content in
// memory instead as long as it fits in *spare (nil: no memory), which it
// takes from; beyond, the content is refused with a 413, read no further.
func (s Spooler) spool(r io.Reader, inMemory int64, spare *int64) (*Spooled, error) {
	var buf bytes.Buffer
	n, err := io.CopyN(&buf, r, inMemory+1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if n <= inMemory {
		return &Spooled{Reader: &buf, Size: n}, nil
	}
	sp, err := s.File()
	if err != nil && spare != nil {
		if _, err := io.Copy(&buf, io.LimitReader(r, *spare+1-int64(buf.Len()))); err != nil {
			return nil, err
		}
		if int64(buf.Len()) > *spare {
			return nil, &Error{http.StatusRequestEntityTooLarge, CodeInvalidFile, fmt.Sprintf(
				"file parts before their metadata are held until it arrives, and no temp file can be made (%v): send each metadata part first, or keep such parts under %d bytes in all", err, maxMemorySpool)}
		}
		*spare -= int64(buf.Len())
		return &Spooled{Reader: &buf, Size: int64(buf.Len())}, nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := CopyFilled(sp, io.MultiReader(&buf, r)); err != nil {
		sp.Close()
		return nil, err
	}
	if err := sp.Rewind(); err != nil {
		sp.Close()
		return nil, err
	}
	return sp, nil
}

// File returns an empty Spooled in a temp file, to fill with Write and
// then Rewind before it is read.
func (s Spooler) File() (*Spooled, error) {
	create := s.CreateTemp
	if create == nil {
		create = os.CreateTemp
	}
	f, err := create(s.Dir, "sandboxd-upload-*")
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	sp := &Spooled{Reader: f, file: f}
	// The open file is enough where an open file can be removed (not on
	// Windows): then nothing is left behind even if the process dies.
	if os.Remove(f.Name()) != nil {
		sp.name = f.Name()
	}
	return sp, nil
}

// Write appends to the temp file of a Spooled from File.
func (s *Spooled) Write(p []byte) (int, error) {
	if s.file == nil {
		return 0, errInMemory
	}
	return s.file.Write(p)
}

var errInMemory = errors.New("spool: content held in memory is not written to")

// Rewind makes what was written to a Spooled from File its content: its
// Size, read from the start.
func (s *Spooled) Rewind() error {
	if s.file == nil {
		return errInMemory
	}
	size, err := s.file.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = s.file.Seek(0, io.SeekStart)
	}
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.Size = size
	return nil
}

// Close releases the temp file, if any.
func (s *Spooled) Close() error {
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	if s.name != "" {
		err = os.Remove(s.name)
		s.name = ""
	}
	return err
}
