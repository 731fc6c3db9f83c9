package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

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
