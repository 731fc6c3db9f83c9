package runtime

import (
	"context"
	"net/http"
)

// Egress is implemented by runtimes that can enforce an egress policy with a
// helper container: it owns a sandbox's network namespace (the sandbox joins
// it through Network{Mode: NetworkJoin, Name: helper id}) and runs
// sandboxd's egress daemon, which holds the namespace's firewall and
// resolver.
type Egress interface {
	// CreateEgressHelper creates and starts a helper from spec's name,
	// image, labels, network and platform; the runtime supplies its
	// command, user, capabilities and resources. Errors as Create's.
	CreateEgressHelper(ctx context.Context, spec Spec) (string, error)
	// StartEgress starts the egress daemon in the helper with args and
	// returns the session that controls it.
	StartEgress(ctx context.Context, helperID string, args []string) (Session, error)
}

// Session is a daemon reached over an exec stream.
type Session interface {
	Transport() http.RoundTripper
	// Done is closed when the daemon exits or the stream breaks.
	Done() <-chan struct{}
	Close() error
}
