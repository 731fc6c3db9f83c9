package transfer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"path/filepath"
	"strings"
	"testing"
)

type uploadPart struct {
	name, filename, content string
}

// uploadBody builds multipart/form-data the way the Python SDK does: both
// metadata and file parts carry a filename.
func uploadBody(t *testing.T, parts []uploadPart) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		disp := fmt.Sprintf(`form-data; name=%q`, p.name)
		if p.filename != "" {
			disp += fmt.Sprintf(`; filename=%q`, p.filename)
		}
		h.Set("Content-Disposition", disp)
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.content)
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

func meta(path string, mode int) uploadPart {
	return uploadPart{"metadata", "metadata", fmt.Sprintf(`{"path":%q,"owner":null,"group":null,"mode":%d}`, path, mode)}
}

func file(path, content string) uploadPart {
	return uploadPart{"file", path, content}
}

// TestUploadEarlyPartInMemoryBounded: file parts before their metadata,
// with no temp file to spool them to, are held in memory only up to a
// bound for the whole body, and past it refused without being read to the
// end.
func TestUploadEarlyPartInMemoryBounded(t *testing.T) {
	t.Parallel()
	noTemp := filepath.Join(t.TempDir(), "missing") // CreateTemp fails here
	half := strings.Repeat("x", maxMemorySpool/2+1)
	for _, tt := range []struct {
		name  string
		parts []uploadPart
		ok    bool
	}{
		{"at the bound", []uploadPart{file("/f", strings.Repeat("x", maxMemorySpool)), meta("/f", 0)}, true},
		{"one part over it", []uploadPart{file("/f", strings.Repeat("x", 4*maxMemorySpool)), meta("/f", 0)}, false},
		{"two parts over it", []uploadPart{file("/f", half), file("/g", half), meta("/f", 0), meta("/g", 0)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ct, form := uploadBody(t, tt.parts)
			size := form.Len()
			body := &countingReader{r: form}
			r, err := http.NewRequest(http.MethodPost, "/files/upload", body)
			if err != nil {
				t.Fatal(err)
			}
			r.Header.Set("Content-Type", ct)
			puts := 0
			err = ReadUpload(r, Spooler{Dir: noTemp}, func(_ Meta, _ int, content io.Reader) error {
				puts++
				_, err := io.Copy(io.Discard, content)
				return err
			})
			var uerr *Error
			switch {
			case tt.ok && (err != nil || puts != len(tt.parts)/2):
				t.Errorf("err %v, %d puts", err, puts)
			case !tt.ok && (!errors.As(err, &uerr) || uerr.Status != http.StatusRequestEntityTooLarge || puts != 0):
				t.Errorf("err %v, %d puts; want a 413 and no put", err, puts)
			case !tt.ok && size > 3*maxMemorySpool && body.n > 2*maxMemorySpool:
				t.Errorf("%d bytes of the body read before refusing", body.n)
			}
		})
	}
}

// TestUploadEarlyPartsSizeBounded: file parts before their metadata are
// spooled to at most maxEarlySpool bytes for the whole body, then refused
// with a 413 without reading on.
func TestUploadEarlyPartsSizeBounded(t *testing.T) {
	t.Parallel()
	half := strings.Repeat("x", maxEarlySpool/2+1)
	for _, tt := range []struct {
		name  string
		parts []uploadPart
		ok    bool
	}{
		{"at the bound", []uploadPart{file("/f", strings.Repeat("x", maxEarlySpool)), meta("/f", 0)}, true},
		{"one part over it", []uploadPart{file("/f", strings.Repeat("x", 2*maxEarlySpool)), meta("/f", 0)}, false},
		{"two parts over it", []uploadPart{file("/f", half), file("/g", half), meta("/f", 0), meta("/g", 0)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ct, form := uploadBody(t, tt.parts)
			size := form.Len()
			body := &countingReader{r: form}
			r, _ := http.NewRequest(http.MethodPost, "/files/upload", body)
			r.Header.Set("Content-Type", ct)
			puts := 0
			err := ReadUpload(r, Spooler{Dir: t.TempDir()}, func(_ Meta, _ int, content io.Reader) error {
				puts++
				_, err := io.Copy(io.Discard, content)
				return err
			})
			var uerr *Error
			switch {
			case tt.ok && (err != nil || puts != len(tt.parts)/2):
				t.Errorf("err %v, %d puts", err, puts)
			case !tt.ok && (!errors.As(err, &uerr) || uerr.Status != http.StatusRequestEntityTooLarge || puts != 0):
				t.Errorf("err %v, %d puts; want a 413 and no put", err, puts)
			case !tt.ok && body.n > maxEarlySpool+1<<20:
				t.Errorf("%d of %d bytes of the body read before refusing", body.n, size)
			}
		})
	}
}

// TestUploadEarlyPartsCounted: at most maxEarlyParts file parts wait for
// their metadata at once (each holds a temp file).
func TestUploadEarlyPartsCounted(t *testing.T) {
	t.Parallel()
	for _, n := range []int{maxEarlyParts, maxEarlyParts + 1} {
		var parts []uploadPart
		for i := range n {
			parts = append(parts, file(fmt.Sprint("/f", i), "x"))
		}
		for i := range n {
			parts = append(parts, meta(fmt.Sprint("/f", i), 0))
		}
		ct, body := uploadBody(t, parts)
		r, err := http.NewRequest(http.MethodPost, "/files/upload", body)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", ct)
		puts := 0
		err = ReadUpload(r, Spooler{Dir: t.TempDir()}, func(Meta, int, io.Reader) error { puts++; return nil })
		var uerr *Error
		switch {
		case n <= maxEarlyParts && (err != nil || puts != n):
			t.Errorf("%d early parts: err %v, %d puts", n, err, puts)
		case n > maxEarlyParts && (!errors.As(err, &uerr) || uerr.Status != http.StatusBadRequest || puts != 0):
			t.Errorf("%d early parts: err %v, %d puts; want a 400 and no put", n, err, puts)
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}
