package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// netnsWithListener makes a network namespace of its own, listening on the
// abstract name there, and returns the namespace, the listener and the
// thread id of a thread in it until the test ends; that thread is then
// discarded (its goroutine ends locked).
func netnsWithListener(t *testing.T, name string) (*os.File, *net.UnixListener, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	type made struct {
		ns  *os.File
		ln  *net.UnixListener
		tid int
		err error
	}
	ch := make(chan made, 1)
	end := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread stays in the new namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- made{err: err}
			return
		}
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- made{err: err}
			return
		}
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		ch <- made{ns, ln, unix.Gettid(), err}
		<-end
	}()
	m := <-ch
	t.Cleanup(func() { close(end) })
	if m.err != nil {
		t.Fatal(m.err)
	}
	t.Cleanup(func() { m.ns.Close(); m.ln.Close() })
	return m.ns, m.ln, m.tid
}

// threadsIn counts the threads of this process in the network namespace
// ns refers to.
func threadsIn(t *testing.T, ns *os.File) int {
	t.Helper()
	theirs, err := os.Readlink("/proc/self/fd/" + fmt.Sprint(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
	n := 0
	for _, p := range tasks {
		if got, err := os.Readlink(p); err == nil && got == theirs {
			n++
		}
	}
	return n
}

// connectIn reaches a name that lives only in the other namespace, and
// leaves every thread in sandboxd's own; a name nobody listens on there is
// errNoDaemon.
func TestConnectIn(t *testing.T) {
	name := fmt.Sprintf("@sandboxd-direct-test-%d", os.Getpid())
	ns, ln, _ := netnsWithListener(t, name)
	// Only the thread that made the namespace is in it; no other may join.
	before := threadsIn(t, ns)

	// The name does not exist in sandboxd's own namespace.
	if c, err := net.Dial("unix", name); err == nil {
		c.Close()
		t.Fatal("the abstract name is reachable from sandboxd's namespace")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial in own namespace: %v", err)
	}

	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := connectIn(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-accepted
	if peer == nil {
		t.Fatal("no connection accepted")
	}
	defer peer.Close()
	if _, err := peer.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if n := threadsIn(t, ns); n > before {
		t.Errorf("%d threads in the sandbox's namespace after a connect, %d before", n, before)
	}

	if _, err := connectIn(ns, name+"-nobody"); !errors.Is(err, errNoDaemon) {
		t.Errorf("connect to an unbound name: %v, want errNoDaemon", err)
	}
	if n := threadsIn(t, ns); n > before {
		t.Errorf("%d threads in the sandbox's namespace after a refused connect, %d before", n, before)
	}
}

// The host's own network namespace is never entered: a container on the
// host's network would share its abstract names with the host.
func TestOpenNetnsRefusesOwn(t *testing.T) {
	// A child shares the namespace of the thread that forked it (not
	// necessarily the main thread's, which another test may have moved).
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	if f, err := openNetns(child.Process.Pid); err == nil {
		f.Close()
		t.Fatal("opened sandboxd's own network namespace")
	}
}

// A pid that is no longer the container's (the re-check fails) is not
// entered.
func TestDialNetnsRecheck(t *testing.T) {
	name := fmt.Sprintf("@sandboxd-direct-recheck-%d", os.Getpid())
	_, ln, tid := netnsWithListener(t, name)
	want := errors.New("restarted meanwhile")
	if c, _, err := dialNetns(tid, func() error { return want }, name); !errors.Is(err, want) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial with a failing re-check: %v, want %v", err, want)
	}
	c, ns, err := dialNetns(tid, func() error { return nil }, name)
	if err != nil {
		t.Fatalf("dial with a passing re-check: %v", err)
	}
	c.Close()
	// The namespace stays open for bulk connections, until it is closed.
	again, err := ns.connect(name)
	if err != nil {
		t.Fatalf("second connection in the open namespace: %v", err)
	}
	again.Close()
	ns.Close()
	if again, err := ns.connect(name); err == nil {
		again.Close()
		t.Fatal("connected in a closed namespace")
	}
	ln.Close()
}
