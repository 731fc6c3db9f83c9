package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"

	"github.com/sandboxd/sandboxd/runtime/agent"
)

// agentName is the small agent's file name beside sandboxd: what
// `go build -o DIR ./cmd/sandboxd ./cmd/sandboxd-agent` writes.
const agentName = "sandboxd-agent"

// localAgent is the agent binary of this machine's own platform, where
// sandboxd runs on Linux: sandboxd-agent beside sandboxd's own binary, else
// that binary itself, which serves the agent's commands too but is several
// times larger (small reports which). Elsewhere it is "".
func localAgent() (path string, small bool, err error) {
	if goruntime.GOOS != "linux" {
		return "", false, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", false, err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return "", false, err
	}
	beside := filepath.Join(filepath.Dir(exe), agentName)
	if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() {
		return beside, true, nil
	}
	return exe, false, nil
}

// installAgent is `sandboxd install-agent DIR`, the init container of a
// Kubernetes sandbox pod (the image is sandboxd's): it copies the agent
// of its own platform, the embedded one in a release build, else the
// local one.
func installAgent(args []string) error {
	return agent.Install(args, func() (io.ReadCloser, error) {
		if data := embeddedAgents()["linux/"+goruntime.GOARCH]; data != nil {
			return io.NopCloser(bytes.NewReader(data)), nil
		}
		path, _, err := localAgent()
		if err != nil {
			return nil, err
		}
		if path == "" {
			return nil, errors.New("install-agent runs in a Linux init container")
		}
		return os.Open(path)
	})
}
