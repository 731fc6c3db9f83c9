//go:build linux

package agent

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Event types of the /code stream beyond those of /command (reference
// code-interpreter.md §4.3).
const (
	evExecutionCount = "execution_count"
	evResult         = "result"
	evStatus         = "status"
)

// kernelMsg is one message of a kernel about a run, in Jupyter's terms: both
// engines speak them (the Python driver sends the same shapes).
type kernelMsg struct {
	msgType string
	content json.RawMessage
}

// codeError is the error of a run, as execd sends it.
type codeError struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// codeRun translates the kernel messages of one run into execd events:
// stream chunks as they come (not split into lines, as upstream), the value
// of the cell as execution_count and result, display data (upstream drops
// it) as further results after the cell's value, an error as status and
// error, which end the stream; otherwise execution_complete ends it.
type codeRun struct {
	es       *eventStream
	begin    time.Time
	displays [][]byte // display data not sent yet: it follows the cell's value
	held     int      // bytes in displays
	failed   bool
}

// maxHeldDisplays bounds the display data held back for the cell's value;
// beyond it (a loop that draws hundreds of charts) it is sent at once.
const maxHeldDisplays = 8 << 20

func newCodeRun(es *eventStream) *codeRun {
	return &codeRun{es: es, begin: time.Now()}
}

// handle translates one message. Unknown or malformed messages are dropped,
// as Jupyter clients do.
func (r *codeRun) handle(m kernelMsg) {
	ts := time.Now().UnixMilli()
	switch m.msgType {
	case "stream":
		var c struct{ Name, Text string }
		if json.Unmarshal(m.content, &c) != nil || c.Text == "" {
			return
		}
		typ := evStdout
		if c.Name == "stderr" {
			typ = evStderr
		}
		r.es.write(appendTextEvent(nil, typ, c.Text, ts))
	case "execute_result":
		var c struct {
			ExecutionCount int                        `json:"execution_count"`
			Data           map[string]json.RawMessage `json:"data"`
		}
		if json.Unmarshal(m.content, &c) != nil {
			return
		}
		var b []byte
		if c.ExecutionCount > 0 {
			b = strconv.AppendInt([]byte(`{"type":"`+evExecutionCount+`","execution_count":`), int64(c.ExecutionCount), 10)
			b = appendTimestamp(b, ts)
		}
		if len(c.Data) > 0 {
			b = appendResultEvent(b, c.Data, ts)
		}
		r.es.write(b)
		r.flushDisplays()
	case "display_data":
		var c struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if json.Unmarshal(m.content, &c) != nil || len(c.Data) == 0 {
			return
		}
		b := appendResultEvent(nil, c.Data, ts)
		r.displays = append(r.displays, b)
		if r.held += len(b); r.held > maxHeldDisplays {
			r.flushDisplays()
		}
	case "error":
		var c codeError
		if json.Unmarshal(m.content, &c) != nil {
			return
		}
		r.fail(c)
	case "execute_reply":
		// A failed cell whose error message never came: a second
		// interrupt landing while IPython formats the first one's
		// traceback makes it print "KeyboardInterrupt" to stderr and send
		// no error, only this reply's.
		var c struct {
			Status string `json:"status"`
			codeError
		}
		if json.Unmarshal(m.content, &c) != nil {
			return
		}
		switch c.Status {
		case "error":
			if c.EName == "" {
				c.EName = "Error"
			}
			r.fail(c.codeError)
		case "aborted": // the kernel did not run the code
			r.fail(codeError{EName: "ExecutionAborted", EValue: "the kernel aborted the request without running the code"})
		}
	}
}

// fail sends the run's error: status, then error, as upstream does. Later
// errors of the same run are dropped, so that error stays the last event.
func (r *codeRun) fail(e codeError) {
	if r.failed {
		return
	}
	r.flushDisplays()
	r.failed = true
	if e.Traceback == nil {
		e.Traceback = []string{}
	}
	ts := time.Now().UnixMilli()
	b := appendTextEvent(nil, evStatus, "error", ts)
	b = append(b, `{"type":"`+evError+`","error":`...)
	b = appendJSONValue(b, e)
	r.es.write(appendTimestamp(b, ts))
}

// finish ends the stream once the kernel is idle again, or with err if the
// run could not complete (the kernel died, its connection broke).
func (r *codeRun) finish(err error) {
	r.flushDisplays()
	if err != nil {
		r.fail(codeError{EName: "KernelError", EValue: err.Error()})
		return
	}
	if !r.failed {
		r.es.complete(time.Since(r.begin))
	}
}

func (r *codeRun) flushDisplays() {
	for _, b := range r.displays {
		r.es.write(b)
	}
	r.displays, r.held = nil, 0
}

// appendResultEvent appends a result event with a MIME bundle, whose
// text/plain is called text as execd does (the Python SDK reads only that).
func appendResultEvent(dst []byte, data map[string]json.RawMessage, ts int64) []byte {
	if v, ok := data["text/plain"]; ok {
		data["text"] = v
		delete(data, "text/plain")
	}
	dst = append(dst, `{"type":"`+evResult+`","results":`...)
	dst = appendJSONValue(dst, data)
	return appendTimestamp(dst, ts)
}

// appendJSONValue appends v encoded by encoding/json (which escapes <, > and
// & like execd), also escaping U+0085 as appendJSONString does. Its UTF-8
// form can only occur inside strings, so the replacement is safe.
func appendJSONValue(dst []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("null")
	}
	return append(dst, bytes.ReplaceAll(b, []byte("\u0085"), []byte(`\u0085`))...)
}
