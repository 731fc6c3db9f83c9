package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxReadText bounds the text file_read returns at once.
const maxReadText = 256 << 10

// defaultDownload and maxDownload bound file_download's bytes.
const (
	defaultDownload = 1 << 20
	maxDownload     = 8 << 20
)

// FileReadArgs are file_read's arguments.
type FileReadArgs struct {
	sandboxArg
	compatArg
	Path        string `json:"path" jsonschema:"absolute path of a text file in the sandbox"`
	Encoding    string `json:"encoding,omitempty" jsonschema:"utf-8 (the default; the only text encoding supported); use file_download for binary files"`
	RangeHeader string `json:"range_header,omitempty" jsonschema:"read only these bytes, as an HTTP Range: bytes=0-1023, or bytes=4096- for the rest from byte 4096"`
}

// FileReadResult is a text file's content.
type FileReadResult struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"the content was cut: read on with range_header as the note in content says"`
}

// FileWriteArgs are file_write's arguments.
type FileWriteArgs struct {
	sandboxArg
	compatArg
	Path     string `json:"path" jsonschema:"absolute path of the file; parent directories are created"`
	Content  string `json:"content" jsonschema:"the file's text"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default); use file_upload for binary data"`
	Mode     *int   `json:"mode,omitempty" jsonschema:"permission bits written as octal digits, e.g. 644 or 755 (default 755, as upstream)"`
	Owner    string `json:"owner,omitempty"`
	Group    string `json:"group,omitempty"`
}

// FileUploadArgs are file_upload's arguments.
type FileUploadArgs struct {
	sandboxArg
	Path       string `json:"path" jsonschema:"absolute path of the file; parent directories are created"`
	DataBase64 string `json:"data_base64" jsonschema:"the file's bytes, base64 encoded (standard alphabet); at most about 3 MiB per call over HTTP"`
	Mode       *int   `json:"mode,omitempty" jsonschema:"permission bits written as octal digits, e.g. 644 (default) or 755"`
}

// FileUploadResult is what file_upload wrote.
type FileUploadResult struct {
	Path string `json:"path"`
	Size int    `json:"size"`
}

// FileDownloadArgs are file_download's arguments.
type FileDownloadArgs struct {
	sandboxArg
	Path     string `json:"path" jsonschema:"absolute path of the file in the sandbox"`
	Offset   int64  `json:"offset,omitempty" jsonschema:"byte to start at (default 0), to fetch a large file in pieces"`
	MaxBytes int64  `json:"max_bytes,omitempty" jsonschema:"bytes to return at most (default 1 MiB, at most 8 MiB)"`
}

// FileDownloadResult is a file's bytes.
type FileDownloadResult struct {
	Path          string `json:"path"`
	Offset        int64  `json:"offset"`
	Size          int64  `json:"size" jsonschema:"bytes returned"`
	TotalSize     int64  `json:"total_size" jsonschema:"the file's size"`
	MIMEType      string `json:"mime_type"`
	Truncated     bool   `json:"truncated" jsonschema:"the file goes on: call again with offset + size"`
	ContentBase64 string `json:"content_base64" jsonschema:"the bytes, base64 encoded"`
}

// PathsArgs name files or directories.
type PathsArgs struct {
	sandboxArg
	Paths []string `json:"paths" jsonschema:"absolute paths"`
}

// SearchArgs are file_search's arguments.
type SearchArgs struct {
	sandboxArg
	Path    string `json:"path" jsonschema:"directory to search in, recursively"`
	Pattern string `json:"pattern" jsonschema:"glob matched against file names, e.g. *.py"`
}

// EntryInfo is a file's details.
type EntryInfo struct {
	Path       string `json:"path"`
	Type       string `json:"type,omitempty"`
	Mode       int    `json:"mode"`
	Owner      string `json:"owner"`
	Group      string `json:"group"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modified_at"`
	CreatedAt  string `json:"created_at"`
}

// SearchResult is file_search's result.
type SearchResult struct {
	Result    []EntryInfo `json:"result"`
	Truncated bool        `json:"truncated,omitempty" jsonschema:"more files matched: narrow the path or pattern"`
}

// maxSearchEntries bounds file_search's result.
const maxSearchEntries = 1000

// DirArgs are file_create_directories' arguments.
type DirArgs struct {
	sandboxArg
	Entries []struct {
		Path  string `json:"path"`
		Mode  *int   `json:"mode,omitempty" jsonschema:"permission bits as octal digits (default 755)"`
		Owner string `json:"owner,omitempty"`
		Group string `json:"group,omitempty"`
	} `json:"entries"`
}

// MoveArgs are file_move's arguments.
type MoveArgs struct {
	sandboxArg
	Entries []struct {
		Source      string `json:"source"`
		Destination string `json:"destination" jsonschema:"must not exist yet"`
	} `json:"entries"`
}

// ReplaceArgs are file_replace_contents' arguments.
type ReplaceArgs struct {
	sandboxArg
	Entries []struct {
		Path       string `json:"path"`
		OldContent string `json:"old_content" jsonschema:"text to replace (every occurrence)"`
		NewContent string `json:"new_content"`
	} `json:"entries"`
}

// ReplaceResult counts the replacements per file.
type ReplaceResult struct {
	Result []ReplaceCount `json:"result"`
}

// ReplaceCount is one file's replacements.
type ReplaceCount struct {
	Path          string `json:"path"`
	ReplacedCount int    `json:"replaced_count"`
}

func (t *tools) addFileTools(s *sdk.Server) {
	add(s, t, &sdk.Tool{Name: "file_read", Annotations: readOnly, Description: `Read a text file (UTF-8) from a sandbox. For large files read a part with range_header (e.g. "bytes=0-65535").
Returns {path, content}; content longer than 256 KiB is cut with a note saying how to read on. For binary files (images, archives) use file_download.`}, t.fileRead)
	add(s, t, &sdk.Tool{Name: "file_write", Annotations: mutating, Description: `Write a text file in a sandbox, replacing it if it exists; parent directories are created. Returns {status: "written"}. For binary data use file_upload.`},
		func(ctx context.Context, c *caller, in FileWriteArgs) (*sdk.CallToolResult, StatusResult, error) {
			if in.Encoding != "" && !isUTF8(in.Encoding) {
				return nil, StatusResult{}, fmt.Errorf("encoding %q is not supported: write text as utf-8, or bytes with file_upload", in.Encoding)
			}
			mode := 755
			if in.Mode != nil {
				mode = *in.Mode
			}
			err := c.upload(ctx, in.SandboxID, in.Path, []byte(in.Content), mode, in.Owner, in.Group)
			return nil, StatusResult{Status: "written"}, err
		})
	add(s, t, &sdk.Tool{Name: "file_upload", Annotations: mutating, Description: `Write any bytes (base64 encoded) to a file in a sandbox, replacing it if it exists; parent directories are created.
Use it for binary files: images, archives, data. Returns {path, size}.`},
		func(ctx context.Context, c *caller, in FileUploadArgs) (*sdk.CallToolResult, FileUploadResult, error) {
			data, err := base64.StdEncoding.DecodeString(in.DataBase64)
			if err != nil {
				return nil, FileUploadResult{}, fmt.Errorf("data_base64 is not valid base64: %w", err)
			}
			mode := 644
			if in.Mode != nil {
				mode = *in.Mode
			}
			err = c.upload(ctx, in.SandboxID, in.Path, data, mode, "", "")
			return nil, FileUploadResult{Path: in.Path, Size: len(data)}, err
		})
	add(s, t, &sdk.Tool{Name: "file_download", Annotations: readOnly, Description: `Read any file's bytes from a sandbox. Images (PNG, JPEG, GIF, WebP) also come back as image content you can see.
Returns {path, offset, size, total_size, mime_type, truncated, content_base64}; a file over max_bytes (default 1 MiB) is returned in pieces: call again with offset + size.`}, t.fileDownload)
	add(s, t, &sdk.Tool{Name: "file_delete", Annotations: destructive, Description: `Delete files (not directories: see file_delete_directories). Missing files are ignored. Returns {status: "deleted"}.`},
		func(ctx context.Context, c *caller, in PathsArgs) (*sdk.CallToolResult, StatusResult, error) {
			return c.deletePaths(ctx, in, "/files")
		})
	add(s, t, &sdk.Tool{Name: "file_delete_directories", Annotations: destructive, Description: `Delete directories with everything in them. Returns {status: "deleted"}.`},
		func(ctx context.Context, c *caller, in PathsArgs) (*sdk.CallToolResult, StatusResult, error) {
			return c.deletePaths(ctx, in, "/directories")
		})
	add(s, t, &sdk.Tool{Name: "file_search", Annotations: readOnly, Description: `Find files under a directory whose names match a glob (e.g. *.py), recursively.
Returns {result: [{path, type, size, mode, owner, group, modified_at, created_at}]}, at most 1000 entries.`}, t.fileSearch)
	add(s, t, &sdk.Tool{Name: "file_create_directories", Annotations: idempotent, Description: `Create directories (with their parents), like mkdir -p. Returns {status: "created"}.`},
		func(ctx context.Context, c *caller, in DirArgs) (*sdk.CallToolResult, StatusResult, error) {
			if len(in.Entries) == 0 {
				return nil, StatusResult{}, errors.New("entries must not be empty")
			}
			body := map[string]any{}
			for _, e := range in.Entries {
				mode := 755
				if e.Mode != nil {
					mode = *e.Mode
				}
				body[e.Path] = permission(mode, e.Owner, e.Group)
			}
			err := c.json(ctx, http.MethodPost, execdPath(in.SandboxID, "/directories"), nil, body, nil)
			return nil, StatusResult{Status: "created"}, err
		})
	add(s, t, &sdk.Tool{Name: "file_move", Annotations: mutating, Description: `Move or rename files and directories. Returns {status: "moved"}.`},
		func(ctx context.Context, c *caller, in MoveArgs) (*sdk.CallToolResult, StatusResult, error) {
			if len(in.Entries) == 0 {
				return nil, StatusResult{}, errors.New("entries must not be empty")
			}
			body := make([]map[string]string, len(in.Entries))
			for i, e := range in.Entries {
				body[i] = map[string]string{"src": e.Source, "dest": e.Destination}
			}
			err := c.json(ctx, http.MethodPost, execdPath(in.SandboxID, "/files/mv"), nil, body, nil)
			return nil, StatusResult{Status: "moved"}, err
		})
	add(s, t, &sdk.Tool{Name: "file_replace_contents", Annotations: mutating, Description: `Replace every occurrence of old_content with new_content in text files: a quick edit without rewriting the file.
Returns {result: [{path, replaced_count}]}.`}, t.fileReplace)
}

func isUTF8(enc string) bool {
	e := strings.ToLower(strings.ReplaceAll(enc, "-", ""))
	return e == "utf8" || e == "ascii"
}

// permission is execd's Permission: mode as octal digits in a decimal.
func permission(mode int, owner, group string) map[string]any {
	p := map[string]any{"mode": mode}
	if owner != "" {
		p["owner"] = owner
	}
	if group != "" {
		p["group"] = group
	}
	return p
}

// upload writes one file through execd's multipart upload.
func (c *caller) upload(ctx context.Context, sandbox, target string, data []byte, mode int, owner, group string) error {
	if !path.IsAbs(target) {
		return fmt.Errorf("path %q must be absolute", target)
	}
	meta, _ := json.Marshal(map[string]any{"path": target, "mode": mode, "owner": owner, "group": group})
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	part := func(name, filename, ctype string, body []byte) {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, name, filename))
		h.Set("Content-Type", ctype)
		w, _ := mw.CreatePart(h)
		_, _ = w.Write(body)
	}
	part("metadata", "metadata", "application/json", meta)
	part("file", path.Base(target), "application/octet-stream", data)
	_ = mw.Close()
	res, err := c.do(ctx, http.MethodPost, execdPath(sandbox, "/files/upload"), nil, &buf, mw.FormDataContentType(), nil)
	if err != nil {
		return err
	}
	res.Body.Close()
	return nil
}

func (c *caller) deletePaths(ctx context.Context, in PathsArgs, route string) (*sdk.CallToolResult, StatusResult, error) {
	if len(in.Paths) == 0 {
		return nil, StatusResult{}, errors.New("paths must not be empty")
	}
	err := c.json(ctx, http.MethodDelete, execdPath(in.SandboxID, route), url.Values{"path": in.Paths}, nil, nil)
	return nil, StatusResult{Status: "deleted"}, err
}

func (t *tools) fileRead(ctx context.Context, c *caller, in FileReadArgs) (*sdk.CallToolResult, FileReadResult, error) {
	out := FileReadResult{Path: in.Path}
	if in.Encoding != "" && !isUTF8(in.Encoding) {
		return nil, out, fmt.Errorf("encoding %q is not supported: read text as utf-8, or bytes with file_download", in.Encoding)
	}
	if in.Path == "" {
		return nil, out, errors.New("path must not be empty")
	}
	var hdr http.Header
	if in.RangeHeader != "" {
		hdr = http.Header{"Range": {in.RangeHeader}}
	}
	res, err := c.do(ctx, http.MethodGet, execdPath(in.SandboxID, "/files/download"), url.Values{"path": {in.Path}}, nil, "", hdr)
	if err != nil {
		return nil, out, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxReadText+1))
	if err != nil {
		return nil, out, err
	}
	start := rangeStart(res)
	if len(data) > maxReadText {
		data = data[:maxReadText]
		for len(data) > 0 && !utf8.Valid(data) { // do not cut a character
			data = data[:len(data)-1]
		}
		out.Truncated = true
	}
	if !utf8.Valid(data) {
		return nil, out, fmt.Errorf("%s is not UTF-8 text: use file_download for binary files", in.Path)
	}
	out.Content = string(data)
	if out.Truncated {
		next := start + int64(len(data))
		out.Content += fmt.Sprintf("\n[... cut at %d KiB; read on with range_header \"bytes=%d-\"]", maxReadText>>10, next)
	}
	return nil, out, nil
}

// rangeStart is where a (partial) download starts in the file.
func rangeStart(res *http.Response) int64 {
	cr := res.Header.Get("Content-Range") // bytes a-b/n
	if res.StatusCode != http.StatusPartialContent || cr == "" {
		return 0
	}
	a, _, _ := strings.Cut(strings.TrimPrefix(cr, "bytes "), "-")
	n, _ := strconv.ParseInt(a, 10, 64)
	return n
}

// totalSize is the file's size from a (partial) download's headers, or -1.
func totalSize(res *http.Response) int64 {
	if res.StatusCode == http.StatusPartialContent {
		_, n, ok := strings.Cut(res.Header.Get("Content-Range"), "/")
		if v, err := strconv.ParseInt(n, 10, 64); ok && err == nil {
			return v
		}
		return -1
	}
	return res.ContentLength
}

func (t *tools) fileDownload(ctx context.Context, c *caller, in FileDownloadArgs) (*sdk.CallToolResult, FileDownloadResult, error) {
	out := FileDownloadResult{Path: in.Path, Offset: in.Offset}
	if in.Path == "" {
		return nil, out, errors.New("path must not be empty")
	}
	if in.Offset < 0 || in.MaxBytes < 0 {
		return nil, out, errors.New("offset and max_bytes must not be negative")
	}
	limit := in.MaxBytes
	if limit == 0 {
		limit = defaultDownload
	}
	limit = min(limit, maxDownload)
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", in.Offset, in.Offset+limit-1)}}
	res, err := c.do(ctx, http.MethodGet, execdPath(in.SandboxID, "/files/download"), url.Values{"path": {in.Path}}, nil, "", hdr)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusRequestedRangeNotSatisfiable && in.Offset == 0 {
		// An empty file has no byte 0.
		res, err = c.do(ctx, http.MethodGet, execdPath(in.SandboxID, "/files/download"), url.Values{"path": {in.Path}}, nil, "", nil)
	}
	if err != nil {
		return nil, out, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, limit))
	if err != nil {
		return nil, out, err
	}
	out.Size, out.TotalSize = int64(len(data)), totalSize(res)
	if res.StatusCode == http.StatusOK {
		out.Offset = 0 // the whole file came (the server ignored the range)
	}
	out.Truncated = out.TotalSize < 0 || out.Offset+out.Size < out.TotalSize
	out.MIMEType = mimeOf(in.Path, data)
	out.ContentBase64 = base64.StdEncoding.EncodeToString(data)
	if !images[out.MIMEType] || out.Truncated || out.Offset != 0 {
		return nil, out, nil
	}
	summary, _ := json.Marshal(struct {
		Path      string `json:"path"`
		Size      int64  `json:"size"`
		MIMEType  string `json:"mime_type"`
		Truncated bool   `json:"truncated"`
	}{out.Path, out.Size, out.MIMEType, out.Truncated})
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(summary)}, &sdk.ImageContent{Data: data, MIMEType: out.MIMEType}}}, out, nil
}

// mimeOf names a file's type from its first bytes.
func mimeOf(name string, data []byte) string {
	t := http.DetectContentType(data)
	if t == "application/octet-stream" && utf8.Valid(data) && len(data) > 0 {
		t = "text/plain; charset=utf-8"
	}
	if strings.HasSuffix(strings.ToLower(name), ".svg") && utf8.Valid(data) {
		return "image/svg+xml"
	}
	return t
}

func (t *tools) fileSearch(ctx context.Context, c *caller, in SearchArgs) (*sdk.CallToolResult, SearchResult, error) {
	out := SearchResult{Result: []EntryInfo{}}
	if in.Path == "" || in.Pattern == "" {
		return nil, out, errors.New("path and pattern must not be empty")
	}
	var entries []EntryInfo
	err := c.json(ctx, http.MethodGet, execdPath(in.SandboxID, "/files/search"), url.Values{"path": {in.Path}, "pattern": {in.Pattern}}, nil, &entries)
	if err != nil {
		return nil, out, err
	}
	if len(entries) > maxSearchEntries {
		entries, out.Truncated = entries[:maxSearchEntries], true
	}
	if entries != nil {
		out.Result = entries
	}
	return nil, out, nil
}

func (t *tools) fileReplace(ctx context.Context, c *caller, in ReplaceArgs) (*sdk.CallToolResult, ReplaceResult, error) {
	out := ReplaceResult{Result: []ReplaceCount{}}
	if len(in.Entries) == 0 {
		return nil, out, errors.New("entries must not be empty")
	}
	body := map[string]map[string]string{}
	for _, e := range in.Entries {
		if e.OldContent == "" {
			return nil, out, fmt.Errorf("old_content for %s must not be empty", e.Path)
		}
		body[e.Path] = map[string]string{"old": e.OldContent, "new": e.NewContent}
	}
	var counts map[string]struct {
		ReplacedCount int `json:"replacedCount"`
	}
	err := c.json(ctx, http.MethodPost, execdPath(in.SandboxID, "/files/replace"), url.Values{"verbose": {"true"}}, body, &counts)
	if err != nil {
		return nil, out, err
	}
	for _, e := range in.Entries {
		out.Result = append(out.Result, ReplaceCount{Path: e.Path, ReplacedCount: counts[e.Path].ReplacedCount})
	}
	return nil, out, nil
}
