package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

// Labels sandboxd puts on every sandbox container. The opensandbox.io/ ones
// are upstream's, so upstream tooling recognises the containers.
const (
	LabelID            = "opensandbox.io/id"
	LabelInstance      = "opensandbox.io/sandboxd-instance"
	LabelExpiresAt     = "opensandbox.io/expires-at"
	LabelManualCleanup = "opensandbox.io/manual-cleanup"
	LabelPlatformOS    = "opensandbox.io/platform-os"
	LabelPlatformArch  = "opensandbox.io/platform-arch"
	LabelSnapshotID    = "opensandbox.io/snapshot-id"
	LabelRenewExtend   = "opensandbox.io/access-renew-extend-seconds"
)

// Labels of idle pool members, which the reaper leaves to their pool.
const (
	LabelPool         = "opensandbox.io/sandboxd-pool"
	LabelPoolRevision = "opensandbox.io/sandboxd-pool-revision"
)

// Ports every SDK resolves right after create.
const (
	ExecdPort  = 44772
	EgressPort = 18080
)

// TokenHeader carries the per-sandbox access token on proxied requests; it
// is the header upstream execd uses for its access token.
const TokenHeader = "X-EXECD-ACCESS-TOKEN"

// deps is what every service holds: the runtime, the store, the clock,
// the logger, the operator's settings and the shared life.
type deps struct {
	cfg      config.Config
	defaults defaults
	rt       runtime.Runtime
	store    Store
	log      *slog.Logger
	instance string
	now      func() time.Time
	metrics  *Metrics
	life     *life
}

// engineError turns a runtime failure into an API error.
func (d *deps) engineError(err error, what string) error {
	if _, ok := AsError(err); ok {
		return err
	}
	if errors.Is(err, runtime.ErrContainerTimeout) {
		// The engine answers, but is stuck on this one container:
		// other sandboxes work, so the engine is not "unreachable".
		return &Error{Kind: KindUnavailable, Code: CodeEngineTimeout, Message: "the " + d.engineTitle() + " engine did not answer in time (" + what + ") though it answers for the others; retry later", Err: err}
	}
	if errors.Is(err, runtime.ErrUnsupported) {
		return &Error{Kind: KindInvalid, Code: CodeInvalidParameter, Message: err.Error(), Err: err}
	}
	if errors.Is(err, runtime.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Kind: KindUnavailable, Code: CodeEngineUnavailable, Message: "the " + d.engineTitle() + " engine is unreachable (" + what + "); retry when it is back", Err: err}
	}
	return &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: what + " failed", Err: err}
}

// engineTitle is the runtime's name as a message says it ("Docker").
func (d *deps) engineTitle() string {
	n := d.rt.Name()
	if n == "" {
		return "container"
	}
	return strings.ToUpper(n[:1]) + n[1:]
}

// opError is the error of a failed engine operation: a 503 when the
// engine is unreachable, else code with the engine's reason.
func (d *deps) opError(err error, code, what string) error {
	if e, ok := AsError(d.engineError(err, what)); ok && e.Kind == KindUnavailable {
		return e
	}
	return &Error{Kind: KindInternal, Code: code, Message: fmt.Sprintf("%s: %v", what, err), Err: err}
}

func notFound(id string) error {
	return errf(KindNotFound, CodeSandboxNotFound, "sandbox %s not found", id)
}

// unsupported is the answer to a call the runtime has no capability for.
// It is upstream's SANDBOX::API_NOT_SUPPORTED, a 400 (reference §1.9).
func (d *deps) unsupported(what string) error {
	return errf(KindInvalid, CodeAPINotSupported, "%s not supported when runtime.type='%s'", what, d.rt.Name())
}

// ensureImage pulls an image where the runtime manages images; others
// fetch it on Create.
func (d *deps) ensureImage(ctx context.Context, ref string, auth *runtime.RegistryAuth, platform string, progress func(string)) error {
	if im := d.rt.Features().Images; im != nil {
		return im.EnsureImage(ctx, ref, auth, platform, progress)
	}
	return nil
}

// record returns a sandbox's record or a 404.
func (d *deps) record(id string) (*Record, error) {
	r, err := d.store.Sandbox(id)
	if errors.Is(err, errNoRecord) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "read sandbox record", Err: err}
	}
	return r, nil
}

// pingAgent starts a container's agent and waits until it answers.
func (d *deps) pingAgent(ctx context.Context, cid string) error {
	return d.agentGet(ctx, cid, "/ping")
}

// agentGet starts a container's agent and waits until it answers GET path
// with 200.
func (d *deps) agentGet(ctx context.Context, cid, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rt, err := d.rt.Agent(ctx, cid)
	if err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+path, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("agent %s: %w", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent %s: status %d", path, resp.StatusCode)
	}
	return nil
}

// othersCreate reports whether container c, which has no ready record, may
// be another replica's create in flight: on a runtime shared by replicas,
// a sandbox's container exists before its record is written to it.
func (d *deps) othersCreate(c runtime.Container) bool {
	return d.rt.Features().Leadership != nil && d.now().Sub(c.Created) < sharedCreateGrace
}

// sharedCreateGrace is how long a replica's create may take, image pull
// included, before a leader counts its container as left behind.
const sharedCreateGrace = 10 * time.Minute

// removeLabelled removes, by id, every container that carries labels
// (matched as List matches them): Remove takes ids only, and this is the
// way to a container whose id is not known (its create never answered, an
// egress helper found by its sandbox). None is done.
func (d *deps) removeLabelled(ctx context.Context, labels map[string]string) error {
	conts, err := d.rt.List(ctx, labels)
	if err != nil {
		return err
	}
	for _, c := range conts {
		if err := d.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return err
		}
	}
	return nil
}
