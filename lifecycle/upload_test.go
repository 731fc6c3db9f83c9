package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// fileWriter writes files one by one, as an agent with bulk connections
// does.
type fileWriter struct {
	files map[string]string
	fail  error
}

func (f *fileWriter) WriteFile(_ context.Context, meta runtime.FileMeta, content io.Reader) error {
	data, err := io.ReadAll(content)
	if err != nil {
		return err
	}
	if f.fail != nil {
		return f.fail
	}
	f.files[meta.Path] = string(data)
	return nil
}

// uploadRequest is an execd upload form of the given parts (name,
// filename, content), in order.
func uploadRequest(t *testing.T, body io.Reader, parts ...[3]string) *http.Request {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		pw, _ := w.CreateFormFile(p[0], p[1])
		pw.Write([]byte(p[2]))
	}
	w.Close()
	if body == nil {
		body = &buf
	}
	r := httptest.NewRequest(http.MethodPost, "/files/upload", body)
	r.Header.Set("Content-Type", w.FormDataContentType())
	return r
}

// An upload through a transport that writes files is read here, once,
// with the parser the archive path uses: every file arrives, in order,
// whichever part comes first, and errors keep their execd codes.
func TestPutUploadThroughAgent(t *testing.T) {
	m := &Manager{Files: &Files{}}
	fw := &fileWriter{files: map[string]string{}}
	r := uploadRequest(t, nil,
		[3]string{"metadata", "metadata", `{"path":"/a"}`}, [3]string{"file", "a", "first"},
		[3]string{"file", "b", "early"}, [3]string{"metadata", "metadata", `{"path":"/b"}`})
	if err := putUpload(t, m, "id", r, fw); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if fw.files["/a"] != "first" || fw.files["/b"] != "early" {
		t.Errorf("files written: %v", fw.files)
	}

	wantCode(t, putUpload(t, m, "id", uploadRequest(t, nil, [3]string{"file", "a", "x"}), fw), KindInvalid, "INVALID_FILE_METADATA")
	fw.fail = &transfer.Error{Status: http.StatusInternalServerError, Code: "RUNTIME_ERROR", Message: "read-only file system"}
	wantCode(t, putUpload(t, m, "id", uploadRequest(t, nil, [3]string{"metadata", "metadata", `{"path":"/c"}`}, [3]string{"file", "c", "x"}), fw), KindInternal, "RUNTIME_ERROR")
	fw.fail = nil
	// A client that goes away mid-file is the client's failure.
	full := uploadRequest(t, nil, [3]string{"metadata", "metadata", `{"path":"/d"}`}, [3]string{"file", "d", strings.Repeat("x", 10000)})
	cut, _ := io.ReadAll(full.Body)
	half := uploadRequest(t, io.MultiReader(bytes.NewReader(cut[:len(cut)/2]), iotest.ErrReader(errors.New("client went away"))))
	half.Header = full.Header
	wantCode(t, putUpload(t, m, "id", half, fw), KindInvalid, "INVALID_FILE")
	if _, ok := fw.files["/d"]; ok {
		t.Error("a cut upload was written")
	}
}

// A file part that comes before its metadata into a stopped sandbox is
// spooled once, by the parser, and written from that spool: neither
// spooled again for its tar header nor, with a Content-Length, streamed
// under the size it would have as the last part (it is not) and then
// written again.
func TestPutUploadEarlyPartSpooledOnce(t *testing.T) {
	e := newEnv(t, nil)
	sb, cid := e.create(t, validRequest())
	stopSandbox(t, e, cid)
	spools := spoolFiles(t, e.m)
	data := strings.Repeat("0123456789abcdef", 3*spoolInMemory/16)
	for _, length := range []bool{false, true} {
		r := uploadRequest(t, nil, [3]string{"file", "big", data}, [3]string{"metadata", "metadata", `{"path":"/work/big"}`})
		if !length {
			r.ContentLength = -1
		}
		made, _ := spools()
		puts := e.rt.Puts()
		if err := putUpload(t, e.m, sb.ID, r, nil); err != nil {
			t.Fatalf("Content-Length %v: upload: %v", length, err)
		}
		if f, ok := e.rt.File(cid, "/work/big"); !ok || string(f.Data) != data {
			t.Errorf("Content-Length %v: uploaded file has %d bytes, want %d", length, len(f.Data), len(data))
		}
		now, left := spools()
		if now-made != 1 || left != 0 || e.rt.Puts()-puts != 1 {
			t.Errorf("Content-Length %v: spooled %d times (%d left), written %d times; want once each, none left", length, now-made, left, e.rt.Puts()-puts)
		}
	}
}

// putUpload reads upload form r into sandbox id as the api does: into the
// sink Files chooses, its errors as the api answers them.
func putUpload(t *testing.T, m *Manager, id string, r *http.Request, fw runtime.FileWriter) error {
	t.Helper()
	return UploadError(transfer.Upload(t.Context(), r, m.Files.UploadSink(id, fw)))
}
