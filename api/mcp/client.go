package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	headerAPIKey = "OPEN-SANDBOX-API-KEY"
	// execdPort is the port of a sandbox's execd API behind the proxy route.
	execdPort = 44772
	// maxErrorBody bounds the error envelope read from the API.
	maxErrorBody = 64 << 10
)

// API is where the tools send their requests: the lifecycle API of one
// sandboxd and, through its proxy route, the execd API of its sandboxes.
type API struct {
	// Base is scheme://host[:port] of the server.
	Base *url.URL
	// HTTP sends the requests; nil means http.DefaultClient.
	HTTP *http.Client
	// Key is sent when the tool call carries no key of its own (stdio). A
	// call over HTTP is made with the key its request was authenticated
	// with, never with this one.
	Key string
}

// KeyOf returns the API key a request carries: the SDKs' header, else an
// Authorization bearer token.
func KeyOf(h http.Header) string {
	if k := h.Get(headerAPIKey); k != "" {
		return k
	}
	if b, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer "); ok {
		return b
	}
	return ""
}

// caller is the API as one tool call reaches it: with the caller's key.
type caller struct {
	api *API
	key string
	// origin is scheme://host of the server as the client reaches it.
	origin *url.URL
}

// callerOf returns the API with the key of the call: the one of its HTTP
// request when it came over HTTP (already checked by the server), else the
// configured one.
func (a *API) callerOf(ctx context.Context, req *sdk.CallToolRequest) *caller {
	c := &caller{api: a, key: a.Key, origin: a.Base}
	if req != nil && req.Extra != nil && req.Extra.Header != nil {
		c.key = KeyOf(req.Extra.Header)
	}
	if o, ok := ctx.Value(origin{}).(*url.URL); ok {
		c.origin = o
	}
	return c
}

// apiError is the API's error envelope with the status it came with.
type apiError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string {
	msg := e.Message
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	return fmt.Sprintf("the sandboxd API answered HTTP %d: %s", e.Status, strings.TrimSpace(msg))
}

// lifecyclePath is a route of the lifecycle API.
func lifecyclePath(format string, ids ...string) string {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = url.PathEscape(id)
	}
	return "/v1" + fmt.Sprintf(format, args...)
}

// execdPath is a route of a sandbox's execd API, through the proxy route.
func execdPath(id, rest string) string {
	return "/sandboxes/" + url.PathEscape(id) + "/proxy/" + strconv.Itoa(execdPort) + rest
}

// do sends one request with the caller's key. body is JSON unless it is an
// io.Reader (ctype then names it). A non-2xx answer is an *apiError.
func (c *caller) do(ctx context.Context, method, path string, q url.Values, body any, ctype string, hdr http.Header) (*http.Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd, ctype = bytes.NewReader(data), "application/json"
	}
	u := *c.api.Base
	u.RawPath = strings.TrimSuffix(u.EscapedPath(), "/") + path // path is escaped
	u.Path, _ = url.PathUnescape(u.RawPath)
	u.RawQuery = ""
	if q != nil {
		u.RawQuery = q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.origin != c.api.Base {
		req.Host = c.origin.Host // the API builds endpoints from it
	}
	if c.key != "" {
		req.Header.Set(headerAPIKey, c.key)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	hc := c.api.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the sandboxd API: %w", err)
	}
	if res.StatusCode/100 != 2 {
		defer res.Body.Close()
		e := &apiError{Status: res.StatusCode}
		data, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		if json.Unmarshal(data, e) != nil || (e.Code == "" && e.Message == "") {
			e.Message = string(data)
		}
		return nil, e
	}
	return res, nil
}

// json sends a request and decodes a JSON answer into out (if not nil).
func (c *caller) json(ctx context.Context, method, path string, q url.Values, body, out any) error {
	res, err := c.do(ctx, method, path, q, body, "", nil)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("decode the answer of %s %s: %w", method, path, err)
	}
	return nil
}

// event is one event of execd's command and code streams.
type event struct {
	Type           string                     `json:"type"`
	Text           string                     `json:"text"`
	Timestamp      int64                      `json:"timestamp"`
	ExecutionCount int                        `json:"execution_count"`
	ExecutionTime  int64                      `json:"execution_time"`
	Results        map[string]json.RawMessage `json:"results"`
	Error          *struct {
		Name      string   `json:"ename"`
		Value     string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
	// Code and Message are an error written into an open stream.
	Code    string `json:"code"`
	Message string `json:"message"`
}

// maxEventLine bounds one event of a stream that is kept: 8 MiB of results
// (maxResultBytes) in base64 and JSON. A longer line is read away and left
// out, so a sandbox cannot make a call hold more.
const maxEventLine = 12 << 20

// stream posts body to an execd streaming route and calls fn for each
// event, until the stream ends or fn returns false.
func (c *caller) stream(ctx context.Context, path string, body any, fn func(event) bool) error {
	res, err := c.do(ctx, http.MethodPost, path, nil, body, "", http.Header{"Accept": {"text/event-stream"}})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	br := bufio.NewReaderSize(res.Body, 64<<10)
	var line []byte
	over := false // the current line is longer than maxEventLine
	for {
		frag, err := br.ReadSlice('\n')
		if !over {
			line = append(line, frag...)
			if len(line) > maxEventLine {
				line, over = line[:0], true
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if !over {
			if ev, ok := parseEvent(line); ok {
				if ev.Type == "" && ev.Message != "" {
					return fmt.Errorf("the sandbox's execd API failed the run: %s: %s", ev.Code, ev.Message)
				}
				if !fn(ev) {
					return nil
				}
			}
		}
		line, over = line[:0], false
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the event stream: %w", err)
		}
	}
}

// parseEvent reads one line of an event stream: an event's JSON, after
// an optional "data:".
func parseEvent(line []byte) (event, bool) {
	var ev event
	line = bytes.TrimSpace(line)
	line = bytes.TrimSpace(bytes.TrimPrefix(line, []byte("data:")))
	if len(line) == 0 || line[0] != '{' {
		return ev, false
	}
	return ev, json.Unmarshal(line, &ev) == nil
}
