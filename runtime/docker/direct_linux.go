package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/agent"
)

// dialDirect connects to the agent daemon of running container id and
// returns the session once the daemon has answered a ping.
func (d *Docker) dialDirect(ctx context.Context, id string) (*agent.Client, error) {
	cctx, cancel := context.WithTimeout(ctx, min(d.timeout, agentStartTimeout))
	defer cancel()
	pid, err := d.runningPid(cctx, id)
	if err != nil {
		return nil, err
	}
	// The pid names this container's init only while the container runs
	// with it: checked again once its namespace is open, so that a pid
	// reused meanwhile is never entered.
	conn, ns, err := dialNetns(pid, func() error {
		again, err := d.runningPid(cctx, id)
		if err == nil && again != pid {
			err = fmt.Errorf("container %s restarted meanwhile", id)
		}
		return err
	}, agent.DaemonSocket)
	if err != nil {
		return nil, err
	}
	// The open namespace is the one checked above, whatever becomes of the
	// pid: file transfers connect in it again, without a check, for as
	// long as the session lives.
	deadline, _ := cctx.Deadline()
	client, err := agent.DialDaemon(conn, deadline, func() (*net.UnixConn, error) {
		return ns.connect(agent.DaemonSocket)
	})
	if err != nil {
		conn.Close()
		ns.Close()
		return nil, fmt.Errorf("agent session in %s: %w", id, err)
	}
	go func() {
		<-client.Done()
		ns.Close()
	}()
	if err := client.Ping(cctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("agent in %s %w", id, err)
	}
	go d.relayDaemonLog(id, client)
	return client, nil
}

// relayDaemonLog logs the daemon's warnings, as a bridge's stderr would
// carry them, until the session ends.
func (d *Docker) relayDaemonLog(id string, client *agent.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-client.Done()
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+agent.DaemonLogRoute, nil)
	resp, err := client.Transport().RoundTrip(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	w := d.agentLog(id)
	defer w.Close()
	_, _ = io.Copy(w, resp.Body)
}

// socketIn returns an AF_UNIX stream socket created in the network
// namespace nsFile refers to. An abstract unix name is looked up in the
// namespace its socket was created in, so only the socket call needs the
// sandbox's namespace: the thread goes back to its own before the socket
// is even connected. setns changes one thread, so it runs on a goroutine
// of its own, locked to its thread; if the thread cannot be put back, the
// goroutine ends still locked and the Go runtime discards the thread, so
// that no other code ever runs in the sandbox's namespace.
func socketIn(nsFile *os.File) (int, error) {
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("open own network namespace: %w", err)}
			return
		}
		defer own.Close()
		if err := unix.Setns(int(nsFile.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("enter the sandbox's network namespace: %w", err)}
			return
		}
		fd, serr := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			if serr == nil {
				unix.Close(fd)
			}
			done <- result{-1, fmt.Errorf("return to sandboxd's network namespace: %w", err)}
			return // still locked: the thread dies with this goroutine
		}
		runtime.UnlockOSThread()
		if serr != nil {
			serr = fmt.Errorf("socket: %w", serr)
		}
		done <- result{fd, serr}
	}()
	r := <-done
	return r.fd, r.err
}

// dialNetns connects to the abstract unix socket name in the network
// namespace of process pid, calling recheck once the namespace is open
// (the pid must still be the one meant). It returns the namespace too,
// open, for more connections.
func dialNetns(pid int, recheck func() error, name string) (*net.UnixConn, *netns, error) {
	f, err := openNetns(pid)
	if err != nil {
		return nil, nil, err
	}
	ns := &netns{f: f}
	if err := recheck(); err != nil {
		ns.Close()
		return nil, nil, err
	}
	c, err := ns.connect(name)
	if err != nil {
		ns.Close()
		return nil, nil, err
	}
	return c, ns, nil
}

// netns is an open network namespace. Its descriptor is used only under
// the lock and never after Close: a closed descriptor's number may name
// another sandbox's namespace by the time a thread enters it.
type netns struct {
	mu sync.Mutex
	f  *os.File
}

// connect connects to the abstract unix socket name in the namespace.
func (n *netns) connect(name string) (*net.UnixConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil {
		return nil, errors.New("the sandbox's network namespace is closed")
	}
	return connectIn(n.f, name)
}

func (n *netns) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil {
		return nil
	}
	err := n.f.Close()
	n.f = nil
	return err
}

// errNoDaemon is a sandbox whose agent daemon does not run: nobody
// listens on its socket.
var errNoDaemon = errors.New("no agent daemon listens in the sandbox")

// openNetns opens the network namespace of process pid, refusing
// sandboxd's own (a container on the host's network would share its
// abstract socket names with every other such container and the host).
func openNetns(pid int) (*os.File, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's network namespace: %w", err)
	}
	var theirs, mine unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &theirs); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &mine); err != nil {
		f.Close()
		return nil, err
	}
	if theirs.Dev == mine.Dev && theirs.Ino == mine.Ino {
		f.Close()
		return nil, errors.New("the sandbox shares sandboxd's network namespace")
	}
	return f, nil
}

// connectIn connects to the abstract unix socket name in the network
// namespace nsFile refers to. The socket is non-blocking from the start:
// a full backlog (a frozen daemon) fails the connect instead of blocking
// it, and the connection is read through Go's poller, so deadlines and
// cancellation work on it.
func connectIn(nsFile *os.File, name string) (*net.UnixConn, error) {
	fd, err := socketIn(nsFile)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ECONNREFUSED) {
			return nil, errNoDaemon
		}
		return nil, fmt.Errorf("connect to the agent daemon: %w", err)
	}
	f := os.NewFile(uintptr(fd), "agent daemon")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("agent daemon connection: %w", err)
	}
	return c.(*net.UnixConn), nil
}
