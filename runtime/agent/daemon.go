//go:build linux

package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
)

// The agent's state lives in a daemon, so that it survives the Docker exec
// through which sandboxd reaches it: `sandboxd agent` only bridges its stdin
// and stdout to the daemon's socket, and starts the daemon if there is none.
const (
	// socketName is an abstract unix socket: it needs no filesystem (a
	// read-only root works), no network (network_mode none works), and is
	// private to the sandbox's network namespace. It disappears with the
	// daemon, so a stale one never blocks a new daemon.
	socketName = "@sandboxd-agent-v1"
	// daemonFlag is the hidden argument that makes `sandboxd agent` the daemon.
	daemonFlag = "--daemon"
	// listenerFD is where the daemon finds the socket its starter bound.
	listenerFD = 3
	// hello is what the daemon sends on a connection it accepts, before
	// yamux. It tells the bridge that a live daemon took the connection.
	hello = "sandboxd-agent-v1\n"
	// helloTimeout bounds the wait for a daemon, including one just started
	// on a loaded machine. After it the bridge serves its connection itself.
	helloTimeout = 10 * time.Second
)

// Main is the `sandboxd agent` command. Without arguments it connects stdin
// and stdout to the sandbox's agent daemon, starting the daemon if there is
// none, and returns when either side closes. If the daemon cannot be reached
// it serves the connection itself, as Run does: the API works, but its state
// ends with the connection. With daemonFlag it is the daemon.
func Main(ctx context.Context, args []string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case len(args) == 0:
		return attach(ctx, socketName, spawnDaemon, os.Stdin, os.Stdout, os.Stderr, logger)
	case len(args) == 1 && args[0] == daemonFlag:
		f := os.NewFile(listenerFD, "agent socket")
		ln, err := net.FileListener(f)
		// The listener holds a close-on-exec duplicate; the inherited
		// descriptor must not leak into commands.
		f.Close()
		if err != nil {
			return fmt.Errorf("agent daemon: socket on fd %d: %w", listenerFD, err)
		}
		ul, ok := ln.(*net.UnixListener)
		if !ok {
			ln.Close()
			return fmt.Errorf("agent daemon: fd %d is a %T, not a unix socket", listenerFD, ln)
		}
		return newDaemon(Options{Logger: logger}).serve(ctx, ul)
	}
	return fmt.Errorf("agent: unexpected arguments %q", args)
}

// attach bridges stdin and stdout to the daemon on the abstract socket name,
// or serves them itself if the daemon cannot be reached. The daemon's log
// goes to stderr meanwhile.
func attach(ctx context.Context, name string, spawn func(*net.UnixListener) error, stdin io.Reader, stdout, stderr io.Writer, logger *slog.Logger) error {
	conn, err := connect(name, spawn)
	if err != nil {
		logger.Warn("agent daemon unavailable; serving this connection alone", "err", err)
		return Run(ctx, stdin, stdout, logger)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go relayLog(ctx, name, stderr)
	return bridge(ctx, conn, stdin, stdout)
}

// connect returns a connection to the daemon listening on the abstract
// socket name, after the daemon's hello. If nobody listens, it binds the name
// itself and hands the listener to spawn, which starts the daemon. The bind
// is the lock: of two concurrent starters, the loser connects to the
// winner's socket, where its connection waits until the daemon accepts.
func connect(name string, spawn func(*net.UnixListener) error) (*net.UnixConn, error) {
	addr := &net.UnixAddr{Name: name, Net: "unix"}
	deadline := time.Now().Add(helloTimeout)
	spawned := false
	for {
		conn, err := net.DialUnix("unix", nil, addr)
		if err == nil {
			if err := greet(conn, deadline); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		}
		// An abstract name that nobody listens on refuses connections.
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("connect to agent daemon: %w", err)
		}
		if spawned {
			return nil, errors.New("agent daemon exited as it started")
		}
		ln, err := net.ListenUnix("unix", addr)
		switch {
		case err == nil:
			if err := spawn(ln); err != nil {
				return nil, fmt.Errorf("start agent daemon: %w", err)
			}
			spawned = true
		case !errors.Is(err, syscall.EADDRINUSE):
			return nil, fmt.Errorf("bind agent socket: %w", err)
		case time.Now().After(deadline):
			return nil, fmt.Errorf("agent socket %s is bound but refuses connections", name)
		default:
			// Another starter has bound the name and is about to listen.
			time.Sleep(time.Millisecond)
		}
	}
}

// greet checks that the socket was made by this process's user (not by a
// squatter that bound the name first) and waits for the daemon's hello. The
// kernel records the credentials of whoever listened: the daemon's starter,
// which runs as the same user.
func greet(conn *net.UnixConn, deadline time.Time) error {
	cred, err := peerCred(conn)
	if err != nil {
		return err
	}
	if err := sameUser(cred, os.Getuid()); err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	return readHello(conn, deadline)
}

// readHello waits until deadline for the daemon's hello on conn.
func readHello(conn *net.UnixConn, deadline time.Time) error {
	if err := conn.SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	buf := make([]byte, len(hello))
	if _, err := io.ReadFull(conn, buf); err != nil {
		return fmt.Errorf("agent daemon did not greet: %w", err)
	}
	if string(buf) != hello {
		return fmt.Errorf("agent daemon greeted with %q", buf)
	}
	return conn.SetReadDeadline(time.Time{})
}

// spawnDaemon starts `sandboxd agent --daemon` on ln, detached: in its own
// session, with no descriptor of the Docker exec, so that it outlives the
// exec and does not hold its streams open. It takes ln over.
func spawnDaemon(ln *net.UnixListener) error {
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	defer f.Close()
	// Not /proc/self/exe, which would name the daemon "exe" for ps and pkill.
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate own binary: %w", err)
	}
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        []string{os.Args[0], "agent", daemonFlag},
		ExtraFiles:  []*os.File{f}, // becomes listenerFD
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// The daemon is reaped by the sandbox's init once this process exits.
	return cmd.Process.Release()
}

// bridgeBuffer is the unit the bridge copies in, both ways.
const bridgeBuffer = 256 << 10

// copyPlain copies with read and write calls through a buffer of its own.
// io.Copy between the socket and the exec's pipes would splice, and
// splicing into a pipe that is not in non-blocking mode spins on EAGAIN:
// it cost a CPU-second per 40 MiB downloaded.
func copyPlain(dst io.Writer, src io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, bridgeBuffer))
}

// bridge copies stdin to conn and conn to stdout until conn ends. The end of
// stdin is passed on as a half-close, so the daemon ends its session and
// then conn; the end of conn (daemon gone) ends the bridge at once.
func bridge(ctx context.Context, conn *net.UnixConn, stdin io.Reader, stdout io.Writer) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		_, _ = copyPlain(conn, stdin)
		_ = conn.CloseWrite()
	}()
	_, err := copyPlain(stdout, conn)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("agent bridge: %w", err)
	}
	return nil
}

// daemon serves one agent state to every connection it accepts.
type daemon struct {
	state *server
	http  *http.Server
	uid   int
	log   *slog.Logger
}

// newDaemon logs both to opts.Logger and, from warnings up, to the bridges
// that follow its log.
func newDaemon(opts Options) *daemon {
	hub := &logHub{}
	toBridges := slog.NewTextHandler(hub, &slog.HandlerOptions{Level: slog.LevelWarn})
	if opts.Logger == nil {
		opts.Logger = slog.New(toBridges)
	} else {
		opts.Logger = slog.New(slog.NewMultiHandler(opts.Logger.Handler(), toBridges))
	}
	s := newServer(opts)
	mux := http.NewServeMux()
	mux.Handle("/", s.routes())
	mux.HandleFunc("GET "+logRoute, hub.serve)
	return &daemon{
		state: s,
		http:  &http.Server{Handler: mux, ConnContext: connContext, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)},
		uid:   os.Getuid(),
		log:   s.log,
	}
}

// serve accepts connections on ln until ctx is done. Each connection from a
// process of the daemon's own user is one yamux session; others are closed
// at once, because commands may run as other users and must not reach an
// agent that can act as this one. Closing a session ends the requests in
// flight on it, which kills their foreground commands; everything else runs
// on. serve leaves running what it started.
func (d *daemon) serve(ctx context.Context, ln *net.UnixListener) error {
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		d.http.Close()
	})
	defer stop()
	d.log.Info("agent daemon serving", "pid", os.Getpid(), "socket", ln.Addr())
	for {
		conn, err := ln.AcceptUnix()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("agent daemon: %w", err)
		}
		if err != nil {
			// Out of descriptors or memory: losing the state would be worse
			// than waiting for some to be freed.
			d.log.Warn("agent daemon: accept", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go d.serveConn(conn)
	}
}

func (d *daemon) serveConn(conn *net.UnixConn) {
	cred, err := peerCred(conn)
	if err == nil {
		err = admit(cred, d.uid)
	}
	if err != nil {
		d.log.Warn("agent daemon: connection refused", "err", err)
		conn.Close()
		return
	}
	if _, err := io.WriteString(conn, hello); err != nil {
		conn.Close()
		return
	}
	br := bufio.NewReaderSize(conn, readBuffer)
	first, err := br.Peek(1)
	if err != nil {
		conn.Close()
		return
	}
	if first[0] != yamuxVersion {
		// A bulk connection (bulk.go): one HTTP/1.1 connection, no yamux.
		_ = d.http.Serve(newOneConnListener(&bufferedConn{UnixConn: conn, r: br}))
		return
	}
	// Framed as in Run: the bridge passes bytes on as they come, so a header
	// written apart from its body could cross dockerd as a chunk of its own.
	sess, err := yamux.Server(framedReader(conn, br), yamuxConfig(d.log))
	if err != nil {
		conn.Close()
		return
	}
	d.log.Debug("agent daemon: session", "peer_pid", cred.Pid)
	// Serve closes sess when the connection ends.
	_ = d.http.Serve(sess)
}

// peerCred returns the credentials of the process at the other end of conn,
// as the kernel recorded them when it connected (or listened).
func peerCred(conn *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	return cred, nil
}

// admit accepts a peer of the daemon's own user, or sandboxd's direct
// path (runtime/docker/direct_linux.go): a root peer whose pid reads 0,
// i.e. a process outside the daemon's pid namespace and every namespace
// below it. Every process of the sandbox is in the pid namespace the
// daemon was started in (the container's, through Docker exec) or one
// nested below it, so it always has a pid here and is judged by its uid
// as before. Only a daemon that a sandbox process started itself in a pid
// namespace it made (which needs privilege in the sandbox) sees its
// maker's namespace as pid 0: such a daemon is reached only by root of
// its user namespace, who could start or trace it anyway.
func admit(cred *syscall.Ucred, uid int) error {
	if cred.Pid == 0 && cred.Uid == 0 {
		return nil
	}
	return sameUser(cred, uid)
}

// DaemonSocket is the abstract name the daemon listens on, in the
// sandbox's network namespace.
const DaemonSocket = socketName

// DaemonLogRoute streams the daemon's warnings, which a bridge otherwise
// relays on its stderr.
const DaemonLogRoute = logRoute

// DialDaemon starts a session on conn, a connection made to the daemon's
// socket from outside the sandbox: it waits for the daemon's hello until
// deadline, then speaks yamux to the daemon itself, without a bridge. The
// listener's credentials are not checked, as the bridge does: whatever
// listens in the sandbox's network namespace is the sandbox's, and
// sandboxd trusts nothing it says.
//
// redial, if not nil, opens another connection to the same daemon: file
// transfers then each get one of their own (bulk.go), once a ping over
// one has shown that the daemon serves them (an older one does not).
func DialDaemon(conn *net.UnixConn, deadline time.Time, redial func() (*net.UnixConn, error)) (*Client, error) {
	if err := readHello(conn, deadline); err != nil {
		return nil, err
	}
	c, err := dial(conn)
	if err != nil || redial == nil {
		return c, err
	}
	bulk := newBulkTransport(func(ctx context.Context) (*net.UnixConn, error) {
		conn, err := redial()
		if err != nil {
			return nil, err
		}
		hello := time.Now().Add(helloTimeout)
		if d, ok := ctx.Deadline(); ok {
			hello = d
		}
		if err := readHello(conn, hello); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	})
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/ping", nil)
	// The probe's connection is not kept: idle, it would cost every live
	// sandbox two goroutines and their buffers here, and a connection and
	// a goroutine in the daemon, until a transfer needed it (issue 17's
	// footprint, BENCHMARKS.md).
	req.Close = true
	resp, err := bulk.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			c.bulk = bulk
			return c, nil
		}
	}
	bulk.CloseIdleConnections()
	return c, nil
}

// sameUser accepts a peer that runs as uid.
func sameUser(cred *syscall.Ucred, uid int) error {
	if int64(cred.Uid) != int64(uid) {
		return fmt.Errorf("peer pid %d runs as uid %d, not %d", cred.Pid, cred.Uid, uid)
	}
	return nil
}
