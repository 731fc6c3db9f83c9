//go:build linux

package agent

import (
	"net/http"
	"os"
	"strings"
	"time"
)

// GET /_sandboxd/started answers once the sandbox's entrypoint runs, for
// sandboxd's create: an agent can answer before Docker's init (PID 1) has
// exec'd the entrypoint, and an entrypoint that is missing makes init exit
// with 127 a moment later, killing the agent with this request unanswered.
// So create does not report Running for a sandbox whose entrypoint never
// started, however the two race on a loaded machine.

const (
	startedPoll = 5 * time.Millisecond
	// startedLimit bounds the wait where something else holds up init.
	startedLimit = 10 * time.Second
)

func (s *server) entrypointStarted(w http.ResponseWriter, r *http.Request) {
	self, _ := os.Executable()
	deadline := time.Now().Add(startedLimit)
	for !entrypointExeced("/proc", self) && time.Now().Before(deadline) {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(startedPoll):
		}
	}
}

// entrypointExeced reports whether PID 1 (Docker's init) has a child that
// is no longer a copy of init, not counting this agent's own processes
// that init adopted. When it cannot tell (PID 1 is not readable, or the
// kernel lists no children), it says yes: the check must never hold up a
// sandbox.
func entrypointExeced(proc, self string) bool {
	init, err := os.Readlink(proc + "/1/exe")
	if err != nil {
		return true
	}
	children, err := os.ReadFile(proc + "/1/task/1/children")
	if err != nil {
		return true
	}
	for _, pid := range strings.Fields(string(children)) {
		exe, err := os.Readlink(proc + "/" + pid + "/exe")
		if err == nil && exe != init && exe != self {
			return true
		}
	}
	return false
}
