// Package mcp serves sandboxd's tools to AI agents over the Model Context
// Protocol: over stdio (`sandboxd mcp`, a client of a running sandboxd) and
// over streamable HTTP on the server's own /mcp route.
//
// The tools are a client of the API: every tool call is made of requests to
// the lifecycle API and, through the proxy route, to a sandbox's execd API,
// sent with the caller's key. So a tool can do nothing that key cannot, and
// every check of the API (host-mount allow-list, limits, the instance's own
// sandboxes only) applies as it does to the SDKs. The package does not
// reach into lifecycle.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Path is where the server mounts the streamable HTTP endpoint.
const Path = "/mcp"

// MaxRequestBody bounds one request to /mcp: a file_upload's base64 text
// (3 MiB of file) and the JSON-RPC around it.
const MaxRequestBody = 4 << 20

// Options shape the tool set.
type Options struct {
	// NoCreate leaves out the tools that create sandboxes (sandbox_create,
	// snapshot_restore), for clients that should only use existing ones.
	NoCreate bool
	// Version is reported to clients as the server's version.
	Version string
}

const instructions = `Tools to run code and commands in isolated sandboxes (containers) of a sandboxd server.
Create a sandbox with sandbox_create (keep the sandbox_id it returns: every other tool needs it), or reuse one from sandbox_list.
Run shell commands with command_run, and Python (or another kernel's language) with code_run, whose context_id keeps variables between calls.
Read and write files with file_read/file_write (text) and file_download/file_upload (any bytes, base64); prefer range reads (range_header) for large files.
Expose a port to a browser or curl with sandbox_get_endpoint; pause and resume with sandbox_pause/sandbox_resume; save state with snapshot_create.
Terminate a sandbox with sandbox_kill when done.`

// New returns an MCP server whose tools call api.
func New(api *API, opts Options) *sdk.Server {
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "sandboxd", Title: "OpenSandbox Sandbox", Version: opts.Version},
		&sdk.ServerOptions{Instructions: instructions})
	t := &tools{api: api, textArgs: map[string]map[string]bool{}}
	t.addSandboxTools(s, opts)
	t.addExecTools(s)
	t.addFileTools(s)
	s.AddReceivingMiddleware(t.parseTextArgs)
	return s
}

// Handler serves the tools over streamable HTTP for the server whose API
// is apiHandler. It must be mounted behind the server's authentication and
// browser checks: each tool call reaches apiHandler in-process with the key
// its own request carried.
//
// It is stateless: no session outlives its request, so there is no session
// table to bound or to steal, and a restart of sandboxd strands no client.
func Handler(apiHandler http.Handler, opts Options, log *slog.Logger) http.Handler {
	api := &API{Base: &url.URL{Scheme: "http", Host: "localhost"}, HTTP: &http.Client{Transport: handlerTransport{apiHandler}}}
	srv := New(api, opts)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		Stateless:           true,
		Logger:              log,
		MaxRequestBodyBytes: MaxRequestBody,
		// The server's own checks (Origin, and Host without a key) run
		// before; with a key, Host is not checked, so that a reverse proxy
		// on this machine may forward its own.
		DisableLocalhostProtection: true,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Endpoints name the address the client used, as the API's do.
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), origin{}, requestOrigin(r))))
	})
}

// origin is the context key of the scheme and Host of an /mcp request.
type origin struct{}

func requestOrigin(r *http.Request) *url.URL {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return &url.URL{Scheme: scheme, Host: r.Host}
}

// tools holds what the tool handlers share.
type tools struct {
	api *API
	// textArgs names, per tool, the arguments that are not strings: some
	// clients (Claude Desktop) send such values as JSON text.
	textArgs map[string]map[string]bool
}

// parseTextArgs replaces an argument that should not be a string but came
// as a string holding JSON by that JSON, as upstream's server accepts it.
func (t *tools) parseTextArgs(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok && method == "tools/call" && len(t.textArgs[p.Name]) > 0 {
			var args map[string]json.RawMessage
			if json.Unmarshal(p.Arguments, &args) == nil {
				changed := false
				for name, raw := range args {
					var text string
					if !t.textArgs[p.Name][name] || json.Unmarshal(raw, &text) != nil || !json.Valid([]byte(text)) {
						continue
					}
					if v := bytes.TrimSpace([]byte(text)); len(v) > 0 && v[0] != '"' {
						args[name], changed = v, true
					}
				}
				if changed {
					p.Arguments, _ = json.Marshal(args)
				}
			}
		}
		return next(ctx, method, req)
	}
}

// nonStrings adds the JSON names of t's fields that are not strings,
// those of embedded structs included.
func nonStrings(t reflect.Type, into map[string]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			nonStrings(f.Type, into)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" && f.Type.Kind() != reflect.String {
			into[name] = true
		}
	}
}

// handler is a tool's logic, given the API as the call may use it.
type handler[In, Out any] func(ctx context.Context, c *caller, in In) (*sdk.CallToolResult, Out, error)

// add registers a tool.
func add[In, Out any](s *sdk.Server, t *tools, tool *sdk.Tool, h handler[In, Out]) {
	t.textArgs[tool.Name] = map[string]bool{}
	nonStrings(reflect.TypeFor[In](), t.textArgs[tool.Name])
	sdk.AddTool(s, tool, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error) {
		if v, ok := any(in).(validator); ok {
			if err := v.validate(); err != nil {
				var zero Out
				return nil, zero, err
			}
		}
		return h(ctx, t.api.callerOf(ctx, req), in)
	})
}

// validator is arguments that check themselves (beyond their schema).
type validator interface{ validate() error }

// checkID refuses an id that is empty or a path segment of its own.
func checkID(name, id string) error {
	if id == "" || id == "." || id == ".." {
		return fmt.Errorf("%s %q is not an id", name, id)
	}
	return nil
}

// Tool annotations.
var (
	yes, no     = true, false
	readOnly    = &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	mutating    = &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no}
	idempotent  = &sdk.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no}
	destructive = &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no}
	// Code and commands may do anything inside the sandbox, network included.
	running = &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes}
)
