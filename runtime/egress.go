package runtime

import (
	"context"
	"net/http"
	"net/netip"
)

// Egress is implemented by runtimes that can enforce an egress policy with a
// helper container that joins a sandbox's network namespace (as
// Network{Mode: NetworkJoin, Name: sandbox id}) and runs sandboxd's egress daemon, which holds the
// namespace's firewall and resolver. The sandbox owns the namespace, so the
// firewall outlives a dead helper and a new helper can take over without
// restarting the sandbox.
type Egress interface {
	// DetachNetwork disconnects created, not yet started, container id from
	// network: it starts with loopback only, until AttachNetwork.
	DetachNetwork(ctx context.Context, id string, network Network) error
	// AttachNetwork connects running container id to network.
	AttachNetwork(ctx context.Context, id string, network Network) error
	// CreateEgressHelper creates (not starts) a helper from spec's name,
	// image, labels and platform that joins the network namespace of
	// container sandbox when both run; the runtime supplies its command
	// (the daemon's guard, with args), user, capabilities and resources.
	// Errors as Create's.
	CreateEgressHelper(ctx context.Context, sandbox string, spec Spec, args []string) (string, error)
	// StartEgressHelper starts helper and returns once its default drop is
	// in force in the namespace (an error if it never is).
	StartEgressHelper(ctx context.Context, helper string) error
	// StartEgress starts the egress daemon in the helper with args and
	// returns the session that controls it.
	StartEgress(ctx context.Context, helper string, args []string) (Session, error)
	// HostResolvers returns the nameservers the engine gives a container on
	// its default network (the host's resolvers, as the engine sees them),
	// read from a short-lived container made from spec's name, image,
	// labels and platform, which no sandbox can touch.
	HostResolvers(ctx context.Context, spec Spec) ([]string, error)
	// HostAddresses returns the addresses of the engine's host that a
	// sandbox could reach through its gateway: those of the engine's
	// network namespace and of sandboxd's, as they are now (they change:
	// callers ask again). Loopback is not among them.
	HostAddresses(ctx context.Context) ([]netip.Addr, error)
}

// Session is a daemon reached over an exec stream.
type Session interface {
	Transport() http.RoundTripper
	// Done is closed when the daemon exits or the stream breaks.
	Done() <-chan struct{}
	Close() error
}
