package lifecycle

import (
	"context"
	"net/netip"
	"slices"
	"sync"
)

// hostAddrs are the host's own addresses as last read: every daemon keeps
// them closed, as it keeps the sandbox's gateway. A policed sandbox
// reaches the host through its gateway at any of them (the host's LAN
// interface, a bridge of another network), under defaultAction allow or
// through an allowed name that resolves to one.
type hostAddrs struct {
	mu    sync.Mutex
	known bool
	addrs []netip.Addr
}

// hostAddresses returns the host's addresses, read the first time.
func (eg *Egress) hostAddresses(ctx context.Context) []netip.Addr {
	eg.host.mu.Lock()
	known, addrs := eg.host.known, eg.host.addrs
	eg.host.mu.Unlock()
	if !known {
		eg.refreshHost(ctx)
		eg.host.mu.Lock()
		addrs = eg.host.addrs
		eg.host.mu.Unlock()
	}
	return addrs
}

// refreshHost reads the host's addresses again (each reaper sweep) and
// reports whether they changed since the last read, so that the daemons
// get them. A failed read keeps the last ones.
func (eg *Egress) refreshHost(ctx context.Context) bool {
	er, ok := eg.egressRuntime()
	if !ok {
		return false
	}
	addrs, err := er.HostAddresses(ctx)
	if err != nil {
		eg.log.Warn("read the host's addresses", "err", err)
		return false
	}
	eg.host.mu.Lock()
	defer eg.host.mu.Unlock()
	changed := eg.host.known && !slices.Equal(eg.host.addrs, addrs)
	eg.host.known, eg.host.addrs = true, addrs
	return changed
}
