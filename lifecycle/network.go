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
func (d *deps) network() runtime.Network {
	switch n := d.defaults.network; n {
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
func (d *deps) ensureNetwork(ctx context.Context) error {
	nw := d.rt.Features().IsolatedNetworks
	if d.defaults.network != "" || nw == nil {
		return nil
	}
	if err := nw.EnsureIsolatedNetwork(ctx, DefaultNetwork, map[string]string{LabelNetwork: "isolated"}); err != nil {
		return d.engineError(err, "ensure network "+DefaultNetwork)
	}
	return nil
}
