package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are stamped by the release build (cmd/release):
// -ldflags "-X main.version=v1.2.3 -X main.commit=<git commit>". A plain
// `go build` in a git checkout still knows its commit from the VCS
// information Go records.
var (
	version = "dev"
	commit  = ""
)

// build returns the version and commit of this binary.
func build() (string, string) {
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

// versionLine is what `sandboxd version` prints.
func versionLine() string {
	v, c := build()
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("sandboxd %s (commit %s, %s, %s/%s)", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
