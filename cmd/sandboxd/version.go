package main

import "github.com/sandboxd/sandboxd/cmd/internal/buildinfo"

// version and commit are stamped by the release build (cmd/release):
// -ldflags "-X main.version=v1.2.3 -X main.commit=<git commit>". A plain
// `go build` in a git checkout still knows its commit from the VCS
// information Go records.
var (
	version = "dev"
	commit  = ""
)

// build returns the version and commit of this binary.
func build() (string, string) { return buildinfo.Resolve(version, commit) }

// versionLine is what `sandboxd version` prints.
func versionLine() string { return buildinfo.Line("sandboxd", version, commit) }
