//go:build linux

package agent

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

const (
	// maxMemoryLog bounds the output kept in memory when no temp file can
	// be created (read-only sandbox); later output is dropped.
	maxMemoryLog = 16 << 20
	// checkpointEvery is how many lines apart the log remembers offsets, so
	// that a line cursor is found without reading the log from the start.
	checkpointEvery = 1024
)

// outputLog holds the combined output of a background command, in an
// unlinked temp file or, failing that, in memory, and finds lines by
// number. The file has no name while it is written: nothing of it is left
// behind if the agent dies, and a snapshot of the sandbox's filesystem
// never carries another user's command output.
type outputLog struct {
	log *slog.Logger

	mu          sync.Mutex
	file        *os.File // nil: output is in mem
	mem         []byte
	size        int64
	lines       int64   // complete lines
	tail        int64   // offset where the incomplete last line starts
	checkpoints []int64 // checkpoints[i] is where line i*checkpointEvery starts
	dropping    bool
}

func newOutputLog(dir, id string, log *slog.Logger) *outputLog {
	l := &outputLog{log: log, checkpoints: []int64{0}}
	f, err := os.OpenFile(filepath.Join(dir, "sandboxd-"+id+".output"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		log.Info("keeping background output in memory", "id", id, "err", err)
		return l
	}
	if err := os.Remove(f.Name()); err != nil {
		log.Warn("background output file stays in the sandbox's filesystem", "path", f.Name(), "err", err)
	}
	l.file = f
	return l
}

// write appends p. Its errors are logged, not returned: the command must
// keep running whatever happens to its log.
func (l *outputLog) write(p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropping {
		return
	}
	switch {
	case l.file != nil:
		if _, err := l.file.Write(p); err != nil {
			l.log.Warn("background output dropped", "err", err)
			l.dropping = true
			return
		}
	case l.size+int64(len(p)) > maxMemoryLog:
		l.log.Warn("background output exceeds the in-memory limit; dropping the rest")
		l.dropping = true
		return
	default:
		l.mem = append(l.mem, p...)
	}
	base := l.size
	for i := 0; ; {
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			break
		}
		i += j + 1
		l.lines++
		l.tail = base + int64(i)
		if l.lines%checkpointEvery == 0 {
			l.checkpoints = append(l.checkpoints, l.tail)
		}
	}
	l.size += int64(len(p))
}

// linesAfter returns the output from 0-based line cursor on, and the cursor
// that follows it. An incomplete last line is included, and counted, only
// once the command has finished, so that a client never sees half a line
// twice.
func (l *outputLog) linesAfter(cursor int64, finished bool) (io.Reader, int64, error) {
	l.mu.Lock()
	total, end := l.lines, l.tail
	if finished && l.size > l.tail {
		total, end = total+1, l.size
	}
	cp := min(cursor/checkpointEvery, int64(len(l.checkpoints)-1))
	from, skip := l.checkpoints[cp], cursor-cp*checkpointEvery
	var r io.ReaderAt = l.file
	if l.file == nil {
		r = bytes.NewReader(l.mem[:end])
	}
	l.mu.Unlock()

	if cursor >= total {
		return bytes.NewReader(nil), total, nil
	}
	start, err := lineOffset(r, from, skip, end)
	if err != nil {
		return nil, 0, fmt.Errorf("read background output: %w", err)
	}
	return io.NewSectionReader(r, start, end-start), total, nil
}

// lineOffset returns the offset of the line n lines after the one starting
// at from.
func lineOffset(r io.ReaderAt, from, n, end int64) (int64, error) {
	buf := make([]byte, 32<<10)
	off := from
	for n > 0 && off < end {
		k, err := r.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
		for i := 0; i < k && n > 0; {
			j := bytes.IndexByte(buf[i:k], '\n')
			if j < 0 {
				break
			}
			i += j + 1
			n--
			if n == 0 {
				return off + int64(i), nil
			}
		}
		off += int64(k)
		if err != nil && err != io.EOF {
			return 0, err
		}
		if k == 0 {
			break
		}
	}
	return off, nil
}

// release deletes the log.
func (l *outputLog) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		l.file.Close()
	}
	l.mem, l.dropping = nil, true
}
