//go:build linux

package agent

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxArgScript is the largest script passed as `sh -c` argument. Linux caps
// one argument at 128 KiB (MAX_ARG_STRLEN); larger scripts (and scripts with
// NUL bytes) are handed to the shell as a file it reads as /dev/fd/N.
const maxArgScript = 64 << 10

// errNotRunning is returned when signalling a process that has exited.
var errNotRunning = errors.New("process is not running")

// shell is the command interpreter found in the sandbox.
type shell struct {
	path   string
	isBash bool
}

// shellFinder looks for bash, then sh, in PATH and then in the usual
// directories, because the sandbox's PATH may be empty or odd. It remembers
// what it found as long as that file stays executable, so that a command
// costs one stat rather than a PATH search.
type shellFinder struct {
	mu    sync.Mutex
	found shell
}

func (f *shellFinder) find() (shell, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.found.path != "" && isExecutable(f.found.path) {
		return f.found, nil
	}
	for _, name := range []string{"bash", "sh"} {
		if p, err := exec.LookPath(name); err == nil {
			f.found = shell{path: p, isBash: name == "bash"}
			return f.found, nil
		}
		for _, dir := range []string{"/bin", "/usr/bin", "/usr/local/bin"} {
			if p := filepath.Join(dir, name); isExecutable(p) {
				f.found = shell{path: p, isBash: name == "bash"}
				return f.found, nil
			}
		}
	}
	f.found = shell{}
	return shell{}, errors.New("no shell: neither bash nor sh found in the sandbox")
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// execSpec describes one shell command to start.
type execSpec struct {
	script string
	argv   []string // run directly instead of script, without a shell
	dir    string
	env    []string
	cred   *syscall.Credential
	stdin  *os.File   // nil means /dev/null
	stdout *os.File   // nil means /dev/null
	stderr *os.File   // nil means /dev/null
	extra  []*os.File // the child's file descriptors 3, 4, ...
}

// process is a started command. It is the leader of its own process group,
// and signals go to the whole group so that children die with it.
type process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed when the process has been reaped

	mu       sync.Mutex
	exited   bool // the leader has exited: its pid may be reused once reaped
	stopping bool // the command is being stopped: the group dies with the leader
	state    *os.ProcessState
	// pidfd, if the kernel has them, tells the poller when the process
	// exits: no thread waits in waitid meanwhile.
	pidfd *os.File
}

// noPidfd is set once the kernel (or an emulator standing in for it) has
// refused to give a started process a pidfd.
var noPidfd atomic.Bool

// pollablePidfd returns the pidfd as a file the poller watches, or nil.
func pollablePidfd(fd int) *os.File {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil
	}
	return os.NewFile(uintptr(fd), "pidfd")
}

// start runs spec.script with the given shell, or spec.argv directly, in a
// new process group.
func start(sh shell, spec execSpec) (*process, error) {
	cmd := &exec.Cmd{Path: sh.path, Args: []string{filepath.Base(sh.path)}}
	cmd.Dir = spec.dir
	cmd.Env = spec.env
	// Leave unset streams as untyped nil: exec.Cmd connects those to /dev/null.
	if spec.stdin != nil {
		cmd.Stdin = spec.stdin
	} else if f := devNull(); f != nil {
		cmd.Stdin = f
	}
	if spec.stdout != nil {
		cmd.Stdout = spec.stdout
	}
	if spec.stderr != nil {
		cmd.Stderr = spec.stderr
	}
	cmd.ExtraFiles = spec.extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: spec.cred}
	pidfd := -1
	if !noPidfd.Load() {
		cmd.SysProcAttr.PidFD = &pidfd
	}

	switch {
	case spec.argv != nil: // no shell: the program, found on the request's PATH
		path, err := lookPath(spec.argv[0], spec.dir, spec.env)
		if err != nil {
			return nil, err
		}
		cmd.Path, cmd.Args = path, spec.argv
	case len(spec.script) <= maxArgScript && !strings.Contains(spec.script, "\x00"):
		cmd.Args = append(cmd.Args, "-c", spec.script)
	default:
		f, err := scriptFile(spec.script, spec.cred)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		cmd.ExtraFiles = append(slices.Clip(cmd.ExtraFiles), f)
		cmd.Args = append(cmd.Args, "/dev/fd/"+strconv.Itoa(2+len(cmd.ExtraFiles)))
	}
	err := cmd.Start()
	if errors.Is(err, syscall.EINVAL) && cmd.SysProcAttr.PidFD != nil {
		// An emulator (qemu-user, for an image of another architecture)
		// refuses clone's CLONE_PIDFD: wait in waitid from now on.
		noPidfd.Store(true)
		cmd = &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Dir: cmd.Dir, Env: cmd.Env,
			Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr, ExtraFiles: cmd.ExtraFiles,
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: spec.cred}}
		err = cmd.Start()
	}
	if err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	if pidfd >= 0 {
		p.pidfd = pollablePidfd(pidfd)
	}
	go p.wait()
	return p, nil
}

// outputPipe returns a pipe for a child's output: the read end polled by
// a pump, the write end blocking, as the child gets it. (os.Pipe would
// make both ends non-blocking and register them with the poller, and
// starting the child would make the write end blocking again: five system
// calls more per pipe and command.)
func outputPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

// devNull is /dev/null for the stdin of commands, opened once: exec.Cmd
// would open and close it for every command. Nil if it cannot be opened
// (exec.Cmd then tries, and reports why).
var devNull = sync.OnceValue(func() *os.File {
	fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), os.DevNull)
})

// scriptFile puts a script in an anonymous memory file for the shell to
// read as /dev/fd/N. Unlike a pipe it is seekable, which bash needs to read
// a script in blocks rather than byte by byte, and unlike a temp file it
// needs no writable filesystem.
func scriptFile(script string, cred *syscall.Credential) (*os.File, error) {
	fd, err := unix.MemfdCreate("sandboxd-script", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create script file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "sandboxd-script")
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return nil, fmt.Errorf("write script file: %w", err)
	}
	if cred != nil {
		// The shell reopens the file through /proc, which checks its owner
		// against the command's user.
		if err := f.Chown(int(cred.Uid), int(cred.Gid)); err != nil {
			f.Close()
			return nil, fmt.Errorf("script file: %w", err)
		}
	}
	return f, nil
}

// adopt tracks a process started by other means (a PTY session). It must
// lead its own process group.
func adopt(cmd *exec.Cmd) *process {
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go p.wait()
	return p
}

func (p *process) wait() {
	// Wait for the exit without reaping first, so that signal never sends
	// to a pid that the kernel may already have given to another process.
	if !p.awaitPidfd() {
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				break
			}
		}
	}
	p.mu.Lock()
	p.exited = true
	if p.stopping {
		// A process forked while the stop signal was on its way (say by a
		// shell that traps SIGTERM) escaped it. The unreaped leader still
		// reserves the group id, so this cannot reach an unrelated group.
		_ = unix.Kill(-p.pid, syscall.SIGKILL)
	}
	p.mu.Unlock()
	_ = p.cmd.Wait() // the exit status is in ProcessState
	p.mu.Lock()
	p.state = p.cmd.ProcessState
	p.mu.Unlock()
	close(p.done)
}

// awaitPidfd waits on the poller for the process to exit, and reports
// whether it saw the exit.
func (p *process) awaitPidfd() bool {
	if p.pidfd == nil {
		return false
	}
	defer p.pidfd.Close()
	rc, err := p.pidfd.SyscallConn()
	if err != nil {
		return false
	}
	exited := false
	err = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
			switch {
			case err == unix.EINTR:
				continue
			case err != nil:
				return true // give up: wait blocking
			}
			// Without an exit to report, waitid leaves si_signo 0.
			exited = info.Signo != 0
			return exited
		}
	})
	return err == nil && exited
}

// signal sends sig to the process group while its leader runs.
func (p *process) signal(sig syscall.Signal) error {
	return p.send(sig, false)
}

// kill stops the command: SIGKILL to its process group, and again to
// whatever is left of the group when the leader exits.
func (p *process) kill() error {
	return p.send(syscall.SIGKILL, true)
}

func (p *process) send(sig syscall.Signal, stop bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return errNotRunning
	}
	p.stopping = p.stopping || stop
	if err := unix.Kill(-p.pid, sig); err != nil {
		return fmt.Errorf("signal process group %d: %w", p.pid, err)
	}
	return nil
}

// terminate stops the command gently: SIGTERM to the process group, SIGKILL
// if the leader is still running after grace, and SIGKILL to the rest of
// the group when the leader exits. It returns once the leader is reaped.
func (p *process) terminate(grace time.Duration) error {
	if err := p.send(syscall.SIGTERM, true); err != nil {
		return err
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	if err := p.kill(); err != nil && !errors.Is(err, errNotRunning) {
		return err
	}
	<-p.done
	return nil
}

// result returns the exit code (-1 if killed by a signal) and the wait
// status as text ("exit status 1", "signal: killed"). Valid after done.
func (p *process) result() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return -1, "unknown exit status"
	}
	return p.state.ExitCode(), p.state.String()
}

// running reports whether the process has not been reaped yet.
func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// credential returns the identity to run a command as: uid with its primary
// group and supplementary groups from the sandbox's user database when it
// resolves, gid overriding the primary group. A nil result means the
// agent's own identity.
func credential(uid, gid *uint32) *syscall.Credential {
	if uid == nil {
		return nil
	}
	cred := &syscall.Credential{Uid: *uid, Groups: []uint32{}}
	if u, err := user.LookupId(strconv.FormatUint(uint64(*uid), 10)); err == nil {
		if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			cred.Gid = uint32(g)
		}
		if ids, err := u.GroupIds(); err == nil {
			for _, id := range ids {
				if g, err := strconv.ParseUint(id, 10, 32); err == nil {
					cred.Groups = append(cred.Groups, uint32(g))
				}
			}
		}
	}
	if gid != nil {
		cred.Gid = *gid
	}
	if cred.Uid == uint32(os.Getuid()) && cred.Gid == uint32(os.Getgid()) && os.Getuid() != 0 {
		// Already this identity; a non-root agent could not call setgroups.
		return nil
	}
	return cred
}

// mergeEnv returns base with the variables of extra set, in a stable order.
func mergeEnv(base []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		out = append(out, k+"="+extra[k])
	}
	return out
}

// lookupEnv finds key in an environment list; the last entry wins.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// expandPath expands $VAR, ${VAR} and a leading ~ like execd does for
// working directories. Referencing an undefined variable is an error.
func expandPath(p string, env []string) (string, error) {
	var missing []string
	p = os.Expand(p, func(k string) string {
		v, ok := lookupEnv(env, k)
		if !ok {
			missing = append(missing, k)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("path references undefined environment variables: %s", strings.Join(missing, ","))
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, ok := lookupEnv(env, "HOME")
		if !ok || home == "" {
			var err error
			if home, err = os.UserHomeDir(); err != nil {
				return "", err
			}
		}
		p = home + p[1:]
	}
	return p, nil
}

// checkDir expands dir and checks that it is an existing directory.
func checkDir(dir string, env []string) (string, error) {
	if dir == "" {
		return "", nil
	}
	p, err := expandPath(dir, env)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("working directory does not exist: %s", dir)
		}
		return "", fmt.Errorf("cannot access working directory %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("working directory is not a directory: %s", dir)
	}
	return p, nil
}
