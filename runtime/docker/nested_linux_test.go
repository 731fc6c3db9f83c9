package docker

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime"
)

func TestTranslateUserNamespaces(t *testing.T) {
	plain := runtime.Spec{Name: "sandbox-x", Image: "img", User: "1000:1000", NoNewPrivileges: true}
	_, host, _ := translate(plain, engineSetup{})
	if host.MaskedPaths != nil || host.ReadonlyPaths != nil {
		t.Fatalf("a sandbox without user namespaces changed Docker's masked paths: %v %v", host.MaskedPaths, host.ReadonlyPaths)
	}
	if slices.ContainsFunc(host.SecurityOpt, func(o string) bool { return strings.HasPrefix(o, "seccomp=") }) {
		t.Fatalf("a sandbox without user namespaces got a seccomp profile: %v", host.SecurityOpt)
	}

	nested := plain
	nested.UserNamespaces = true
	prof, err := checkUserNamespaces(nested)
	if err != nil {
		t.Fatal(err)
	}
	_, host, _ = translate(nested, engineSetup{seccomp: prof})
	if host.MaskedPaths == nil || len(host.MaskedPaths) != 0 || host.ReadonlyPaths == nil || len(host.ReadonlyPaths) != 0 {
		t.Fatalf("masked %v, read-only %v: want both empty (not unset, which is Docker's default set)", host.MaskedPaths, host.ReadonlyPaths)
	}
	if !slices.Contains(host.SecurityOpt, "no-new-privileges:true") {
		t.Fatalf("no-new-privileges lost: %v", host.SecurityOpt)
	}
	if len(host.CapAdd) != 0 || host.Privileged {
		t.Fatalf("capabilities %v privileged %v: user namespaces add none", host.CapAdd, host.Privileged)
	}
	var opt string
	for _, o := range host.SecurityOpt {
		if v, ok := strings.CutPrefix(o, "seccomp="); ok {
			opt = v
		}
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names    []string `json:"names"`
			Action   string   `json:"action"`
			Includes *struct {
				Caps []string `json:"caps"`
			} `json:"includes"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal([]byte(opt), &p); err != nil {
		t.Fatalf("seccomp option is not a JSON profile: %v", err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Fatalf("default action %q: the profile must still deny what it does not name", p.DefaultAction)
	}
	// What is allowed without any capability condition: the default
	// profile's unconditional calls plus exactly userNamespaceCalls.
	allowed := map[string]bool{}
	for _, s := range p.Syscalls {
		if s.Action == "SCMP_ACT_ALLOW" && (s.Includes == nil || len(s.Includes.Caps) == 0) {
			for _, n := range s.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range userNamespaceCalls {
		if !allowed[n] {
			t.Errorf("%s is not allowed", n)
		}
	}
	for _, n := range []string{"setns", "bpf", "perf_event_open", "kexec_load", "init_module", "open_by_handle_at", "fsopen", "move_mount", "keyctl", "add_key"} {
		if allowed[n] {
			t.Errorf("%s is allowed unconditionally: only the calls user namespaces need may be added", n)
		}
	}
	for _, n := range []string{"read", "write", "execve", "openat"} {
		if !allowed[n] {
			t.Errorf("%s is not allowed: the profile must be Docker's default plus additions", n)
		}
	}
}

func TestCheckUserNamespacesRefusesRoot(t *testing.T) {
	for _, user := range []string{"", "root", "0", "0:0", "1000", "1000:0", "0:1000", "app:app", "-1:5"} {
		_, err := checkUserNamespaces(runtime.Spec{UserNamespaces: true, User: user})
		if !errors.Is(err, runtime.ErrUnsupported) {
			t.Errorf("user %q: err %v, want ErrUnsupported", user, err)
		}
	}
	_, err := checkUserNamespaces(runtime.Spec{UserNamespaces: true, User: "1000:1000", SeccompProfile: "/etc/p.json"})
	if !errors.Is(err, runtime.ErrUnsupported) {
		t.Errorf("a configured seccomp profile with user namespaces: err %v, want ErrUnsupported", err)
	}
	if prof, err := checkUserNamespaces(runtime.Spec{User: "root"}); err != nil || prof != "" {
		t.Errorf("without user namespaces: %q, %v", prof, err)
	}
}
