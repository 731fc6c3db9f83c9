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
	// kernel died, its connection broke). One run at a time. Once stop is
	// closed the run is interrupted, whenever that happens (see
	// runSlot.interruptOnStart).
	execute(code string, handle func(kernelMsg), stop <-chan struct{}) error
	// interrupt interrupts the kernel now, as Jupyter's interrupt does: code
	// it runs stops, and an idle kernel ignores it.
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
	// started: the kernel has said it runs the code (execute_input); an
	// interrupt before that finds it between cells, where kernels ignore
	// interrupts, so it waits in pending.
	started bool
	pending func() error
	// interrupted: the run was interrupted; replied: the kernel answered
	// its request (execute_reply). An interrupt can land in the kernel's
	// handler before the cell's code runs: ipykernel then logs it and goes
	// idle without a reply or an error, and the run would look complete.
	interrupted, replied bool
}

// begin makes id the current run. The returned channel receives the run's
// end.
func (s *runSlot) begin(id string, handle func(kernelMsg)) <-chan error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.handle, s.done = id, handle, make(chan error, 1)
	s.reset()
	return s.done
}

// interruptOnStart interrupts the current run with send: at once if the
// kernel runs its code already, else as soon as it says it does. early also
// sends at once a run not started (for a kernel that may never say so).
// This is what makes an interrupt right after a run's start work: the
// kernel of a new context may take a second to take the code up.
func (s *runSlot) interruptOnStart(send func() error, early bool) error {
	s.mu.Lock()
	if s.done == nil {
		s.mu.Unlock()
		return nil // the run is over
	}
	if !s.started {
		s.pending = send
	}
	s.interrupted = true
	started := s.started
	s.mu.Unlock()
	if started || early {
		return send()
	}
	return nil
}

// watchStop interrupts the run whose end is done once stop is closed.
func (s *runSlot) watchStop(stop <-chan struct{}, done <-chan struct{}, send func() error, early bool) {
	go func() {
		select {
		case <-stop:
			_ = s.interruptOnStart(send, early)
		case <-done:
		}
	}()
}

// end forgets the current run.
func (s *runSlot) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.handle, s.done = "", nil, nil
	s.reset()
}

func (s *runSlot) reset() {
	s.started, s.pending, s.interrupted, s.replied = false, nil, false, false
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
			if s.interrupted && !s.replied {
				s.handle(kernelMsg{msgType: "error", content: interruptedBeforeRun})
			}
			s.finishLocked(nil)
		}
		return
	}
	if m.msgType == "execute_reply" {
		s.replied = true
	}
	if m.msgType == "execute_input" && !s.started {
		s.started = true
		if send := s.pending; send != nil {
			s.pending = nil
			go func() { _ = send() }()
		}
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
	s.reset()
}

// interruptedBeforeRun is the error of a run interrupted before its code ran.
var interruptedBeforeRun = json.RawMessage(`{"ename":"KeyboardInterrupt","evalue":"interrupted before the cell ran","traceback":[]}`)
