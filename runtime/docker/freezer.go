package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// freezer reaches the freezer cgroup of a local engine's containers, to free
// a container that a pause froze in the middle of runc starting a process
// (see gates): dockerd hangs on every call about such a container, unpause
// included, so only writing to the cgroup itself thaws it. It finds nothing
// (and does nothing) for a remote engine or a cgroup layout it does not know.
type freezer struct {
	cgroupRoot string // "/sys/fs/cgroup"
	procRoot   string // "/proc"
	// settle bounds the wait for a thawed runc to finish its start.
	settle time.Duration
	poll   time.Duration
}

func newFreezer() *freezer {
	return &freezer{cgroupRoot: "/sys/fs/cgroup", procRoot: "/proc", settle: 10 * time.Second, poll: 20 * time.Millisecond}
}

// cgroupFile is a container's freeze control and the values it takes.
type cgroupFile struct {
	path           string
	frozen, thawed string
}

// control returns the freeze control of container id under the cgroupfs and
// systemd drivers' default parents, cgroup v1 then v2.
func (f *freezer) control(id string) (cgroupFile, bool) {
	if !validContainerID(id) {
		return cgroupFile{}, false
	}
	for _, c := range []cgroupFile{
		{filepath.Join(f.cgroupRoot, "freezer", "docker", id, "freezer.state"), "FROZEN", "THAWED"},
		{filepath.Join(f.cgroupRoot, "freezer", "system.slice", "docker-"+id+".scope", "freezer.state"), "FROZEN", "THAWED"},
		{filepath.Join(f.cgroupRoot, "docker", id, "cgroup.freeze"), "1", "0"},
		{filepath.Join(f.cgroupRoot, "system.slice", "docker-"+id+".scope", "cgroup.freeze"), "1", "0"},
	} {
		if _, err := os.Stat(c.path); err == nil {
			return c, true
		}
	}
	return cgroupFile{}, false
}

// validContainerID reports whether id is a full engine id (64 hex digits),
// so that it cannot name any other path.
func validContainerID(id string) bool {
	if len(id) != 64 {
		return false
	}
	return strings.Trim(id, "0123456789abcdef") == ""
}

// stuck reports whether container id is frozen with runc's init inside:
// a process start that the freeze caught half-way.
func (f *freezer) stuck(id string) (cgroupFile, bool) {
	c, ok := f.control(id)
	if !ok {
		return c, false
	}
	b, err := os.ReadFile(c.path)
	if err != nil || strings.TrimSpace(string(b)) != c.frozen {
		return c, false
	}
	return c, f.runcInside(filepath.Dir(c.path))
}

// runcInside reports whether a cgroup holds runc's init. Its command line
// alone proves nothing (sandbox code can name itself "runc init" to get a
// paused sandbox thawed), so the process must also have been started from
// outside the container: its parent is runc on the host, not a process in
// the container's cgroup (orphans inside are adopted by the container's
// own init, which is in the cgroup too).
func (f *freezer) runcInside(dir string) bool {
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	inside := strings.Fields(string(procs))
	for _, pid := range inside {
		cmd, err := os.ReadFile(filepath.Join(f.procRoot, pid, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if len(args) > 1 && filepath.Base(args[0]) == "runc" && args[1] == "init" {
			if ppid, ok := f.parent(pid); ok && ppid != "0" && !slices.Contains(inside, ppid) {
				return true
			}
		}
	}
	return false
}

// parent returns the parent pid of pid, from its status file.
func (f *freezer) parent(pid string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(f.procRoot, pid, "status"))
	if err != nil {
		return "", false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// errNotStuck is thaw's answer for a container that needs no repair.
var errNotStuck = errors.New("not frozen with a process start inside")

// thaw thaws a stuck container and waits (up to settle) until runc's init
// has left it, i.e. the process start has finished or failed. It returns the
// control so that the caller can freeze the container again.
func (f *freezer) thaw(id string) (cgroupFile, error) {
	c, ok := f.stuck(id)
	if !ok {
		return c, errNotStuck
	}
	if err := os.WriteFile(c.path, []byte(c.thawed), 0); err != nil {
		return c, fmt.Errorf("thaw container %s: %w", id, err)
	}
	dir := filepath.Dir(c.path)
	for deadline := time.Now().Add(f.settle); f.runcInside(dir); {
		if time.Now().After(deadline) {
			return c, fmt.Errorf("thawed container %s, but runc's init is still inside after %s", id, f.settle)
		}
		time.Sleep(f.poll)
	}
	return c, nil
}

// refreeze freezes a container that thaw repaired and the engine still
// records as paused, so that the engine's view and the cgroup agree again.
func (f *freezer) refreeze(c cgroupFile) error {
	return os.WriteFile(c.path, []byte(c.frozen), 0)
}
