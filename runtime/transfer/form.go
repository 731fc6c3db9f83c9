package transfer

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// File parts that come before their metadata are held until it arrives;
// their number and size are the client's choice. maxEarlyParts bounds how
// many are held at once (each a temp file, an open descriptor: sandboxd
// parses uploads into a stopped sandbox, and on the direct path into a
// running one, itself), maxEarlySpool their bytes (the host's temp
// directory), maxMemorySpool the memory of those held in memory because
// no temp file can be made; each for all of a body's parts together.
// SDKs send each metadata part first.
const (
	maxEarlyParts  = 100
	maxEarlySpool  = 16 << 20
	maxMemorySpool = 8 << 20
)

// ReadUpload reads execd's upload form, multipart/form-data whose
// "metadata" and "file" parts are both file parts (they carry a filename),
// paired by index, and hands each file to put as it arrives: its metadata,
// the index of its file part among all the parts of the body, and its
// content. A file part that comes before its metadata is spooled with sp
// until the metadata arrives, and then handed to put as the *Spooled it
// is (its size known; closed once put returns). A malformed form is an
// *Error; put's errors are returned as they are. It is the one
// parser of uploads: the agent's, and sandboxd's (Upload).
func ReadUpload(r *http.Request, sp Spooler, put func(meta Meta, part int, content io.Reader) error) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return &Error{http.StatusBadRequest, CodeInvalidFile, "multipart form is empty: " + err.Error()}
	}
	type early struct {
		content *Spooled
		part    int
	}
	var metas []Meta
	spooled := map[int]early{}
	defer func() {
		for _, e := range spooled {
			e.content.Close()
		}
	}()
	files := 0
	memLeft := int64(maxMemorySpool)  // for all the parts held in memory
	earlyLeft := int64(maxEarlySpool) // for all the parts held
	for part := 0; ; part++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return &Error{http.StatusBadRequest, CodeInvalidFile, "error reading multipart form: " + err.Error()}
		}
		if p.FileName() == "" {
			continue // like execd, only file parts count
		}
		switch p.FormName() {
		case "metadata":
			meta, uerr := readMeta(p)
			if uerr != nil {
				return uerr
			}
			metas = append(metas, meta)
			if e, ok := spooled[len(metas)-1]; ok {
				delete(spooled, len(metas)-1)
				err := put(meta, e.part, e.content)
				e.content.Close()
				if err != nil {
					return err
				}
			}
		case "file":
			i := files
			files++
			if i < len(metas) {
				if err := put(metas[i], part, p); err != nil {
					return err
				}
				continue
			}
			if len(spooled) == maxEarlyParts {
				return &Error{http.StatusBadRequest, CodeInvalidFile, fmt.Sprintf("more than %d file parts wait for their metadata: send each metadata part before its file", maxEarlyParts)}
			}
			content, err := sp.spool(io.LimitReader(p, earlyLeft+1), 0, &memLeft)
			var uerr *Error
			switch {
			case errors.As(err, &uerr):
				return uerr
			case err != nil:
				return &Error{http.StatusInternalServerError, CodeRuntimeError, "error buffering file part: " + err.Error()}
			}
			spooled[i] = early{content, part}
			if content.Size > earlyLeft {
				return &Error{http.StatusRequestEntityTooLarge, CodeInvalidFile, fmt.Sprintf(
					"file parts before their metadata are held until it arrives, at most %d bytes in all: send each metadata part before its file", maxEarlySpool)}
			}
			earlyLeft -= content.Size
		}
	}
	switch {
	case len(metas) == 0:
		return &Error{http.StatusBadRequest, CodeInvalidFileMetadata, "metadata file is missing"}
	case files == 0:
		return &Error{http.StatusBadRequest, CodeInvalidFileContent, "file is missing"}
	case len(metas) != files:
		return &Error{http.StatusBadRequest, CodeInvalidFile, fmt.Sprintf("metadata and file count mismatch: %d vs %d", len(metas), files)}
	}
	return nil
}
