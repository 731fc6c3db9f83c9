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

// network is the network mode of new sandboxes.
func (m *Manager) network() string {
	if m.cfg.Docker.NetworkMode == "" {
		return DefaultNetwork
	}
	return m.cfg.Docker.NetworkMode
}

// ensureNetwork creates the default network if it is the one in use.
// Runtimes without isolated networks have no such network to make.
func (m *Manager) ensureNetwork(ctx context.Context) error {
	nw, ok := m.rt.(runtime.IsolatedNetworks)
	if m.cfg.Docker.NetworkMode != "" || !ok {
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
func (m *Manager) helperNetwork(sandbox string) string {
	if m.cfg.Docker.NetworkMode == "" && len(m.cfg.Egress.DNSUpstream) == 0 {
		return "bridge"
	}
	return sandbox
}
