//go:build !linux

package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Off Linux the engine runs in a VM (Docker Desktop): sandboxd never pins
// mounts there and hands the engine path strings, so these walks are
// advisory (the runtime refuses paths below another container's
// read-write mount instead).

func openDir(p string) (*os.File, error) { return os.Open(p) }

// openPrefix resolves p and refuses it when it resolves into one of
// others without being named below it.
func openPrefix(p string, others []string) (*os.File, string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, "", err
	}
	for _, o := range others {
		if Within(real, o) && !Within(p, o) {
			return nil, "", fmt.Errorf("%s resolves to %s, inside the allowed prefix %s, through a symlink; list the directory it points to instead", p, real, o)
		}
	}
	f, err := os.Open(real)
	return f, real, err
}

func walkBeneath(dir *os.File, rel string) (*os.File, error) {
	if err := look(dir.Name(), rel, true); err != nil {
		return nil, err
	}
	return os.Open(filepath.Join(dir.Name(), rel))
}

func lookBeneath(dir *os.File, rel string) error { return look(dir.Name(), rel, false) }

// look checks that no component of rel below base is a symlink, creating
// missing directories if create is set.
func look(base, rel string, create bool) error {
	names, err := components(rel)
	if err != nil {
		return err
	}
	p := base
	for i, name := range names {
		p = filepath.Join(p, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			if !create {
				return nil
			}
			if err = os.Mkdir(p, 0o755); err == nil {
				continue
			}
		}
		switch {
		case err != nil:
			return err
		case fi.Mode()&os.ModeSymlink != 0:
			return fmt.Errorf("%s %w", p, errSymlink)
		case fi.IsDir(), fi.Mode().IsRegular() && i == len(names)-1:
		default:
			return fmt.Errorf("%s is %w", p, errKind)
		}
	}
	return nil
}
