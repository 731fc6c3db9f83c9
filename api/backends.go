package api

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/api/console"
	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// Backends are the lifecycle services the server serves, one narrow
// interface per handler group, declared here as the handlers use them.
// The wiring (cmd/sandboxd) hands over the services of a
// lifecycle.Manager; tests may hand over fakes.
type Backends struct {
	// Engine is the runtime's name, which prefixes the engine-scoped
	// error codes on the wire (lifecycle.WireCode).
	Engine      string
	Life        LifeBackend
	Metrics     *lifecycle.Metrics
	Sandboxes   SandboxBackend
	Diagnostics DiagnosticsBackend
	Snapshots   SnapshotBackend
	Forks       ForkBackend
	Pools       PoolBackend
	Proxy       ProxyBackend
	Files       FileBackend
	Egress      EgressBackend
	Activity    console.ActivitySource
}

// LifeBackend is the lifecycle's phase: /health reports it, and every
// route but a few waits for it to serve.
type LifeBackend interface {
	Phase() (phase, reason string)
	Ready() error
}

// SandboxBackend serves the sandbox routes (sandboxes.go) and the
// sandboxes-by-state gauge of /metrics.
type SandboxBackend interface {
	Create(ctx context.Context, req lifecycle.CreateRequest) (*lifecycle.Sandbox, error)
	Get(ctx context.Context, id string) (*lifecycle.Sandbox, error)
	List(ctx context.Context, f lifecycle.ListFilter) ([]*lifecycle.Sandbox, lifecycle.Page, error)
	Delete(ctx context.Context, id string) error
	PatchMetadata(ctx context.Context, id string, patch map[string]*string) (*lifecycle.Sandbox, error)
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Renew(ctx context.Context, id string, at time.Time) (time.Time, error)
	Endpoint(ctx context.Context, id string, port int, requestHost string) (*lifecycle.Endpoint, error)
}

// DiagnosticsBackend serves a sandbox's logs and events.
type DiagnosticsBackend interface {
	Logs(ctx context.Context, id string, tail int, since time.Time) (io.ReadCloser, error)
	LogTail(ctx context.Context, id string, tail int, since time.Time, maxBytes int) (string, bool, error)
	Events(ctx context.Context, id string) ([]string, error)
}

// SnapshotBackend serves the snapshot routes.
type SnapshotBackend interface {
	CreateSnapshot(ctx context.Context, sandboxID, name string) (*lifecycle.Snapshot, error)
	GetSnapshot(id string) (*lifecycle.Snapshot, error)
	ListSnapshots(f lifecycle.SnapshotFilter) ([]*lifecycle.Snapshot, lifecycle.Page, error)
	DeleteSnapshot(ctx context.Context, id string) error
}

// PoolBackend serves the pool routes (pools.go).
type PoolBackend interface {
	CreatePool(ctx context.Context, name string, spec lifecycle.PoolSpec, capacity lifecycle.PoolCapacity) (*lifecycle.Pool, error)
	ListPools(ctx context.Context) ([]*lifecycle.Pool, error)
	GetPool(ctx context.Context, name string) (*lifecycle.Pool, error)
	UpdatePool(ctx context.Context, name string, u lifecycle.PoolUpdate) (*lifecycle.Pool, error)
	DeletePool(ctx context.Context, name string) error
}

// ProxyBackend opens the proxy route: a sandbox's token (its egress
// token for the egress API), and the transport to its agent.
type ProxyBackend interface {
	CheckToken(id, tok string) bool
	CheckEgressToken(id, tok string) bool
	Transport(ctx context.Context, id string) (http.RoundTripper, error)
}

// FileBackend says which way a sandbox's files move, and moves them when
// the agent does not (upload.go).
type FileBackend interface {
	FilesTransport(ctx context.Context, id string) (http.RoundTripper, error)
	// FileWriter is the writer of a files transport that takes an
	// upload's files one by one, or nil (the agent reads the form).
	FileWriter(rt http.RoundTripper) runtime.FileWriter
	OpenFile(ctx context.Context, id, path string) (*lifecycle.File, error)
	// UploadSink is where an upload's files go: through fw, or with the
	// archive API when fw is nil.
	UploadSink(id string, fw runtime.FileWriter) transfer.Sink
}

// EgressBackend serves a sandbox's egress API (egress.go) and the egress
// counters of /metrics.
type EgressBackend interface {
	Policy(id string) (egress.Policy, error)
	ChangePolicy(ctx context.Context, id string, op lifecycle.PolicyOp, body func() ([]byte, error)) (lifecycle.PolicyChange, error)
	EgressStats(ctx context.Context) map[string]egress.Stats
}
