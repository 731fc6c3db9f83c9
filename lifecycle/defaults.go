package lifecycle

import (
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

// defaults are the operator's settings for every sandbox, read from the
// config's engine section here and nowhere else in lifecycle: the rest
// speaks of a neutral runtime.Spec.
type defaults struct {
	// base is every sandbox's spec before the request: security settings
	// and the pids bound.
	base runtime.Spec
	// network is the configured network ("" = sandboxd's isolated one).
	network string
	// readOnlyRoot and user are the floor a request may tighten, never
	// loosen (see parseHardening).
	readOnlyRoot bool
	user         string
	// allowNested: requests may ask for user namespaces (ExtNested).
	allowNested bool
	// cpu and memory are the default limits ("" = none).
	cpu, memory string
}

func defaultsFrom(cfg config.Config) defaults {
	d := cfg.Docker
	return defaults{
		base: runtime.Spec{
			Resources:       runtime.Resources{Pids: d.PidsLimit},
			Capabilities:    capabilities(d.DropCapabilities, d.AddCapabilities),
			NoNewPrivileges: d.NoNewPrivileges,
			SeccompProfile:  d.SeccompProfile,
			AppArmorProfile: d.ApparmorProfile,
			RuntimeClass:    d.OCIRuntime,
		},
		network:      d.NetworkMode,
		readOnlyRoot: d.ReadOnlyRootfs,
		user:         d.User,
		allowNested:  cfg.Sandbox.AllowNested,
		cpu:          d.DefaultCPU,
		memory:       d.DefaultMemory,
	}
}

// capabilities is the set of drop and add lists, names normalised.
func capabilities(drop, add []string) runtime.Capabilities {
	var c runtime.Capabilities
	for _, n := range drop {
		if n = capName(n); n == "ALL" {
			c.DropAll = true
		} else {
			c.Drop = append(c.Drop, n)
		}
	}
	for _, n := range add {
		c.Add = append(c.Add, capName(n))
	}
	if c.DropAll {
		c.Drop = nil
	}
	return c
}

func capName(n string) string {
	return strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(n)), "CAP_")
}

// scratchTmp is the /tmp of a read-only root. A tmpfs is noexec unless
// told otherwise; a code sandbox exists to run code, so /tmp allows it.
var scratchTmp = runtime.Tmpfs{Path: "/tmp", SizeBytes: 256 << 20, Exec: true}

// sandboxSpec is the spec of a sandbox: the operator's defaults, then what
// the request chose.
func (d defaults) sandboxSpec(id, image string, cmd, env []string, labels map[string]string, res Resources, network runtime.Network, mounts []runtime.Mount, hard hardening) runtime.Spec {
	spec := d.base
	spec.Name, spec.Image, spec.Cmd, spec.Env, spec.Labels = containerName(id), image, cmd, env, labels
	res.Pids = d.base.Resources.Pids
	spec.Resources = res
	spec.Capabilities.Drop = slices.Clone(d.base.Capabilities.Drop)
	spec.Capabilities.Add = slices.Clone(d.base.Capabilities.Add)
	spec.Network = network
	spec.Mounts = mounts
	spec.ReadOnlyRoot, spec.User, spec.UserNamespaces = hard.readOnlyRootfs, hard.user, hard.nested
	if hard.readOnlyRootfs {
		spec.Tmpfs = []runtime.Tmpfs{scratchTmp}
	}
	return spec
}

// containerName is the name of sandbox id's container.
func containerName(id string) string { return "sandbox-" + id }
