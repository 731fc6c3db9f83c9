package lifecycle

import (
	"slices"
	"strconv"
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
	d, h := cfg.Docker, cfg.Hardening()
	return defaults{
		base: runtime.Spec{
			Resources:       runtime.Resources{Pids: h.PidsLimit},
			Capabilities:    capabilities(h.DropCapabilities, h.AddCapabilities),
			NoNewPrivileges: h.NoNewPrivileges,
			SeccompProfile:  h.SeccompProfile,
			AppArmorProfile: h.ApparmorProfile,
			RuntimeClass:    d.OCIRuntime,
		},
		network:      d.NetworkMode,
		readOnlyRoot: h.ReadOnlyRootfs,
		user:         h.User,
		allowNested:  cfg.Sandbox.AllowNested,
		cpu:          h.DefaultCPU,
		memory:       h.DefaultMemory,
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

// hardening is what a request may choose about its container's security.
type hardening struct {
	readOnlyRootfs bool
	user           string // "" = the image's user
	nested         bool   // user namespaces inside the sandbox (ExtNested)
}

// parseHardening reads the per-request hardening extensions on top of the
// [docker] defaults. A request may tighten the operator's settings, never
// loosen them: it cannot make a read-only root writable, nor pick another
// user than the configured one.
func (d defaults) parseHardening(ext map[string]string) (hardening, error) {
	h := hardening{readOnlyRootfs: d.readOnlyRoot, user: d.user}
	if v, ok := ext[ExtReadOnlyRootfs]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		switch {
		case err != nil:
			return h, errf(KindInvalid, CodeInvalidParameter, "extensions[%q] must be \"true\" or \"false\", got %q", ExtReadOnlyRootfs, v)
		case !b && d.readOnlyRoot:
			return h, errf(KindInvalid, CodeInvalidParameter, "extensions[%q] = %q refused: this server makes every root filesystem read-only ([docker] read_only_rootfs)", ExtReadOnlyRootfs, v)
		}
		h.readOnlyRootfs = h.readOnlyRootfs || b
	}
	if v, ok := ext[ExtUser]; ok {
		v = strings.TrimSpace(v)
		switch {
		case !userSpec.MatchString(v):
			return h, errf(KindInvalid, CodeInvalidParameter, "extensions[%q] must be \"uid[:gid]\" or \"name[:group]\" (example: \"1000:1000\"), got %q", ExtUser, v)
		case d.user != "" && v != d.user:
			return h, errf(KindInvalid, CodeInvalidParameter, "extensions[%q] = %q refused: this server runs every sandbox as %q ([docker] user)", ExtUser, v, d.user)
		}
		h.user = v
	}
	return h, d.parseNested(ext, &h)
}

// parseNested reads ExtNested. A nested sandbox runs as a numeric non-root
// uid:gid: the one the request or the server names, else nestedUser.
func (d defaults) parseNested(ext map[string]string, h *hardening) error {
	v, ok := ext[ExtNested]
	if !ok {
		return nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	switch {
	case err != nil:
		return errf(KindInvalid, CodeInvalidParameter, "extensions[%q] must be \"true\" or \"false\", got %q", ExtNested, v)
	case !b:
		return nil
	case !d.allowNested:
		return errf(KindInvalid, CodeInvalidParameter, "extensions[%q] refused: this server does not allow nested sandboxes ([sandbox] allow_nested = false)", ExtNested)
	}
	if h.user == "" {
		h.user = nestedUser
	}
	if !runtime.NonRootUser(h.user) {
		return errf(KindInvalid, CodeInvalidParameter, "extensions[%q]: a nested sandbox runs as a numeric non-root \"uid:gid\" (default %s), not %q", ExtNested, nestedUser, h.user)
	}
	h.nested = true
	return nil
}
