package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Install is `install-agent DIR`: the init container of a Kubernetes
// sandbox pod copies the agent binary open returns into the pod's agent
// volume (DIR/sandboxd), which the sandbox container mounts read-only. The
// image is FROM scratch: there is no cp to do it.
func Install(args []string, open func() (io.ReadCloser, error)) error {
	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		return errors.New("usage: install-agent DIR (an absolute path)")
	}
	src, err := open()
	if err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	defer src.Close()
	dst := filepath.Join(args[0], "sandboxd")
	tmp, err := os.CreateTemp(args[0], ".sandboxd-*")
	if err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install agent: copy to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("install agent: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	// A complete binary or none: the sandbox never runs a half-copied agent.
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	return nil
}

// OpenSelf opens the running executable: the agent binary installs itself.
func OpenSelf() (io.ReadCloser, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary: %w", err)
	}
	return os.Open(self)
}
