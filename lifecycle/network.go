package lifecycle

import (
	"context"

	"github.com/sandboxd/sandboxd/runtime"
)

// DefaultNetwork is the network of sandboxes when [docker] network_mode is
// unset: a bridge network on which they reach the outside (as allowed) but
// not each other. Instances share it; none removes it.
const DefaultNetwork = "sandboxd"

// LabelNetwork marks the network sandboxd created.
const LabelNetwork = "io.sandboxd.network"

// network is the network of new sandboxes: the configured one ("bridge"
// is the engine's default network), else sandboxd's isolated network.
func (m *Manager) network() runtime.Network {
	switch n := m.defaults.network; n {
	case "":
		return runtime.Network{Mode: runtime.NetworkIsolated, Name: DefaultNetwork}
	case "bridge":
		return runtime.Network{Mode: runtime.NetworkDefault}
	case "none":
		return runtime.Network{Mode: runtime.NetworkNone}
	default:
		return runtime.Network{Mode: runtime.NetworkNamed, Name: n}
	}
}

// ensureNetwork creates the default network if it is the one in use.
// Runtimes without isolated networks have no such network to make.
func (m *Manager) ensureNetwork(ctx context.Context) error {
	nw, ok := m.rt.(runtime.IsolatedNetworks)
	if m.defaults.network != "" || !ok {
		return nil
	}
	if err := nw.EnsureIsolatedNetwork(ctx, DefaultNetwork, map[string]string{LabelNetwork: "isolated"}); err != nil {
		return m.engineError(err, "ensure network "+DefaultNetwork)
	}
	return nil
}

// helperNetwork is the network of a policed sandbox's egress helper, given
// the sandbox's. On a user network such as sandboxd's, Docker's embedded
// resolver is the only nameserver and forwards from the sandbox's own
// namespace, where the firewall drops it: without [egress] dns_upstream,
// no name would resolve. So the helper then stays on Docker's bridge, with
// the host's resolvers; sandboxes on sandboxd's network cannot reach that
// bridge, and a policy guards the private ranges of other policed ones.
func (m *Manager) helperNetwork(sandbox runtime.Network) runtime.Network {
	if sandbox.Mode == runtime.NetworkIsolated && len(m.cfg.Egress.DNSUpstream) == 0 {
		return runtime.Network{Mode: runtime.NetworkDefault}
	}
	return sandbox
}
