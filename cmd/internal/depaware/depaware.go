// Package depaware keeps the list of the packages a command links, outside
// the standard library, checked in beside it (depaware.txt, after
// Tailscale's tool of that name), so that a new dependency of a binary is
// a change a reviewer sees.
package depaware

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite depaware.txt from what the command links")

// header says what the file is and how to refresh it.
const header = "# Packages outside the standard library that this command links on\n" +
	"# linux/amd64. Refresh: go test -run TestDepaware . -args -update\n"

// Check compares the current directory's depaware.txt with the packages
// the command there links on linux/amd64, or rewrites it under -update.
func Check(t *testing.T) {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := strings.Fields(string(out))
	slices.Sort(pkgs)
	want := header + strings.Join(pkgs, "\n") + "\n"
	if *update {
		if err := os.WriteFile("depaware.txt", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile("depaware.txt")
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Errorf("the packages linked changed; review and refresh depaware.txt with -update:\n%s", diff(string(got), want))
	}
}

// diff lists the lines only one side has.
func diff(old, cur string) string {
	in := func(text string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(text, "\n") {
			m[l] = true
		}
		return m
	}
	was, is := in(old), in(cur)
	var b strings.Builder
	for _, l := range strings.Split(cur, "\n") {
		if !was[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	for _, l := range strings.Split(old, "\n") {
		if !is[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	return b.String()
}
