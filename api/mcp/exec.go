package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxResultBytes bounds the results (images included) kept from one
// code_run: the code in the sandbox decides how many it displays, and each
// is held until the run ends.
const maxResultBytes = 8 << 20

// maxStreamText bounds the text of stdout and of stderr kept from one run;
// the start and the end are kept, and the result says how much was left out.
const maxStreamText = 64 << 10

// clipped collects a stream's text, keeping its first and last parts.
type clipped struct {
	head, tail []byte
	omitted    int64
}

func (c *clipped) add(s string) {
	if len(c.head) < maxStreamText/2 {
		n := min(len(s), maxStreamText/2-len(c.head))
		c.head = append(c.head, s[:n]...)
		s = s[n:]
	}
	c.tail = append(c.tail, s...)
	if over := len(c.tail) - maxStreamText/2; over > 0 {
		c.omitted += int64(over)
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
}

// text is the kept text, with a marker where some was left out that says
// how to see the rest.
func (c *clipped) text(what, seeAll string) string {
	if c.omitted == 0 {
		return string(c.head) + string(c.tail)
	}
	return fmt.Sprintf("%s\n[... %d bytes of %s left out; %s ...]\n%s", c.head, c.omitted, what, seeAll, c.tail)
}

// Where the rest of a long output is.
const (
	seeAllCommand = "to see all of it, run the command again with its output redirected to a file (cmd > /tmp/out.txt 2>&1) and read that with file_read and range_header"
	seeAllCode    = "to see all of it, write it to a file in the code and read that with file_read and range_header"
)

// Output is one piece of a command's output (upstream's OutputMessage).
type Output struct {
	Text      string `json:"text"`
	Timestamp int64  `json:"timestamp"`
	IsError   bool   `json:"is_error"`
}

// ExecError is a failed run's error.
type ExecError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Timestamp int64    `json:"timestamp"`
	Traceback []string `json:"traceback"`
}

// Execution is a command's run, in upstream opensandbox-mcp's shape.
type Execution struct {
	ID             string `json:"id,omitempty" jsonschema:"the execution id, for command_interrupt and command_logs"`
	ExecutionCount int    `json:"execution_count,omitempty"`
	Result         []struct {
		Text      string `json:"text"`
		Timestamp int64  `json:"timestamp"`
	} `json:"result"`
	Error    *ExecError `json:"error,omitempty" jsonschema:"set when the command failed: value is its exit code"`
	Complete *struct {
		Timestamp             int64 `json:"timestamp"`
		ExecutionTimeInMillis int64 `json:"execution_time_in_millis"`
	} `json:"complete,omitempty"`
	ExitCode *int `json:"exit_code,omitempty"`
	Logs     struct {
		Stdout []Output `json:"stdout"`
		Stderr []Output `json:"stderr"`
	} `json:"logs"`
}

// CommandArgs are command_run's arguments (upstream's, plus a timeout and
// an environment).
type CommandArgs struct {
	sandboxArg
	compatArg
	Command          string            `json:"command" jsonschema:"shell command line, run with bash -c (sh without bash)"`
	Background       bool              `json:"background,omitempty" jsonschema:"start it and return at once with its id; read its output with command_logs"`
	WorkingDirectory string            `json:"working_directory,omitempty" jsonschema:"directory to run in (must exist)"`
	TimeoutSeconds   float64           `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds (default: none)"`
	Env              map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
}

// InterruptArgs name a running command.
type InterruptArgs struct {
	sandboxArg
	compatArg
	ExecutionID string `json:"execution_id" jsonschema:"the id command_run returned"`
}

// LogsArgs are command_logs' arguments.
type LogsArgs struct {
	sandboxArg
	ExecutionID string `json:"execution_id" jsonschema:"the id command_run returned for a background command"`
	Cursor      int64  `json:"cursor,omitempty" jsonschema:"line to start after (0 for all; then next_cursor of the previous call)"`
}

// LogsResult is a background command's output and state.
type LogsResult struct {
	Running    bool   `json:"running"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Output     string `json:"output" jsonschema:"stdout and stderr lines after cursor"`
	NextCursor int64  `json:"next_cursor" jsonschema:"pass it as cursor to read on"`
	Truncated  bool   `json:"truncated,omitempty" jsonschema:"more lines than fit: call again with next_cursor"`
}

// CodeArgs are code_run's arguments.
type CodeArgs struct {
	sandboxArg
	Code           string  `json:"code" jsonschema:"the code to run, as a notebook cell: the value of its last expression is returned"`
	Language       string  `json:"language,omitempty" jsonschema:"python (default), or another language whose kernel the image has: bash, javascript, typescript, java, go"`
	ContextID      string  `json:"context_id,omitempty" jsonschema:"run in this context (from an earlier code_run or code_context_create) to keep its variables and imports; a new context is made when absent"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"give up waiting after this many seconds (the run is interrupted)"`
}

// CodeResult is a code run's outcome.
type CodeResult struct {
	ContextID      string           `json:"context_id" jsonschema:"pass it to the next code_run to keep this run's state"`
	ExecutionCount int              `json:"execution_count,omitempty"`
	Stdout         string           `json:"stdout"`
	Stderr         string           `json:"stderr"`
	Results        []map[string]any `json:"results" jsonschema:"the cell's value and displayed outputs, by MIME type; images are returned as image content and named here only"`
	OmittedResults int              `json:"omitted_results,omitempty" jsonschema:"results left out once 8 MiB of them were kept"`
	Error          *ExecError       `json:"error,omitempty"`
}

// ContextArgs are code_context_create's arguments.
type ContextArgs struct {
	sandboxArg
	Language string `json:"language,omitempty" jsonschema:"python (default) or another kernel's language"`
}

// CodeContext is a code context.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
}

// ContextIDArgs name a code context.
type ContextIDArgs struct {
	sandboxArg
	ContextID string `json:"context_id"`
}

// ContextList is a list of code contexts.
type ContextList struct {
	Result []CodeContext `json:"result"`
}

func (t *tools) addExecTools(s *sdk.Server) {
	add(s, t, &sdk.Tool{Name: "command_run", Annotations: running, Description: `Run a shell command in a sandbox and wait for it to finish (unless background is true).
Use it for shell work: installing packages, running programs and tests, inspecting the system. Each call is a new shell: cd and variables do not carry over (use working_directory and env).
Returns the execution: logs.stdout and logs.stderr (lines), exit_code, and error (set when the command failed, its value the exit code).
Long output keeps its start and end and says how much was left out.`}, t.commandRun)
	add(s, t, &sdk.Tool{Name: "command_interrupt", Annotations: destructive, Description: `Stop a running command (background or not) by its execution id: SIGTERM, then SIGKILL. Returns {status: "interrupted"}.`},
		func(ctx context.Context, c *caller, in InterruptArgs) (*sdk.CallToolResult, StatusResult, error) {
			err := c.json(ctx, http.MethodDelete, execdPath(in.SandboxID, "/command"), url.Values{"id": {in.ExecutionID}}, nil, nil)
			return nil, StatusResult{Status: "interrupted"}, err
		})
	add(s, t, &sdk.Tool{Name: "command_logs", Annotations: readOnly, Description: `Read the output of a background command (command_run with background true) and whether it still runs.
Returns {running, exit_code, output, next_cursor}; call again with cursor = next_cursor to read only what came since.`}, t.commandLogs)
	add(s, t, &sdk.Tool{Name: "code_run", Annotations: running, Description: `Run code in a sandbox's notebook kernel (Python by default), like a Jupyter cell. Needs an image with a kernel, e.g. opensandbox/code-interpreter:v1.1.0.
Variables, imports and functions persist within a context: pass the returned context_id to the next code_run to continue where this one left off.
Returns stdout, stderr, the cell's value and displayed outputs (images such as matplotlib figures come back as image content), and context_id.
An exception is a tool error with its traceback.`}, t.codeRun)
	add(s, t, &sdk.Tool{Name: "code_context_create", Annotations: mutating, Description: `Create a new code context (a fresh kernel state) for code_run. Returns {id, language}; pass id as code_run's context_id.`},
		func(ctx context.Context, c *caller, in ContextArgs) (*sdk.CallToolResult, CodeContext, error) {
			cc, err := c.newContext(ctx, in.SandboxID, languageOr(in.Language))
			return nil, cc, err
		})
	add(s, t, &sdk.Tool{Name: "code_context_list", Annotations: readOnly, Description: `List a sandbox's code contexts, optionally of one language. Returns {result: [{id, language}]}.`},
		func(ctx context.Context, c *caller, in ContextArgs) (*sdk.CallToolResult, ContextList, error) {
			var q url.Values
			if in.Language != "" {
				q = url.Values{"language": {in.Language}}
			}
			out := ContextList{Result: []CodeContext{}}
			err := c.json(ctx, http.MethodGet, execdPath(in.SandboxID, "/code/contexts"), q, nil, &out.Result)
			return nil, out, err
		})
	add(s, t, &sdk.Tool{Name: "code_context_delete", Annotations: destructive, Description: `Delete a code context and its state. Returns {status: "deleted"}.`},
		func(ctx context.Context, c *caller, in ContextIDArgs) (*sdk.CallToolResult, StatusResult, error) {
			if in.ContextID == "" {
				return nil, StatusResult{}, errors.New("context_id must not be empty")
			}
			err := c.json(ctx, http.MethodDelete, execdPath(in.SandboxID, "/code/contexts/"+url.PathEscape(in.ContextID)), nil, nil, nil)
			return nil, StatusResult{Status: "deleted"}, err
		})
}

func timeDuration(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }

func languageOr(l string) string {
	if l == "" {
		return "python"
	}
	return l
}

func (t *tools) commandRun(ctx context.Context, c *caller, in CommandArgs) (*sdk.CallToolResult, Execution, error) {
	var ex Execution
	ex.Logs.Stdout, ex.Logs.Stderr = []Output{}, []Output{}
	if strings.TrimSpace(in.Command) == "" {
		return nil, ex, errors.New("command must not be empty")
	}
	if in.TimeoutSeconds < 0 {
		return nil, ex, errors.New("timeout_seconds must not be negative")
	}
	body := map[string]any{"command": in.Command}
	if in.Background {
		body["background"] = true
	}
	if in.WorkingDirectory != "" {
		body["cwd"] = in.WorkingDirectory
	}
	if in.TimeoutSeconds > 0 {
		body["timeout"] = max(int64(in.TimeoutSeconds*1000), 1)
	}
	setIf(body, "envs", in.Env)
	var out, errs clipped
	var outTS, errTS int64
	err := c.stream(ctx, execdPath(in.SandboxID, "/command"), body, func(ev event) bool {
		switch ev.Type {
		case "init":
			ex.ID = ev.Text
		case "stdout":
			out.add(line(ev.Text))
			outTS = ev.Timestamp
		case "stderr":
			errs.add(line(ev.Text))
			errTS = ev.Timestamp
		case "error":
			if ev.Error != nil {
				ex.Error = &ExecError{Name: ev.Error.Name, Value: ev.Error.Value, Timestamp: ev.Timestamp, Traceback: orEmpty(ev.Error.Traceback)}
				if code, err := strconv.Atoi(ev.Error.Value); err == nil {
					ex.ExitCode = &code
				}
			}
		case "execution_complete":
			ex.Complete = &struct {
				Timestamp             int64 `json:"timestamp"`
				ExecutionTimeInMillis int64 `json:"execution_time_in_millis"`
			}{ev.Timestamp, ev.ExecutionTime}
			if ex.ExitCode == nil && !in.Background {
				zero := 0
				ex.ExitCode = &zero
			}
		}
		return true
	})
	if err != nil {
		return nil, ex, err
	}
	// One entry per stream: the lines, clipped as a whole.
	if s := out.text("stdout", seeAllCommand); s != "" {
		ex.Logs.Stdout = []Output{{Text: s, Timestamp: outTS}}
	}
	if s := errs.text("stderr", seeAllCommand); s != "" {
		ex.Logs.Stderr = []Output{{Text: s, Timestamp: errTS, IsError: true}}
	}
	return nil, ex, nil
}

// line is an event's text as a line: execd sends one line per event.
func line(s string) string {
	if strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// maxLogText bounds the output command_logs returns at once.
const maxLogText = 64 << 10

func (t *tools) commandLogs(ctx context.Context, c *caller, in LogsArgs) (*sdk.CallToolResult, LogsResult, error) {
	var out LogsResult
	if in.ExecutionID == "" {
		return nil, out, errors.New("execution_id must not be empty")
	}
	var st struct {
		Running  bool `json:"running"`
		ExitCode *int `json:"exit_code"`
	}
	if err := c.json(ctx, http.MethodGet, execdPath(in.SandboxID, "/command/status/"+url.PathEscape(in.ExecutionID)), nil, nil, &st); err != nil {
		return nil, out, err
	}
	out.Running, out.ExitCode = st.Running, st.ExitCode
	res, err := c.do(ctx, http.MethodGet, execdPath(in.SandboxID, "/command/"+url.PathEscape(in.ExecutionID)+"/logs"),
		url.Values{"cursor": {strconv.FormatInt(in.Cursor, 10)}}, nil, "", nil)
	if err != nil {
		return nil, out, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxLogText+1))
	if err != nil {
		return nil, out, err
	}
	out.NextCursor, _ = strconv.ParseInt(res.Header.Get("EXECD-COMMANDS-TAIL-CURSOR"), 10, 64)
	if len(data) > maxLogText {
		// Whole lines only, so that the cursor names where the rest starts.
		data = data[:maxLogText]
		cut := strings.LastIndexByte(string(data), '\n') + 1
		out.NextCursor = in.Cursor + int64(strings.Count(string(data[:cut]), "\n"))
		data, out.Truncated = data[:cut], true
	}
	out.Output = string(data)
	return nil, out, nil
}

func (c *caller) newContext(ctx context.Context, sandbox, language string) (CodeContext, error) {
	var cc CodeContext
	err := c.json(ctx, http.MethodPost, execdPath(sandbox, "/code/context"), nil, map[string]string{"language": language}, &cc)
	return cc, err
}

// images are the MIME types code_run returns as image content.
var images = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// ansi matches terminal escape sequences, which Jupyter puts in tracebacks.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

func (t *tools) codeRun(ctx context.Context, c *caller, in CodeArgs) (*sdk.CallToolResult, CodeResult, error) {
	out := CodeResult{Results: []map[string]any{}}
	if strings.TrimSpace(in.Code) == "" {
		return nil, out, errors.New("code must not be empty")
	}
	if in.TimeoutSeconds < 0 {
		return nil, out, errors.New("timeout_seconds must not be negative")
	}
	language := languageOr(in.Language)
	out.ContextID = in.ContextID
	if out.ContextID == "" {
		cc, err := c.newContext(ctx, in.SandboxID, language)
		if err != nil {
			return nil, out, err
		}
		out.ContextID = cc.ID
	}
	if in.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeDuration(in.TimeoutSeconds))
		defer cancel()
	}
	var stdout, stderr clipped
	var content []sdk.Content
	kept := 0 // bytes of results kept, as execd sent them
	body := map[string]any{"code": in.Code, "context": map[string]string{"id": out.ContextID, "language": language}}
	err := c.stream(ctx, execdPath(in.SandboxID, "/code"), body, func(ev event) bool {
		switch ev.Type {
		case "stdout":
			stdout.add(ev.Text)
		case "stderr":
			stderr.add(ev.Text)
		case "execution_count":
			out.ExecutionCount = ev.ExecutionCount
		case "result":
			size := 0
			for _, raw := range ev.Results {
				size += len(raw)
			}
			if kept+size > maxResultBytes {
				out.OmittedResults++
				break
			}
			kept += size
			r, imgs := splitResult(ev.Results)
			content = append(content, imgs...)
			if len(r) > 0 {
				out.Results = append(out.Results, r)
			}
		case "error":
			if ev.Error != nil {
				tb := make([]string, len(ev.Error.Traceback))
				for i, l := range ev.Error.Traceback {
					tb[i] = ansi.ReplaceAllString(l, "")
				}
				out.Error = &ExecError{Name: ev.Error.Name, Value: ev.Error.Value, Timestamp: ev.Timestamp, Traceback: tb}
			}
		}
		return true
	})
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("code_run gave up after %v seconds; the run was interrupted (context %s keeps its earlier state)", in.TimeoutSeconds, out.ContextID)
	}
	if err != nil {
		return nil, out, err
	}
	out.Stdout, out.Stderr = stdout.text("stdout", seeAllCode), stderr.text("stderr", seeAllCode)
	res := &sdk.CallToolResult{}
	summary, _ := json.MarshalIndent(out, "", "  ")
	res.Content = append([]sdk.Content{&sdk.TextContent{Text: string(summary)}}, content...)
	if out.Error != nil {
		// The exception is the tool's error, with the traceback to fix it by.
		res.IsError = true
		res.Content = append([]sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%s: %s\n%s", out.Error.Name, out.Error.Value, strings.Join(out.Error.Traceback, "\n"))}}, res.Content...)
	}
	return res, out, nil
}

// splitResult takes the images out of a result's MIME bundle (execd names
// text/plain "text") and returns the rest, with a note for each image.
func splitResult(bundle map[string]json.RawMessage) (map[string]any, []sdk.Content) {
	r := map[string]any{}
	var imgs []sdk.Content
	for mime, raw := range bundle {
		var s string
		if images[mime] && json.Unmarshal(raw, &s) == nil {
			data, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(strings.TrimSpace(s), "\n", ""))
			if err == nil {
				imgs = append(imgs, &sdk.ImageContent{Data: data, MIMEType: mime})
				r[mime] = fmt.Sprintf("(%d bytes, returned as image content)", len(data))
				continue
			}
		}
		if mime == "text" {
			mime = "text/plain"
		}
		var v any
		if json.Unmarshal(raw, &v) == nil {
			if s, ok := v.(string); ok && len(s) > maxStreamText {
				v = s[:maxStreamText] + fmt.Sprintf("\n[... %d more bytes left out]", len(s)-maxStreamText)
			}
			r[mime] = v
		}
	}
	return r, imgs
}
