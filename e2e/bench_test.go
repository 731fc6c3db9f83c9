//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// TestBenchShort runs the benchmark (e2e/bench) in its short mode against a
// sandboxd it starts itself, so that it keeps working. It asserts that the
// run completes, prints every figure and cleans up; it asserts no timing.
func TestBenchShort(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bench")
	build := exec.Command("go", "build", "-o", bin, "./e2e/bench")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the benchmark: %v\n%s", err, out)
	}
	profile := filepath.Join(dir, "cpu.pprof")
	cmd := exec.CommandContext(t.Context(), bin, "-start", sandboxdBinary, "-short", "-burst", "4", "-image", imageBusybox, "-pprof", profile, "-code-image", codeImage())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench -short: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("bench -short:\n%s", stdout.String())

	figures := []string{
		"create-to-ready p50", "create-to-ready p95", "create-to-ready p99",
		"command true p50", "command true p99", "command echo 1KiB p50", "command echo 1KiB p99",
		"sh -c true forked in the sandbox p50", "command true p50 vs sh -c true",
		"upload 1KiB p50", "download 1KiB p50", "upload 4MiB", "upload 4MiB, unknown length", "download 4MiB",
		"burst 4 creates success", "burst 4 creates p50", "burst 4 creates p99",
		"burst 4 commands success", "burst 4 commands p99",
		"sandboxd RSS, 0 live", "sandboxd RSS, 2 live", "sandboxd RSS, 4 live",
		"sandboxd goroutines, 0 live", "sandboxd goroutines, 2 live", "sandboxd goroutines, 4 live",
		"agent RSS in a sandbox", "pool create-to-ready p50", "pool create-to-ready p95", "pool creates served warm",
		"pprof: CPU profile",
		"create-to-ready p50, networkPolicy vs none", "TCP connect added p50", "DNS lookup added p50",
		"/code 1+1 warm p50, jupyter", "/code 1+1 warm p50, python driver",
		"/code first run p50, jupyter", "/code first run p50, python driver",
	}
	lines := strings.Split(stdout.String(), "\n")
	for _, f := range figures {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, f+" ") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("the report has no line for %q", f)
		}
	}
	if fi, err := os.Stat(profile); err != nil || fi.Size() == 0 {
		t.Errorf("no CPU profile written: %v", err)
	}

	// Only this run's containers: other benchmarks may run beside it.
	var run string
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, "run: "); ok {
			run, _, _ = strings.Cut(v, " ")
		}
	}
	if run == "" {
		t.Fatal("the report names no run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	left, err := dockerClient(t).ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "sandboxd-bench="+run))})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range left {
		t.Errorf("the benchmark left container %s %v behind (%s, %s), labels %v", c.ID[:12], c.Names, c.State, c.Status, c.Labels)
	}
}
