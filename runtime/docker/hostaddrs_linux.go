package docker

import (
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

// HostAddresses implements runtime.Egress: the IPv4 addresses of
// sandboxd's network namespace and, when the engine behind a local socket
// is a process sandboxd can see, of the engine's (sandboxd may run in a
// container of its own). An engine elsewhere (a remote host, Docker
// Desktop's VM) has addresses sandboxd cannot read; its sandboxes still
// have their gateway closed.
func (d *Docker) HostAddresses(context.Context) ([]netip.Addr, error) {
	b, err := os.ReadFile("/proc/self/net/fib_trie")
	if err != nil {
		return nil, err
	}
	out := egress.LocalAddrs(b)
	if pid := enginePID(d.cli.DaemonHost()); pid > 0 {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/fib_trie"); err == nil {
			out = append(out, egress.LocalAddrs(b)...)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

// enginePID is the pid of the process behind the engine's unix socket as
// sandboxd sees it, or 0.
func enginePID(host string) int {
	sock, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return 0
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		return 0
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}
