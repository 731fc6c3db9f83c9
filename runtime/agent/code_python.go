//go:build linux

package agent

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
)

// pythonDriver is the program that runs a context's cells when the sandbox
// has no Jupyter server: see its doc string for the protocol.
//
//go:embed code_driver.py
var pythonDriver string

// maxDriverMessage bounds one message of the driver (a cell's value with its
// images, or one output chunk), so that a runaway repr cannot exhaust the
// agent's memory.
const maxDriverMessage = 256 << 20

// findPython locates python3 like findShell locates the shell.
func findPython() (string, error) {
	if p, err := exec.LookPath("python3"); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/bin"} {
		if p := filepath.Join(dir, "python3"); isExecutable(p) {
			return p, nil
		}
	}
	return "", errors.New("python3 not found")
}

// pythonKernel is a persistent Python process driven by pythonDriver.
type pythonKernel struct {
	proc *process
	reqs *os.File // requests to the driver

	slot   runSlot
	mu     sync.Mutex // serialises requests
	dead   chan struct{}
	deadMu sync.Mutex
	why    error // why the driver is dead
}

// startPython starts a driver in dir (the agent's directory if empty).
func startPython(python, dir string) (*pythonKernel, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	msgR, msgW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	cmd := exec.Command(python, "-c", pythonDriver)
	cmd.Dir = dir
	// Figures are drawn by Agg and shown by the driver's inline backend.
	cmd.Env = mergeEnv(os.Environ(), map[string]string{"MPLBACKEND": "module://sandboxd_inline"})
	cmd.ExtraFiles = []*os.File{reqR, msgW} // fds 3 and 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	reqR.Close()
	msgW.Close()
	if err != nil {
		reqW.Close()
		msgR.Close()
		return nil, fmt.Errorf("start python: %w", err)
	}
	k := &pythonKernel{proc: adopt(cmd), reqs: reqW, dead: make(chan struct{})}
	go k.read(msgR)
	return k, nil
}

// read delivers the driver's messages until it exits.
func (k *pythonKernel) read(r *os.File) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var line []byte
		if line, err = readLine(br, maxDriverMessage); err != nil {
			break
		}
		var m struct {
			Parent  string          `json:"parent"`
			MsgType string          `json:"msg_type"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		k.slot.deliver(m.Parent, kernelMsg{msgType: m.MsgType, content: m.Content})
	}
	if !errors.Is(err, io.EOF) {
		_ = k.proc.kill() // a message too large: the protocol cannot go on
	}
	<-k.proc.done
	_, desc := k.proc.result()
	k.deadMu.Lock()
	k.why = fmt.Errorf("%w (the Python process exited: %s)", errKernelDead, desc)
	k.deadMu.Unlock()
	close(k.dead)
	k.slot.fail(k.why)
}

// readLine reads one line of at most max bytes, without its newline.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, fmt.Errorf("driver message over %d bytes", max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, err
		}
	}
}

func (k *pythonKernel) execute(code string, handle func(kernelMsg), stop <-chan struct{}) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.dead:
		return k.deadErr()
	default:
	}
	id := newID()
	done := k.slot.begin(id, handle)
	defer k.slot.end()
	// The driver takes SIGINT only once it runs the cell: before, it may
	// not have set its handler yet, and Python would exit of it.
	finished := make(chan struct{})
	defer close(finished)
	k.slot.watchStop(stop, finished, k.sigint, false)
	req, _ := json.Marshal(struct {
		MsgID string `json:"msg_id"`
		Code  string `json:"code"`
	}{id, code})
	if _, err := k.reqs.Write(append(req, '\n')); err != nil {
		<-k.dead
		return k.deadErr()
	}
	return <-done
}

func (k *pythonKernel) deadErr() error {
	k.deadMu.Lock()
	defer k.deadMu.Unlock()
	return k.why
}

// interrupt is the interrupt of an idle context: between cells the driver
// has nothing to stop, and one still starting would die of a SIGINT.
func (k *pythonKernel) interrupt() error { return nil }

// sigint sends SIGINT to the driver's process group, as Jupyter does to a
// kernel: the cell gets KeyboardInterrupt, its child processes the signal.
func (k *pythonKernel) sigint() error {
	if err := k.proc.signal(syscall.SIGINT); err != nil && !errors.Is(err, errNotRunning) {
		return err
	}
	return nil
}

func (k *pythonKernel) shutdown() error {
	k.reqs.Close()
	err := k.proc.kill()
	if errors.Is(err, errNotRunning) {
		err = nil
	}
	<-k.dead
	return err
}
