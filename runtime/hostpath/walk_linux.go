package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openDir opens directory p (following symlinks) as an O_PATH descriptor.
func openDir(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// openPrefix resolves p from / one component at a time, following
// symlinks itself so that it sees where each one lies, and opens the
// directory it reaches. A symlink in a directory within one of others
// (the other prefixes, by name and where they resolve) is refused.
func openPrefix(p string, others []string) (*os.File, string, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", err
	}
	cur := "/"
	todo := strings.Split(strings.TrimPrefix(p, "/"), "/")
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			next, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", p, err)
			}
			fd, cur = next, filepath.Dir(cur)
			continue
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.ENOENT) {
				return nil, "", fmt.Errorf("%s: %w", p, os.ErrNotExist)
			}
			return nil, "", fmt.Errorf("%s: %s: %w", p, filepath.Join(cur, name), err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			unix.Close(fd)
			return nil, "", err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			link := filepath.Join(cur, name)
			for _, o := range others {
				if Within(cur, o) {
					unix.Close(next)
					unix.Close(fd)
					return nil, "", fmt.Errorf("%s is reached through the symlink %s, which lies in the allowed prefix %s: a sandbox with that prefix mounted could point it anywhere; list the directory it points to instead", p, link, o)
				}
			}
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(next, "", buf)
			unix.Close(next)
			if links++; err != nil || links > 40 {
				unix.Close(fd)
				return nil, "", fmt.Errorf("%s: cannot follow %s: %v", p, link, err)
			}
			target := string(buf[:n])
			if filepath.IsAbs(target) {
				unix.Close(fd)
				if fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
					return nil, "", err
				}
				cur = "/"
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		case unix.S_IFDIR:
		default:
			unix.Close(next)
			unix.Close(fd)
			return nil, "", fmt.Errorf("%s: %s is not a directory", p, filepath.Join(cur, name))
		}
		unix.Close(fd)
		fd, cur = next, filepath.Join(cur, name)
	}
	return os.NewFile(uintptr(fd), cur), cur, nil
}

// walkBeneath opens each component of rel relative to the directory
// opened before, starting at dir, with O_NOFOLLOW, creating missing
// directories with mkdirat. A component that is a symlink when it is
// reached is refused, so a path swapped after the check either fails here
// or still yields the real directory: the returned descriptor is what
// gets mounted. (openat2 with RESOLVE_NO_SYMLINKS would walk in one call,
// but cannot create, and needs Linux 5.6.) The result is a directory or a
// regular file, opened O_PATH, and its path by descriptor is checked to
// be dir's path at open time joined with rel.
func walkBeneath(dir *os.File, rel string) (*os.File, error) {
	names, err := components(rel)
	if err != nil {
		return nil, err
	}
	want := filepath.Join(dir.Name(), rel)
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir.Name(), err)
	}
	for i, name := range names {
		flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(names)-1 {
			flags |= unix.O_DIRECTORY
		}
		next, err := unix.Openat(fd, name, flags, 0)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, name, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, name, flags|unix.O_DIRECTORY, 0)
			}
		}
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("%s: component %q is not a directory reached without following a symlink (was it swapped?): %w", want, name, err)
		}
		fd = next
	}
	f := os.NewFile(uintptr(fd), want)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%s is neither a directory nor a regular file (a symlink?)", want)
	}
	// Every step was relative to a descriptor, so the object is below
	// dir; its path names where it is now (a sandbox may have moved it, or
	// the prefix itself, within its own mount meanwhile: refuse rather
	// than guess).
	if at, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err != nil || at != want {
		f.Close()
		return nil, fmt.Errorf("%s moved while it was opened (now %q)", want, at)
	}
	return f, nil
}

// lookBeneath walks rel below dir as walkBeneath does, without creating
// anything: a missing component ends the walk without error.
func lookBeneath(dir *os.File, rel string) error {
	names, err := components(rel)
	if err != nil {
		return err
	}
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { unix.Close(fd) }()
	at := dir.Name()
	for i, name := range names {
		at = filepath.Join(at, name)
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		unix.Close(fd)
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		switch t := st.Mode & unix.S_IFMT; {
		case t == unix.S_IFLNK:
			return fmt.Errorf("%s %w", at, errSymlink)
		case t == unix.S_IFDIR:
		case t == unix.S_IFREG && i == len(names)-1:
		default:
			return fmt.Errorf("%s is %w", at, errKind)
		}
	}
	return nil
}
