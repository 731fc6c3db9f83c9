//go:build !linux

package docker

import (
	"context"
	"errors"

	"github.com/sandboxd/sandboxd/runtime/agent"
)

var errNoDaemon = errors.New("no agent daemon listens in the sandbox")

// dialDirect: off Linux the engine runs in a VM; engineHost never allows
// the direct path there.
func (d *Docker) dialDirect(context.Context, string) (*agent.Client, error) {
	return nil, errors.New("the direct path needs Linux")
}
