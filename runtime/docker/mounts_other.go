//go:build !linux

package docker

import (
	"errors"
	"os"
)

// Off Linux the engine runs in a VM (Docker Desktop): sandboxd cannot pin
// mounts there, so host paths below another container's read-write mount
// are refused (planMounts) and subPath needs an engine that honours it.

func onEngineHost(string) error {
	return errors.New("sandboxd does not run on the engine's Linux host")
}

func pin(*os.File, string) error { return errors.New("cannot pin mounts here") }

func unpin(string) {}
