//go:build e2e

package e2e

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
)

const imageBubblewrap = "sandboxd-test/bubblewrap:latest"

// bwrapAll is the bubblewrap sandbox an agent's tool builds: every
// namespace new, the root read-only, a fresh /proc and /dev.
const bwrapAll = "bwrap --ro-bind / / --proc /proc --dev /dev --unshare-all"

func bubblewrapWith(fields map[string]any) map[string]any {
	req := busyboxWith(fields)
	req["image"] = map[string]any{"uri": imageBubblewrap}
	return req
}

// TestNestedSandbox: with [sandbox] allow_nested and the create's
// sandboxd.io/nested extension, bubblewrap works inside the sandbox and
// hides the sandbox's processes from what it runs; without the extension
// bwrap fails as in any container; the sandbox still gains no capability,
// runs as a non-root user, keeps its limits, cannot write the host's
// kernel settings through its unmasked /proc, and reaches no other sandbox;
// a fork of it is nested too.
func TestNestedSandbox(t *testing.T) {
	s := startServer(t, withTOML("[sandbox]\nallow_nested = true\n"))
	removeInstanceHelpersAtEnd(t, s)
	plain := newExecdBox(t, s, bubblewrapWith(nil))
	nested := newExecdBox(t, s, bubblewrapWith(map[string]any{"extensions": map[string]string{"sandboxd.io/nested": "true"}}))

	t.Run("without the opt-in bwrap fails", func(t *testing.T) {
		out, code := plain.secShell(t, bwrapAll+" true 2>&1")
		if code == 0 {
			t.Fatalf("bwrap worked in a sandbox without the opt-in: %q", out)
		}
	})

	t.Run("with it bwrap works and isolates", func(t *testing.T) {
		if out, code := nested.secShell(t, bwrapAll+" true 2>&1"); code != 0 {
			t.Fatalf("bwrap failed in a nested sandbox (exit %d): %s", code, out)
		}
		nested.run(t, map[string]any{"command": "sleep 987654", "background": true})
		waitUntil(t, secWait, "the marker process", func() bool {
			out, _ := nested.secShell(t, "ps")
			return strings.Contains(out, "sleep 987654")
		})
		out, code := nested.secShell(t, bwrapAll+" ps 2>&1")
		if code != 0 || strings.Contains(out, "sleep 987654") || !strings.Contains(out, "ps") {
			t.Fatalf("inside bwrap, ps (exit %d) shows the sandbox's processes or nothing: %s", code, out)
		}
	})

	t.Run("non-root, no capability, same limits", func(t *testing.T) {
		if out, _ := nested.secShell(t, "id -u; id -g"); out != "1000\n1000" {
			t.Fatalf("nested sandbox runs as %q, want 1000 1000", out)
		}
		if out, _ := nested.secShell(t, "grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status"); strings.Count(out, "0000000000000000") != 3 {
			t.Fatalf("a nested sandbox's process holds capabilities: %s", out)
		}
		n, p := sandboxContainer(t, nested.ID).HostConfig, sandboxContainer(t, plain.ID).HostConfig
		if n.Privileged || !slices.Equal(n.CapAdd, p.CapAdd) || !slices.Equal(n.CapDrop, p.CapDrop) {
			t.Fatalf("nested: privileged %v caps +%v -%v; plain: +%v -%v", n.Privileged, n.CapAdd, n.CapDrop, p.CapAdd, p.CapDrop)
		}
		if !slices.Contains(n.SecurityOpt, "no-new-privileges:true") {
			t.Fatalf("nested sandbox lost no-new-privileges: %v", n.SecurityOpt)
		}
		if n.Memory != p.Memory || n.NanoCPUs != p.NanoCPUs || n.PidsLimit == nil || p.PidsLimit == nil || *n.PidsLimit != *p.PidsLimit {
			t.Fatalf("nested limits differ: memory %d/%d cpus %d/%d pids %v/%v", n.Memory, p.Memory, n.NanoCPUs, p.NanoCPUs, n.PidsLimit, p.PidsLimit)
		}
	})

	t.Run("the unmasked /proc writes nothing of the host", func(t *testing.T) {
		before, err := os.ReadFile("/proc/sys/kernel/core_pattern")
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{
			"echo '|/tmp/x' > /proc/sys/kernel/core_pattern",
			// root of a user namespace of its own is still uid 1000 to the host
			"bwrap --unshare-user --uid 0 --gid 0 --ro-bind / / --proc /proc --dev /dev --unshare-pid sh -c \"echo '|/tmp/x' > /proc/sys/kernel/core_pattern\"",
			"echo 1 > /proc/sys/vm/drop_caches",
			"cat /proc/kcore | head -c 1 | wc -c | grep -qx 1",
		} {
			if out, code := nested.secShell(t, cmd+" 2>&1"); code == 0 {
				t.Errorf("%q succeeded in a nested sandbox: %s", cmd, out)
			}
		}
		if after, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(after) != string(before) {
			t.Fatalf("the host's core_pattern changed: %q → %q", before, after)
		}
	})

	t.Run("other sandboxes stay out of reach", func(t *testing.T) {
		secListen(t, plain)
		ip := secEndpoint(t, sandboxContainer(t, plain.ID), "sandboxd").IPAddress
		for _, cmd := range []string{
			"nc -w 5 " + ip + " 9999 </dev/null",
			"bwrap --ro-bind / / --proc /proc --dev /dev --unshare-all --share-net nc -w 5 " + ip + " 9999 </dev/null",
		} {
			if out, code := nested.secShell(t, cmd); code == 0 || out == "hi" {
				t.Errorf("%q reached another sandbox: %q", cmd, out)
			}
		}
		policed := newExecdBox(t, s, bubblewrapWith(map[string]any{
			"extensions":    map[string]string{"sandboxd.io/nested": "true"},
			"networkPolicy": map[string]any{"defaultAction": "deny"},
		}))
		if out, code := policed.secShell(t, bwrapAll+" --share-net nc -w 5 "+ip+" 9999 </dev/null"); code == 0 || out == "hi" {
			t.Errorf("a policed nested sandbox got out through bwrap: %q", out)
		}
	})

	t.Run("a fork of it nests too", func(t *testing.T) {
		op, seen := waitFork(t, s, postFork(t, s, nested.ID, map[string]any{"timeout": 600}, nil).ID)
		if op.Status.State != "Succeeded" || len(op.SandboxIDs) != 1 {
			t.Fatalf("fork of the nested sandbox settled %+v (states %v)", op, seen)
		}
		fork := op.SandboxIDs[0]
		t.Cleanup(func() { execdDelete(t, s, fork) })
		if out := runCommand(t, s, fork, "id -u; "+bwrapAll+" echo nested 2>&1"); out != "1000\nnested" {
			t.Errorf("in the fork of a nested sandbox: %q, want uid 1000 and bwrap working", out)
		}
	})

	t.Run("bad values and a root user are 400s", func(t *testing.T) {
		for _, ext := range []map[string]string{
			{"sandboxd.io/nested": "sure"},
			{"sandboxd.io/nested": "true", "sandboxd.io/user": "0:0"},
			{"sandboxd.io/nested": "true", "sandboxd.io/user": "root"},
		} {
			doError(t, s, http.MethodPost, "/v1/sandboxes", bubblewrapWith(map[string]any{"extensions": ext}), http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
		}
	})
}

// TestNestedSandboxForbiddenByDefault: a server that does not allow nested
// sandboxes answers the opt-in with a 400 that says which setting.
func TestNestedSandboxForbiddenByDefault(t *testing.T) {
	s := startServer(t)
	msg := doError(t, s, http.MethodPost, "/v1/sandboxes", bubblewrapWith(map[string]any{"extensions": map[string]string{"sandboxd.io/nested": "true"}}), http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
	if !strings.Contains(msg, "allow_nested") {
		t.Fatalf("the refusal does not name the setting: %q", msg)
	}
	if n := secInstanceContainers(t, s); n != 0 {
		t.Fatalf("a refused create left %d containers", n)
	}
}
