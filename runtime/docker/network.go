package docker

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"
)

// iccOption turns off traffic between the containers of a bridge network
// (its bridge drops it); traffic to the gateway and beyond is unaffected.
const iccOption = "com.docker.network.bridge.enable_icc"

// EnsureIsolatedNetwork implements runtime.IsolatedNetworks with a bridge
// network whose inter-container traffic is disabled. Several instances may
// share it, so it is created once and never removed by sandboxd.
func (d *Docker) EnsureIsolatedNetwork(ctx context.Context, name string, labels map[string]string) error {
	ctx, cancel := d.call(ctx)
	defer cancel()
	n, err := d.cli.NetworkInspect(ctx, name, network.InspectOptions{})
	if errdefs.IsNotFound(err) {
		_, err = d.cli.NetworkCreate(ctx, name, network.CreateOptions{
			Driver: "bridge", Labels: labels, Options: map[string]string{iccOption: "false"},
		})
		if err == nil || !errdefs.IsConflict(err) {
			return wrap(err, "create network %s", name)
		}
		// Another instance created it meanwhile: check that one.
		n, err = d.cli.NetworkInspect(ctx, name, network.InspectOptions{})
	}
	if err != nil {
		return wrap(err, "inspect network %s", name)
	}
	if n.Driver != "bridge" || n.Options[iccOption] != "false" {
		return fmt.Errorf("network %s exists but lets its containers reach each other (driver %q, %s=%q): remove it so sandboxd recreates it, or set [docker] network_mode",
			name, n.Driver, iccOption, n.Options[iccOption])
	}
	return nil
}
