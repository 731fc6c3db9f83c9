//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"sync"
)

// kernel is what runs the code of one context: a Jupyter kernel or a
// Python driver started by the agent.
type kernel interface {
	// execute runs code and hands the kernel's messages about it to handle,
	// in order, until the kernel is idle again (nil) or cannot go on (the
	// kernel died, its connection broke). One run at a time.
	execute(code string, handle func(kernelMsg)) error
	// interrupt stops the running code, if any.
	interrupt() error
	// shutdown stops the kernel for good.
	shutdown() error
}

// errKernelDead is the error of runs on a kernel that is gone.
var errKernelDead = errors.New("the kernel of this context has died; create a new context")

// runSlot routes the messages a kernel sends to the run they answer, by the
// id of the request (upstream execd does not filter, so that a stray status
// message can end a run early).
type runSlot struct {
	mu     sync.Mutex
	id     string
	handle func(kernelMsg)
	done   chan error
}

// begin makes id the current run. The returned channel receives the run's
// end.
func (s *runSlot) begin(id string, handle func(kernelMsg)) <-chan error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.handle, s.done = id, handle, make(chan error, 1)
	return s.done
}

// end forgets the current run.
func (s *runSlot) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.handle, s.done = "", nil, nil
}

// deliver passes a message answering request parent to its run: a status
// of idle ends the run, anything else goes to its handler. Messages of
// other (finished) requests are dropped. handle is called with the lock
// held, so that a run never sees a message after it ended.
func (s *runSlot) deliver(parent string, m kernelMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil || parent != s.id {
		return
	}
	if m.msgType == "status" {
		var c struct {
			State string `json:"execution_state"`
		}
		if json.Unmarshal(m.content, &c) == nil && c.State == "idle" {
			s.finishLocked(nil)
		}
		return
	}
	s.handle(m)
}

// fail ends the current run, if any, with err.
func (s *runSlot) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishLocked(err)
}

func (s *runSlot) finishLocked(err error) {
	if s.done == nil {
		return
	}
	s.done <- err
	s.id, s.handle, s.done = "", nil, nil
}
