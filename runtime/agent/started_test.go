//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestEntrypointExeced(t *testing.T) {
	const self = "/opt/sandboxd/sandboxd"
	proc := func(children map[string]string) string {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "1", "task", "1"), 0o755)
		os.Symlink("/sbin/docker-init", filepath.Join(dir, "1", "exe"))
		list := ""
		for pid, exe := range children {
			os.MkdirAll(filepath.Join(dir, pid), 0o755)
			os.Symlink(exe, filepath.Join(dir, pid, "exe"))
			list += pid + " "
		}
		os.WriteFile(filepath.Join(dir, "1", "task", "1", "children"), []byte(list), 0o644)
		return dir
	}
	tests := []struct {
		name     string
		children map[string]string
		want     bool
	}{
		{"entrypoint exec'd", map[string]string{"7": "/bin/busybox"}, true},
		{"init forked, not exec'd yet", map[string]string{"7": "/sbin/docker-init"}, false},
		{"no child (exited)", nil, false},
		{"only the agent's adopted daemon", map[string]string{"9": self}, false},
		{"the agent and the entrypoint", map[string]string{"9": self, "7": "/app/run"}, true},
	}
	for _, tt := range tests {
		if got := entrypointExeced(proc(tt.children), self); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if !entrypointExeced(t.TempDir(), self) {
		t.Error("an unreadable PID 1 must not hold anything up")
	}
}
