package docker

import (
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/runtime"
)

// engineSetup is what Create learns from the engine before translating a
// spec: the agent volume for the sandbox's platform, the mounts as planned
// (pinned or checked, see mounts.go) and the log rotation options.
type engineSetup struct {
	agentVolume string
	mounts      []mount.Mount
	logOpts     map[string]string
	diskLimit   string
	// seccomp is the profile of a sandbox with UserNamespaces (JSON).
	seccomp string
}

// translate is the one place a neutral spec becomes Docker's container
// configuration; every security default of a sandbox is set here.
func translate(spec runtime.Spec, setup engineSetup) (*container.Config, *container.HostConfig, *ocispec.Platform) {
	cfg := &container.Config{
		Image:  spec.Image,
		Cmd:    spec.Cmd,
		Env:    spec.Env,
		Labels: spec.Labels,
		User:   spec.User,
	}
	if len(spec.Cmd) > 0 {
		// The request's entrypoint replaces the image's ENTRYPOINT and CMD,
		// as upstream does with its bootstrap launcher.
		cfg.Entrypoint = []string{spec.Cmd[0]}
		cfg.Cmd = spec.Cmd[1:]
	}
	// An init as PID 1 reaps the orphans of commands, which the agent
	// does not; without it zombies pile up against the pids limit.
	withInit := true
	res := spec.Resources
	host := &container.HostConfig{
		Init: &withInit,
		// Docker's default on cgroup v1 hosts is the host's cgroup
		// namespace, which shows the sandbox the host's cgroup paths.
		CgroupnsMode:   container.CgroupnsModePrivate,
		NetworkMode:    networkMode(spec.Network),
		CapDrop:        capDrop(spec.Capabilities),
		CapAdd:         spec.Capabilities.Add,
		SecurityOpt:    securityOpt(spec, setup.seccomp),
		ReadonlyRootfs: spec.ReadOnlyRoot,
		Runtime:        spec.RuntimeClass,
		Tmpfs:          tmpfs(spec.Tmpfs),
		Resources: container.Resources{
			NanoCPUs:          res.NanoCPUs,
			Memory:            res.MemoryBytes,
			MemoryReservation: res.MemoryRequestBytes,
		},
		Mounts: append([]mount.Mount{{
			Type: mount.TypeVolume, Source: setup.agentVolume, Target: AgentDir, ReadOnly: true,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true},
		}}, setup.mounts...),
	}
	if res.CPURequest > 0 {
		host.Resources.CPUShares = max(res.CPURequest*1024/1e9, 2) // the kernel's minimum weight
	}
	if res.Pids > 0 {
		pids := res.Pids
		host.Resources.PidsLimit = &pids
	}
	if res.MemoryBytes > 0 {
		// No swap beyond the memory limit: a memory hog is OOM-killed
		// instead of thrashing the host.
		host.Resources.MemorySwap = res.MemoryBytes
	}
	if res.GPUs != 0 {
		host.Resources.DeviceRequests = []container.DeviceRequest{{Count: res.GPUs, Capabilities: [][]string{{"gpu"}}}}
	}
	// Without rotation, what a sandbox's main process prints fills the
	// host's disk; without a size, so does what it writes to its root.
	host.LogConfig.Config = setup.logOpts
	if setup.diskLimit != "" {
		host.StorageOpt = map[string]string{"size": setup.diskLimit}
	}
	if spec.UserNamespaces {
		// A user namespace may mount a fresh /proc only where the
		// container's /proc hides nothing (the kernel refuses a procfs
		// more revealing than the one its creator sees), so nothing is
		// masked or made read-only there: Docker's systempaths=unconfined.
		// The sandbox's user is then never root (lifecycle), for whom
		// /proc/sys and /proc/sysrq-trigger would be writable.
		host.MaskedPaths, host.ReadonlyPaths = []string{}, []string{}
	}
	var plat *ocispec.Platform
	if spec.Platform != "" {
		os, arch, _ := strings.Cut(spec.Platform, "/")
		plat = &ocispec.Platform{OS: os, Architecture: arch}
	}
	return cfg, host, plat
}

// networkMode is Docker's network mode for a network intent.
func networkMode(n runtime.Network) container.NetworkMode {
	switch n.Mode {
	case runtime.NetworkNone:
		return "none"
	case runtime.NetworkIsolated, runtime.NetworkNamed:
		return container.NetworkMode(n.Name)
	case runtime.NetworkJoin:
		return container.NetworkMode("container:" + n.Name)
	}
	return "bridge"
}

func capDrop(c runtime.Capabilities) []string {
	if c.DropAll {
		return append([]string{"ALL"}, c.Drop...)
	}
	return c.Drop
}

// securityOpt is Docker's spelling of the spec's process restrictions;
// nested is the profile of a sandbox with UserNamespaces.
func securityOpt(spec runtime.Spec, nested string) []string {
	var opts []string
	if spec.NoNewPrivileges {
		opts = append(opts, "no-new-privileges:true")
	}
	switch {
	case nested != "":
		opts = append(opts, "seccomp="+nested)
	case spec.SeccompProfile != "":
		opts = append(opts, "seccomp="+spec.SeccompProfile)
	}
	if spec.AppArmorProfile != "" {
		opts = append(opts, "apparmor="+spec.AppArmorProfile)
	}
	return opts
}

// tmpfs is Docker's option string per tmpfs path. Docker mounts a tmpfs
// noexec unless told otherwise.
func tmpfs(ts []runtime.Tmpfs) map[string]string {
	if len(ts) == 0 {
		return nil
	}
	out := make(map[string]string, len(ts))
	for _, t := range ts {
		opts := []string{"rw", "noexec", "nosuid", "nodev"}
		if t.Exec {
			opts[1] = "exec"
		}
		switch {
		case t.SizeBytes > 0 && t.SizeBytes%(1<<20) == 0:
			opts = append(opts, fmt.Sprintf("size=%dm", t.SizeBytes>>20))
		case t.SizeBytes > 0:
			opts = append(opts, fmt.Sprintf("size=%d", t.SizeBytes))
		}
		if t.Mode != 0 {
			opts = append(opts, fmt.Sprintf("mode=%o", t.Mode.Perm()))
		}
		out[t.Path] = strings.Join(opts, ",")
	}
	return out
}

// checkUserNamespaces refuses a spec with UserNamespaces that could run as
// root (an unmasked /proc is writable by root: /proc/sys/kernel/core_pattern
// runs a program of the sandbox's choice as the host's root) or that names
// its own seccomp profile, and returns the profile such a sandbox gets.
func checkUserNamespaces(spec runtime.Spec) (string, error) {
	if !spec.UserNamespaces {
		return "", nil
	}
	if !runtime.NonRootUser(spec.User) {
		return "", fmt.Errorf("%w: a sandbox with user namespaces must run as a numeric non-root uid:gid, not %q", runtime.ErrUnsupported, spec.User)
	}
	if spec.SeccompProfile != "" {
		return "", fmt.Errorf("%w: a sandbox with user namespaces gets its own seccomp profile; a configured one (%q) cannot apply", runtime.ErrUnsupported, spec.SeccompProfile)
	}
	return userNamespaceProfile()
}
