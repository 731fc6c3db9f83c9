//go:build !linux

package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Off Linux the engine runs in a VM (Docker Desktop): sandboxd cannot pin
// mounts there, so host paths below another container's read-write mount
// are refused (planMounts) and subPath needs an engine that honours it.

func onEngineHost(string) error {
	return errors.New("sandboxd does not run on the engine's Linux host")
}

// openBeneath checks that rel below base has no symlink, creating missing
// directories. Without pinning this is advisory: the path is handed to
// the engine as a string.
func openBeneath(base, rel string) (*os.File, error) {
	p := base
	for _, name := range strings.Split(filepath.ToSlash(rel), "/") {
		if name == "." || name == "" {
			continue
		}
		p = filepath.Join(p, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			if err = os.Mkdir(p, 0o755); err == nil {
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symlink", p)
		}
	}
	return os.Open(p)
}

func pin(*os.File, string) error { return errors.New("cannot pin mounts here") }

func unpin(string) {}
