package docker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const stuckID = "0d06bb9f6b95c0d2a1b7e03a450291b719b1e14ace5a2d533466d2cedeca4ef5"

// fakeCgroups is a cgroup and proc tree in a temp dir.
type fakeCgroups struct {
	f   *freezer
	dir string // the container's cgroup
}

// newFakeCgroups lays out one container's freeze control (rel, under the
// cgroup root) holding state, and processes pid -> argv.
func newFakeCgroups(t *testing.T, rel, state string, procs map[string][]string) *fakeCgroups {
	t.Helper()
	root := t.TempDir()
	f := &freezer{cgroupRoot: filepath.Join(root, "cgroup"), procRoot: filepath.Join(root, "proc"), settle: hangGuard, poll: time.Millisecond}
	ctl := filepath.Join(f.cgroupRoot, rel)
	h := &fakeCgroups{f: f, dir: filepath.Dir(ctl)}
	must(t, os.MkdirAll(h.dir, 0o755))
	must(t, os.WriteFile(ctl, []byte(state+"\n"), 0o644))
	var pids []string
	for pid, argv := range procs {
		pids = append(pids, pid)
		must(t, os.MkdirAll(filepath.Join(f.procRoot, pid), 0o755))
		must(t, os.WriteFile(filepath.Join(f.procRoot, pid, "cmdline"), []byte(strings.Join(argv, "\x00")+"\x00"), 0o644))
		// Started from outside the container, as runc starts its init.
		h.setParent(t, pid, hostPID)
	}
	h.setProcs(t, pids...)
	return h
}

// hostPID is a process outside every fake container (runc on the host).
const hostPID = "4242"

func (h *fakeCgroups) setParent(t *testing.T, pid, ppid string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(h.f.procRoot, pid, "status"), []byte("Name:\tx\nPPid:\t"+ppid+"\n"), 0o644))
}

func (h *fakeCgroups) setProcs(t *testing.T, pids ...string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(h.dir, "cgroup.procs"), []byte(strings.Join(pids, "\n")), 0o644))
}

func (h *fakeCgroups) state(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.f.cgroupRoot, rel))
	must(t, err)
	return strings.TrimSpace(string(b))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var (
	runcInit = []string{"runc", "init"}
	sleeper  = []string{"sleep", "3600"}
)

func TestFreezerThawsAStuckStart(t *testing.T) {
	for _, tc := range []struct{ rel, frozen, thawed string }{
		{"freezer/docker/" + stuckID + "/freezer.state", "FROZEN", "THAWED"},
		{"freezer/system.slice/docker-" + stuckID + ".scope/freezer.state", "FROZEN", "THAWED"},
		{"docker/" + stuckID + "/cgroup.freeze", "1", "0"},
		{"system.slice/docker-" + stuckID + ".scope/cgroup.freeze", "1", "0"},
	} {
		h := newFakeCgroups(t, tc.rel, tc.frozen, map[string][]string{"10": sleeper, "11": runcInit})
		// runc's init finishes its start once thawed.
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			for h.state(t, tc.rel) != tc.thawed {
				time.Sleep(time.Millisecond)
			}
			h.setProcs(t, "10", "12")
		}()
		c, err := h.f.thaw(stuckID)
		<-finished
		if err != nil {
			t.Fatalf("%s: thaw: %v", tc.rel, err)
		}
		if got := h.state(t, tc.rel); got != tc.thawed {
			t.Errorf("%s: after thaw %q, want %q", tc.rel, got, tc.thawed)
		}
		must(t, h.f.refreeze(c))
		if got := h.state(t, tc.rel); got != tc.frozen {
			t.Errorf("%s: after refreeze %q, want %q", tc.rel, got, tc.frozen)
		}
	}
}

func TestFreezerLeavesOthersAlone(t *testing.T) {
	const rel = "freezer/docker/" + stuckID + "/freezer.state"
	for _, tc := range []struct {
		name, id, state string
		procs           map[string][]string
	}{
		{"paused without a process start", stuckID, "FROZEN", map[string][]string{"10": sleeper}},
		{"running with a process start", stuckID, "THAWED", map[string][]string{"10": sleeper, "11": runcInit}},
		{"a short id", stuckID[:12], "FROZEN", map[string][]string{"11": runcInit}},
		{"an id that is a path", "../../" + stuckID[6:], "FROZEN", map[string][]string{"11": runcInit}},
		{"an unknown container", strings.Repeat("e", 64), "FROZEN", map[string][]string{"11": runcInit}},
		{"sandbox code named runc init", stuckID, "FROZEN", map[string][]string{"10": sleeper, "11": runcInit}},
	} {
		h := newFakeCgroups(t, rel, tc.state, tc.procs)
		if tc.name == "sandbox code named runc init" {
			h.setParent(t, "11", "10") // its parent is in the container
		}
		if _, err := h.f.thaw(tc.id); !errors.Is(err, errNotStuck) {
			t.Errorf("%s: thaw = %v, want errNotStuck", tc.name, err)
		}
		if got := h.state(t, rel); got != tc.state {
			t.Errorf("%s: state changed to %q", tc.name, got)
		}
	}
}

func TestFreezerReportsAStartThatStaysStuck(t *testing.T) {
	const rel = "freezer/docker/" + stuckID + "/freezer.state"
	h := newFakeCgroups(t, rel, "FROZEN", map[string][]string{"11": runcInit})
	h.f.settle = 0
	if _, err := h.f.thaw(stuckID); err == nil || errors.Is(err, errNotStuck) {
		t.Fatalf("thaw with runc's init still inside = %v, want an error", err)
	}
	if got := h.state(t, rel); got != "THAWED" {
		t.Errorf("state %q: a start that stays stuck must be left thawed, not refrozen", got)
	}
}
