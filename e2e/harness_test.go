//go:build e2e

// Package e2e holds black-box tests that start the real sandboxd binary
// against the real dockerd and talk to it over HTTP, with the official SDKs,
// and with the Docker API for assertions.
//
// Run with: go test -tags e2e -count=1 ./e2e/...  (images from images/build.sh).
package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// Labels that sandboxd puts on every sandbox container.
const (
	labelID       = "opensandbox.io/id"
	labelInstance = "opensandbox.io/sandboxd-instance"
)

// Test images built by images/build.sh.
const (
	imageBusybox         = "sandboxd-test/busybox:latest"
	imageNoShell         = "sandboxd-test/noshell:latest"
	imageCodeInterpreter = "opensandbox/code-interpreter:v1.1.0"
)

const (
	// startTimeout bounds how long a sandboxd may take to answer /health.
	startTimeout = 60 * time.Second
	// stopTimeout bounds how long a sandboxd may take to exit after SIGTERM.
	stopTimeout = 30 * time.Second
	// logTailLines is how much of a server's log a failed test prints.
	logTailLines = 150
)

// sandboxdBinary is the path of the binary built once by TestMain; it is set
// before any test runs and never changed afterwards.
var sandboxdBinary string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	// SANDBOXD_E2E_BINARY runs the tests against a prebuilt binary instead.
	if bin := os.Getenv("SANDBOXD_E2E_BINARY"); bin != "" {
		sandboxdBinary = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "sandboxd-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	// Both binaries, as docs/platforms.md builds them: sandboxd finds its
	// agent (sandboxd-agent) beside it.
	sandboxdBinary = filepath.Join(dir, "sandboxd")
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/sandboxd", "./cmd/sandboxd-agent")
	build.Dir = repoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: build sandboxd: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// repoRoot is the module root: the parent of this file's directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// Server is one sandboxd process started by startServer. Restart keeps its
// address, API key, instance id, configuration and store.
type Server struct {
	URL        string // base URL, http://127.0.0.1:PORT
	Addr       string // 127.0.0.1:PORT, the "domain" of the SDKs
	APIKey     string
	InstanceID string
	Dir        string // temporary directory with the config, store and log
	ConfigPath string
	LogPath    string

	t      testing.TB
	binary string // the sandboxd executable
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	client *http.Client
}

// serverOption changes the configuration of a server before it starts.
type serverOption func(cfg map[string]any) error

// withTOML merges a TOML snippet into the generated configuration, key by key,
// so that a test may set e.g. "[lifecycle]\nidle_timeout = \"5s\"" although the
// harness already writes a [lifecycle] table.
func withTOML(snippet string) serverOption {
	return func(cfg map[string]any) error {
		var extra map[string]any
		if _, err := toml.Decode(snippet, &extra); err != nil {
			return fmt.Errorf("parse TOML snippet %q: %w", snippet, err)
		}
		mergeTables(cfg, extra)
		return nil
	}
}

// mergeTables copies src into dst, recursing into tables present in both.
func mergeTables(dst, src map[string]any) {
	for k, v := range src {
		sub, isTable := v.(map[string]any)
		cur, hasTable := dst[k].(map[string]any)
		if isTable && hasTable {
			mergeTables(cur, sub)
			continue
		}
		dst[k] = v
	}
}

// startServer starts a sandboxd with a fresh configuration in t.TempDir() and
// waits until it is healthy. When the test ends the server is stopped, every
// container of its instance is removed, and, if the test failed, the tail of
// its log is printed.
func startServer(t testing.TB, opts ...serverOption) *Server {
	t.Helper()
	return startServerWith(t, sandboxdBinary, opts...)
}

// startServerWith is startServer running another sandboxd binary.
func startServerWith(t testing.TB, binary string, opts ...serverOption) *Server {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	s := &Server{
		Addr:       fmt.Sprintf("127.0.0.1:%d", port),
		APIKey:     randomHex(t, 24),
		InstanceID: "e2e-" + randomHex(t, 6),
		Dir:        dir,
		ConfigPath: filepath.Join(dir, "sandboxd.toml"),
		LogPath:    filepath.Join(dir, "sandboxd.log"),
		t:          t,
		binary:     binary,
		client:     &http.Client{Timeout: 5 * time.Minute},
	}
	s.URL = "http://" + s.Addr

	cfg := map[string]any{
		"server": map[string]any{
			"host":    "127.0.0.1",
			"port":    port,
			"api_key": s.APIKey,
		},
		"store": map[string]any{
			"dir": filepath.Join(dir, "store"),
		},
		"lifecycle": map[string]any{
			"instance_id":     s.InstanceID,
			"reaper_interval": "1s",
		},
	}
	for _, opt := range opts {
		if err := opt(cfg); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(cfg); err != nil {
		t.Fatalf("encode config: %v", err)
	}
	// The file holds the API key.
	if err := os.WriteFile(s.ConfigPath, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(s.cleanup)
	s.start()
	return s
}

// start launches the process and waits for /health.
func (s *Server) start() {
	s.t.Helper()
	logFile, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor

	cmd := exec.Command(s.binary, "--config", s.ConfigPath)
	cmd.Dir = s.Dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start sandboxd: %v", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func(exited chan struct{}) {
		cmd.Wait() // the exit status is read from cmd.ProcessState
		close(exited)
	}(s.exited)

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.exited:
			s.t.Fatalf("sandboxd exited before it was healthy (%s); its log follows", cmd.ProcessState)
		default:
		}
		if s.healthy() {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("sandboxd not healthy after %s; its log follows", startTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) healthy() bool {
	resp, err := s.client.Get(s.URL + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// running reports whether the process has been started and has not exited.
func (s *Server) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits for the process to exit; a server that does
// not exit in time fails the test and is killed.
func (s *Server) Stop() {
	s.t.Helper()
	if !s.running() {
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("SIGTERM sandboxd: %v", err)
	}
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		s.t.Errorf("sandboxd did not exit within %s of SIGTERM; killing it", stopTimeout)
		s.Kill9()
	}
}

// Kill9 kills the process with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill9() {
	s.t.Helper()
	if !s.running() {
		return
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Fatalf("kill sandboxd: %v", err)
	}
	<-s.exited
}

// Restart stops the server if it still runs and starts it again with the
// same configuration and store, on the same address.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

func (s *Server) cleanup() {
	s.Stop()
	removeInstanceContainers(s.t, s.InstanceID)
	releaseMountPins(s.t, s.Dir)
	if s.t.Failed() {
		s.t.Logf("sandboxd log (%s):\n%s", s.LogPath, s.logTail())
	}
}

// logTail returns the last lines of the server's log.
func (s *Server) logTail() string {
	f, err := os.Open(s.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 2*logTailLines {
			lines = append(lines[:0], lines[len(lines)-logTailLines:]...)
		}
	}
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString("  | ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// freePort asks the kernel for a free TCP port on the loopback address.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
