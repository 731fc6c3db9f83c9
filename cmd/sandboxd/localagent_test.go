package main

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
)

// TestLocalAgent: on Linux the agent is sandboxd-agent beside the binary
// when it is there, else the binary itself.
func TestLocalAgent(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("a local agent exists only on Linux")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	beside := filepath.Join(filepath.Dir(exe), agentName)
	if path, small, err := localAgent(); err != nil || path != exe || small {
		t.Fatalf("without %s: localAgent = %q, %v, %v; want the own binary %s", agentName, path, small, err, exe)
	}
	if err := os.WriteFile(beside, []byte("agent"), 0o755); err != nil {
		t.Skipf("cannot write beside the test binary: %v", err)
	}
	t.Cleanup(func() { os.Remove(beside) })
	if path, small, err := localAgent(); err != nil || path != beside || !small {
		t.Errorf("with %s: localAgent = %q, %v, %v; want %s", agentName, path, small, err, beside)
	}
}
