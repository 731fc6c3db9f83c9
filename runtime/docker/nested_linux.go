package docker

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// userNamespaceCalls are the system calls Docker's default profile refuses
// (or allows only with CAP_SYS_ADMIN, which a sandbox never has) and that a
// process needs to build a sandbox of its own in a user namespace, as
// bubblewrap does: new namespaces (clone with CLONE_NEW* flags, unshare),
// mounts inside them (mount, umount2, pivot_root) and a hostname for a new
// UTS namespace. The kernel still checks each against the capabilities the
// caller holds in the namespace it acts on, so a sandbox process can use
// them only inside namespaces it created; what they add is kernel surface
// reachable from there (SECURITY.md, "Nested sandboxes"). setns, the new
// mount API (fsopen, open_tree, move_mount…), bpf, perf_event_open,
// keyctl and the rest stay as the default profile has them.
var userNamespaceCalls = []string{"clone", "unshare", "mount", "umount", "umount2", "pivot_root", "sethostname", "setdomainname"}

var nestedProfile = sync.OnceValues(func() (string, error) {
	p := seccomp.DefaultProfile()
	p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
		LinuxSyscall: specs.LinuxSyscall{Names: userNamespaceCalls, Action: specs.ActAllow},
		Comment:      "sandboxd: unprivileged user namespaces for nested sandboxes",
	})
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("seccomp profile for nested sandboxes: %w", err)
	}
	return string(b), nil
})

// userNamespaceProfile is the seccomp profile of a sandbox with
// UserNamespaces: Docker's default plus userNamespaceCalls, as the JSON the
// Engine API takes in SecurityOpt ("seccomp=<profile>").
func userNamespaceProfile() (string, error) { return nestedProfile() }
