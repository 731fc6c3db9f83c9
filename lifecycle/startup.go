package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// startupLogLines and startupLogBytes bound the container output quoted in
// the error of a sandbox whose entrypoint ended during create.
const (
	startupLogLines = 20
	startupLogBytes = 4 << 10
)

// awaitAgent waits, during create, until the agent of a just-started
// container answers. A client's first request would wait for it anyway, so
// a healthy create takes about as long as before (measured with
// interleaved creates); a container whose entrypoint ended at once (missing
// binary, exit 127) has no agent, and create then fails with the reason
// instead of answering Running to a sandbox that cannot run anything. An
// agent that fails for another reason is retried by the first request, as
// before.
func (d *deps) awaitAgent(ctx context.Context, rec *Record) error {
	err := d.agentGet(ctx, rec.ContainerID, "/_sandboxd/started")
	if err == nil {
		return nil
	}
	c, ierr := d.rt.Inspect(ctx, rec.ContainerID)
	if ierr != nil || c.State.Active() {
		d.log.WarnContext(ctx, "agent not ready at create; the first request retries", "sandbox_id", rec.ID, "err", err)
		return nil
	}
	msg := fmt.Sprintf("the sandbox's entrypoint %s exited with code %d right after it started", quoteArgv(rec.Entrypoint), c.ExitCode)
	if c.OOMKilled {
		msg += " (killed for exceeding its memory limit)"
	}
	if c.ExitCode == 126 || c.ExitCode == 127 {
		msg += "; 127 and 126 mean the program was not found in the image or is not executable: check the entrypoint's path for this image"
	}
	if tail := d.startupLog(ctx, rec.ContainerID); tail != "" {
		msg += ". Last lines of its output:\n" + tail
	} else {
		msg += "; it wrote no output"
	}
	return &Error{Kind: KindInternal, Code: CodeStartFailed, Message: msg}
}

// startupLog returns the last lines of a container's output, bounded.
func (d *deps) startupLog(ctx context.Context, cid string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rc, err := d.rt.Logs(ctx, cid, startupLogLines, time.Time{})
	if err != nil {
		return ""
	}
	defer rc.Close()
	data, _, _ := readTail(rc, startupLogBytes) // what was read before an error is still worth showing
	return strings.TrimRight(strings.ToValidUTF8(string(data), "\uFFFD"), "\n")
}

// quoteArgv renders an entrypoint as a JSON-like list, as the client sent it.
func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// readTail reads r to its end and returns its last max bytes, whether
// anything before them was dropped, and the error that ended the read early.
func readTail(r io.Reader, max int) ([]byte, bool, error) {
	var buf bytes.Buffer
	cut := false
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		buf.Write(chunk[:n])
		if over := buf.Len() - max; over > 0 {
			buf.Next(over)
			cut = true
		}
		if err == io.EOF {
			return buf.Bytes(), cut, nil
		}
		if err != nil {
			return buf.Bytes(), cut, err
		}
	}
}
