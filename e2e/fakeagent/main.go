//go:build linux

// Command fakeagent is what hostile sandbox code does to the agent in the
// e2e memory tests: it kills the agent daemon, binds the daemon's
// abstract socket in its place, and serves sandboxd's next session
// itself: it answers pings, floods the daemon log route with long lines
// of control bytes, and opens streams towards sandboxd that it fills
// with data. GET /fake/status says what it sent.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
)

const (
	socketName = "@sandboxd-agent-v1" // runtime/agent's socketName
	hello      = "sandboxd-agent-v1\n"
	logRoute   = "/_sandboxd/log"
	detached   = "FAKEAGENT_DETACHED"
)

var (
	streams = flag.Int("streams", 256, "streams to open towards sandboxd per session")
	each    = flag.Int("each", 256<<10, "bytes to send on each")
	logLine = flag.Int("logline", 64<<10, "bytes of each log line")

	opened, sent, logStreams, logBytes atomic.Int64
)

func main() {
	flag.Parse()
	if os.Getenv(detached) == "" {
		// Out of the daemon's session: its death must not end this.
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), detached+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		return
	}
	killDaemons()
	var ln *net.UnixListener
	var err error
	for range 500 {
		if ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: socketName, Net: "unix"}); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c)
	}
}

// killDaemons kills every agent daemon of the sandbox.
func killDaemons() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "--daemon") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func serve(c *net.UnixConn) {
	if _, err := c.Write([]byte(hello)); err != nil {
		c.Close()
		return
	}
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil || first[0] != 0 {
		c.Close() // a bulk connection: not served, so sandboxd uses the session
		return
	}
	sess, err := yamux.Server(struct {
		*bufio.Reader
		*net.UnixConn
	}{br, c}, nil)
	if err != nil {
		c.Close()
		return
	}
	flood(sess) // before serving: sandboxd's ping waits meanwhile
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc(logRoute, func(w http.ResponseWriter, r *http.Request) {
		logStreams.Add(1)
		line := []byte(strings.Repeat("\x01", *logLine-1) + "\n")
		for {
			n, err := w.Write(line)
			logBytes.Add(int64(n))
			if err != nil {
				return
			}
			http.NewResponseController(w).Flush()
			time.Sleep(10 * time.Millisecond) // 100 lines a second: ten times the line limit
		}
	})
	mux.HandleFunc("/fake/status", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]int64{"opened": opened.Load(), "sent": sent.Load(), "logStreams": logStreams.Load(), "logBytes": logBytes.Load()})
	})
	_ = http.Serve(sess, mux)
}

// flood opens streams towards sandboxd and sends on each what the
// initial window lets through.
func flood(sess *yamux.Session) {
	chunk := make([]byte, 32<<10)
	for range *streams {
		s, err := sess.OpenStream()
		if err != nil {
			return
		}
		opened.Add(1)
		s.SetWriteDeadline(time.Now().Add(5 * time.Second))
		for w := 0; w < *each; w += len(chunk) {
			n, err := s.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				break
			}
		}
	}
}
