//go:build linux

package agent

import (
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	pumpBufferSize = 64 << 10
	// maxDrain bounds the final non-blocking read after a command exits, in
	// case a process it left behind keeps writing.
	maxDrain = 16 << 20
)

// pumpBuffers holds the pumps' buffers: a command's two pumps would
// otherwise allocate (and clear) 128 KiB per command. Sinks copy what
// they keep.
var pumpBuffers = sync.Pool{New: func() any {
	b := make([]byte, pumpBufferSize)
	return &b
}}

// pump copies what a child writes to a pipe (or a PTY master) to sink.
//
// Reading until EOF is not enough to know a command is over: a process it
// started in the background inherits the pipe and may hold it open forever.
// So once the command has exited, exited makes the pump take what is already
// buffered in the pipe and then settle. After settling the pump keeps reading
// until EOF, so that processes left behind never get EPIPE, passing data on
// only if keep is set (background logs); otherwise it discards it.
type pump struct {
	f       *os.File
	sink    func([]byte)
	settle  func() // called once, before settled is closed; may be nil
	keep    bool
	settled chan struct{}
}

// startPump starts copying f, which must be pollable (os.Pipe, or a
// non-blocking PTY master), and closes it at EOF.
func startPump(f *os.File, sink func([]byte), settle func(), keep bool) *pump {
	p := &pump{f: f, sink: sink, settle: settle, keep: keep, settled: make(chan struct{})}
	go p.run()
	return p
}

// exited tells the pump that the writer has exited: it interrupts a blocked
// read so that the pump drains the pipe and settles.
func (p *pump) exited() {
	_ = p.f.SetReadDeadline(time.Now()) // fails only if the pump is already done
}

// wait returns when the pump has settled.
func (p *pump) wait() { <-p.settled }

func (p *pump) run() {
	defer p.f.Close()
	b := pumpBuffers.Get().(*[]byte)
	defer pumpBuffers.Put(b)
	buf := *b
	settled := false
	settle := func() {
		if settled {
			return
		}
		settled = true
		if p.settle != nil {
			p.settle()
		}
		close(p.settled)
	}
	defer settle()
	for {
		n, err := p.f.Read(buf)
		if n > 0 && (!settled || p.keep) {
			p.sink(buf[:n])
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded) && !settled:
			p.drain(buf)
			settle()
		default: // EOF, or EIO from a PTY master whose terminal is gone
			return
		}
	}
}

// drain reads what the pipe holds without blocking.
func (p *pump) drain(buf []byte) {
	if err := p.f.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	rc, err := p.f.SyscallConn()
	if err != nil {
		return
	}
	total := 0
	_ = rc.Read(func(fd uintptr) bool {
		for total < maxDrain {
			n, err := unix.Read(int(fd), buf)
			if err == unix.EINTR {
				continue
			}
			if n <= 0 || err != nil {
				break
			}
			p.sink(buf[:n])
			total += n
		}
		return true // never wait for readiness
	})
}
