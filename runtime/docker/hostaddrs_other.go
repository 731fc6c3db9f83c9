//go:build !linux

package docker

import (
	"context"
	"net/netip"
)

// HostAddresses implements runtime.Egress: off Linux the engine runs in a
// VM whose addresses sandboxd cannot read (its sandboxes still have their
// gateway closed).
func (d *Docker) HostAddresses(context.Context) ([]netip.Addr, error) { return nil, nil }
