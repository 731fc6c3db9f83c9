// Package buildinfo says which build a binary is, for sandboxd and its
// agent alike: the version and commit that the release build stamps into
// package main (-X main.version=… -X main.commit=…), else, for a plain
// `go build` in a git checkout, the commit Go records from the VCS.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Resolve returns the version and commit of this binary, given what was
// stamped into it.
func Resolve(version, commit string) (string, string) {
	c := commit
	if info, ok := debug.ReadBuildInfo(); ok && c == "" {
		modified := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				c = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if c != "" && modified {
			c += "-dirty"
		}
	}
	return version, c
}

// Line is what `NAME version` prints.
func Line(name, version, commit string) string {
	v, c := Resolve(version, commit)
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", name, v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
