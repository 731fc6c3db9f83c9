// The upload form's parser is portable: sandboxd itself uses it, on every
// OS, for the archive path of a stopped sandbox.

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"sync"
)

// permission is execd's Permission: mode as octal digits (755 → 0755, 0
// leaves the mode alone), owner and group as names or numeric ids.
type permission struct {
	Owner string `json:"owner"`
	Group string `json:"group"`
	Mode  int    `json:"mode"`
}

const maxUploadMetadata = 1 << 20

// UploadError is an upload refused or failed: the status and execd error
// code to answer with.
type UploadError struct {
	Status        int
	Code, Message string
}

func (e *UploadError) Error() string { return e.Message }

// UploadMeta is the metadata part of one uploaded file.
type UploadMeta struct {
	Path string `json:"path"`
	permission
}

// ReadUpload reads execd's upload form, multipart/form-data whose
// "metadata" and "file" parts are both file parts (they carry a filename),
// paired by index, and hands each file to put as it arrives: its metadata,
// the index of its file part among all the parts of the body, and its
// content. A file part that comes before its metadata is spooled with sp
// until the metadata arrives, and then handed to put as the *Spooled it
// is (its size known; closed once put returns). A malformed form is an
// *UploadError; put's errors are returned as they are. It is the one
// parser of uploads: the agent's, and sandboxd's for a stopped sandbox.
func ReadUpload(r *http.Request, sp Spooler, put func(meta UploadMeta, part int, content io.Reader) error) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return &UploadError{http.StatusBadRequest, codeInvalidFile, "multipart form is empty: " + err.Error()}
	}
	type early struct {
		content *Spooled
		part    int
	}
	var metas []UploadMeta
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
			return &UploadError{http.StatusBadRequest, codeInvalidFile, "error reading multipart form: " + err.Error()}
		}
		if p.FileName() == "" {
			continue // like execd, only file parts count
		}
		switch p.FormName() {
		case "metadata":
			meta, uerr := readUploadMeta(p)
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
				return &UploadError{http.StatusBadRequest, codeInvalidFile, fmt.Sprintf("more than %d file parts wait for their metadata: send each metadata part before its file", maxEarlyParts)}
			}
			content, err := sp.spool(io.LimitReader(p, earlyLeft+1), 0, &memLeft)
			var uerr *UploadError
			switch {
			case errors.As(err, &uerr):
				return uerr
			case err != nil:
				return &UploadError{http.StatusInternalServerError, codeRuntimeError, "error buffering file part: " + err.Error()}
			}
			spooled[i] = early{content, part}
			if content.Size > earlyLeft {
				return &UploadError{http.StatusRequestEntityTooLarge, codeInvalidFile, fmt.Sprintf(
					"file parts before their metadata are held until it arrives, at most %d bytes in all: send each metadata part before its file", maxEarlySpool)}
			}
			earlyLeft -= content.Size
		}
	}
	switch {
	case len(metas) == 0:
		return &UploadError{http.StatusBadRequest, codeInvalidFileMetadata, "metadata file is missing"}
	case files == 0:
		return &UploadError{http.StatusBadRequest, codeInvalidFileContent, "file is missing"}
	case len(metas) != files:
		return &UploadError{http.StatusBadRequest, codeInvalidFile, fmt.Sprintf("metadata and file count mismatch: %d vs %d", len(metas), files)}
	}
	return nil
}

func readUploadMeta(part io.Reader) (UploadMeta, *UploadError) {
	b, err := io.ReadAll(io.LimitReader(part, maxUploadMetadata+1))
	switch {
	case err != nil:
		return UploadMeta{}, &UploadError{http.StatusBadRequest, codeInvalidFileMetadata, "error reading metadata: " + err.Error()}
	case len(b) > maxUploadMetadata:
		return UploadMeta{}, &UploadError{http.StatusBadRequest, codeInvalidFileMetadata, "metadata is too large"}
	}
	return parseUploadMeta(b)
}

// parseUploadMeta decodes and checks one file's metadata.
func parseUploadMeta(b []byte) (UploadMeta, *UploadError) {
	var meta UploadMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return meta, &UploadError{http.StatusBadRequest, codeInvalidFileMetadata, "invalid metadata format: " + err.Error()}
	}
	if meta.Path == "" {
		return meta, &UploadError{http.StatusBadRequest, codeInvalidFileMetadata, "metadata path is empty"}
	}
	if meta.Mode != 0 {
		if _, err := parseOctalDigits(meta.Mode); err != nil {
			return meta, &UploadError{http.StatusBadRequest, codeInvalidFileMetadata, err.Error()}
		}
	}
	return meta, nil
}

// transferBuffer is the unit in which uploads are written: a multipart
// part yields at most 4 KiB per read, and each read written as it comes
// would cost a system call per 4 KiB.
const transferBuffer = 256 << 10

var transferBuffers = sync.Pool{New: func() any { b := make([]byte, transferBuffer); return &b }}

// copyFilled copies src to dst in writes of a whole buffer (a pooled one,
// so memory per transfer is bounded and reused).
func copyFilled(dst io.Writer, src io.Reader) (int64, error) {
	bp := transferBuffers.Get().(*[]byte)
	defer transferBuffers.Put(bp)
	buf := *bp
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
	maxEarlySpool  = 64 << 20
	maxMemorySpool = 8 << 20
)

// execd error codes (reference §2.1).
const (
	codeInvalidRequest      = "INVALID_REQUEST_BODY"
	codeMissingQuery        = "MISSING_QUERY"
	codeRuntimeError        = "RUNTIME_ERROR"
	codeInvalidFile         = "INVALID_FILE"
	codeInvalidFileContent  = "INVALID_FILE_CONTENT"
	codeInvalidFileMetadata = "INVALID_FILE_METADATA"
	codeFileNotFound        = "FILE_NOT_FOUND"
	codeNotSupported        = "NOT_SUPPORTED"
	codeContextNotFound     = "CONTEXT_NOT_FOUND"
)

// parseOctalDigits is the inverse of octalDigits: 755 → 0755.
func parseOctalDigits(n int) (fs.FileMode, error) {
	m, err := strconv.ParseUint(strconv.Itoa(n), 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("invalid mode %d: want octal digits such as 644", n)
	}
	// Go's FileMode keeps setuid, setgid and sticky outside the low bits.
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode, nil
}

// FileWriter is a transport that writes uploaded files one by one.
type FileWriter interface {
	// WriteFile writes content to the file meta describes. A refusal or
	// failure of the agent is an *UploadError; an error reading content
	// is returned as it is.
	WriteFile(ctx context.Context, meta UploadMeta, content io.Reader) error
}
