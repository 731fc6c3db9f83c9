package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

func runCp(ctx context.Context, e *env, args []string) (int, error) {
	c, rest, err := e.connect(e.flags(), args)
	if err != nil {
		return 0, err
	}
	if len(rest) != 2 {
		return 0, usagef("cp needs a SOURCE and a DESTINATION")
	}
	srcID, srcPath, srcRemote := remotePath(rest[0])
	dstID, dstPath, dstRemote := remotePath(rest[1])
	switch {
	case srcRemote && !dstRemote:
		return 0, download(ctx, c, srcID, srcPath, rest[1], e.stdout)
	case !srcRemote && dstRemote:
		return 0, upload(ctx, c, rest[0], dstID, dstPath, e.stdin)
	}
	return 0, usagef("exactly one of SOURCE and DESTINATION must be ID:PATH")
}

// remotePath splits "ID:/path" into the sandbox id and the path.
func remotePath(arg string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(arg, ":")
	// A one-letter "id" is a Windows drive; ids have no slash.
	if !ok || len(id) < 2 || strings.ContainsAny(id, `/\`) || p == "" {
		return "", "", false
	}
	return id, p, true
}

// download copies a sandbox's file to dst: "-" is stdout, a directory gets
// the file's name.
func download(ctx context.Context, c *client, id, src, dst string, stdout io.Writer) error {
	res, err := c.do(ctx, http.MethodGet, execdPath(id, "/files/download"), url.Values{"path": {src}}, nil, "")
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if dst == "-" {
		_, err := io.Copy(stdout, res.Body)
		return err
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return fmt.Errorf("download %s: %w", src, err)
	}
	return f.Close()
}

// upload copies src ("-" is stdin) into a sandbox at dst; a dst ending in
// "/" gets the file's name. A file is sent with its size, so the server
// streams it straight in; its permission bits go along.
func upload(ctx context.Context, c *client, src, id, dst string, stdin io.Reader) error {
	var body io.Reader = stdin
	size, mode := int64(-1), 0
	name := "stdin"
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory; cp copies one file", src)
		}
		body, size, name = f, fi.Size(), filepath.Base(src)
		mode, _ = strconv.Atoi(strconv.FormatUint(uint64(fi.Mode().Perm()), 8)) // execd wants 0755 as 755
	}
	if strings.HasSuffix(dst, "/") {
		dst += name
	}
	meta, err := json.Marshal(map[string]any{"path": dst, "mode": mode})
	if err != nil {
		return err
	}
	// The multipart envelope around the file is built up front, so the
	// request's length is known when the file's size is.
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	part := func(field, filename, ctype string) (io.Writer, error) {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, field, filename))
		h.Set("Content-Type", ctype)
		return mw.CreatePart(h)
	}
	w, err := part("metadata", "metadata", "application/json")
	if err != nil {
		return err
	}
	_, _ = w.Write(meta)
	if _, err := part("file", path.Base(dst), "application/octet-stream"); err != nil {
		return err
	}
	tail := "\r\n--" + mw.Boundary() + "--\r\n"
	rd := io.MultiReader(bytes.NewReader(head.Bytes()), body, strings.NewReader(tail))
	var req io.Reader = rd
	if size >= 0 {
		req = sizedReader{rd, int64(head.Len()) + size + int64(len(tail))}
	}
	res, err := c.do(ctx, http.MethodPost, execdPath(id, "/files/upload"), nil, req, mw.FormDataContentType())
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return res.Body.Close()
}

// sizedReader is a body whose length is known (see client.do).
type sizedReader struct {
	io.Reader
	n int64
}

func (s sizedReader) Len() int64 { return s.n }
