package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// onEngineHost reports whether bind mounts made here are what the engine
// behind sock sees, and whether the pids it reports are ours: sandboxd
// must be root, and the engine (the socket's peer) must share sandboxd's
// mount and pid namespaces, or the pins' paths would name something else
// (or nothing) on the engine's side, and a container's pid another process.
func onEngineHost(sock string) error {
	if os.Geteuid() != 0 {
		return errors.New("sandboxd is not root")
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		return fmt.Errorf("connect to the engine socket: %w", err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("identify the engine process: %w", credErr)
	}
	if cred.Pid <= 0 {
		return errors.New("the engine process is not visible from sandboxd (another PID namespace)")
	}
	for _, ns := range []string{"mnt", "pid"} {
		mine, err1 := os.Readlink("/proc/self/ns/" + ns)
		theirs, err2 := os.Readlink("/proc/" + strconv.Itoa(int(cred.Pid)) + "/ns/" + ns)
		if err1 != nil || err2 != nil || mine != theirs {
			return fmt.Errorf("the engine runs in another %s namespace", ns)
		}
	}
	return nil
}

// openBeneath opens base (an allowed prefix or a volume's mountpoint: the
// operator's and the engine's choice, so symlinks in it are followed),
// then each component of rel relative to the directory opened before,
// with O_NOFOLLOW, creating missing directories with mkdirat. A component
// that is a symlink when it is reached is refused, so a path swapped
// after the check either fails here or still yields the real directory:
// the returned descriptor is what gets mounted. (openat2 with
// RESOLVE_NO_SYMLINKS would walk in one call, but cannot create, and needs
// Linux 5.6.) The result is a directory or a regular file, opened O_PATH,
// and its path by descriptor is checked to be base/rel.
func openBeneath(base, rel string) (*os.File, error) {
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", base, err)
	}
	fd, err := unix.Open(realBase, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", realBase, err)
	}
	var names []string
	if rel != "." && rel != "" {
		names = strings.Split(rel, "/")
	}
	for i, name := range names {
		if name == "" || name == "." || name == ".." {
			unix.Close(fd)
			return nil, fmt.Errorf("%q is not a normalised relative path", rel)
		}
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
			return nil, fmt.Errorf("%s: component %q is not a directory reached without following a symlink (was it swapped?): %w", filepath.Join(realBase, rel), name, err)
		}
		fd = next
	}
	f := os.NewFile(uintptr(fd), filepath.Join(realBase, rel))
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%s is neither a directory nor a regular file (a symlink?)", f.Name())
	}
	// Every step was relative to a descriptor, so the object is below
	// base; its path names where it is now (a sandbox may have moved it
	// within its own mount meanwhile: refuse rather than guess).
	if at, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err != nil || at != f.Name() {
		f.Close()
		return nil, fmt.Errorf("%s moved while it was opened (now %q)", f.Name(), at)
	}
	return f, nil
}

// pin bind-mounts what f refers to (recursively, as Docker binds) onto
// target, which it creates as an empty directory or file.
func pin(f *os.File, target string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := os.Mkdir(target, 0o700); err != nil {
			return err
		}
	} else if err := os.WriteFile(target, nil, 0o600); err != nil {
		return err
	}
	// The magic link names the descriptor's own file, not a path that
	// could be resolved again.
	return unix.Mount("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), target, "", unix.MS_BIND|unix.MS_REC, "")
}

// unpin detaches the pin at p (lazily: a container start may still hold
// it), if there is one.
func unpin(p string) {
	unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
}
