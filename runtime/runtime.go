// Package runtime defines what the lifecycle layer needs from a container
// engine. The Docker implementation lives in runtime/docker; it is the only
// code in sandboxd that talks to Docker, so another engine (Kubernetes) can be
// added without touching api or lifecycle.
package runtime

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// Errors that callers branch on. Implementations wrap them.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrUnavailable = errors.New("container engine unavailable")
	// ErrContainerTimeout: the engine answers, but a call about one
	// container did not finish in time (the engine is stuck on it).
	ErrContainerTimeout = errors.New("container engine call timed out")
)

// Repairer is implemented by runtimes that can free a container the engine
// is stuck on (a Docker container frozen while runc started a process in
// it). Repair reports whether the container needed it; it is cheap when
// not, so callers may try it on every paused sandbox.
type Repairer interface {
	Repair(ctx context.Context, id string) (bool, error)
}

// Runtime creates and drives sandbox containers.
type Runtime interface {
	// Ping reports whether the engine answers.
	Ping(ctx context.Context) error
	// EnginePaths returns the host paths through which a container could
	// take the engine over: its data directory and its socket, wherever
	// this engine keeps them.
	EnginePaths(ctx context.Context) ([]string, error)
	// EnsureImage makes ref available locally, pulling it if absent.
	// progress receives human-readable pull progress lines.
	EnsureImage(ctx context.Context, ref string, auth *RegistryAuth, platform string, progress func(string)) error
	// ImageExists reports whether ref is present locally.
	ImageExists(ctx context.Context, ref string) (bool, error)
	// Create creates (but does not start) a container and returns its id.
	// A mount it cannot make exactly as checked is a *MountError.
	Create(ctx context.Context, spec Spec) (string, error)
	Start(ctx context.Context, id string) error
	Inspect(ctx context.Context, id string) (Container, error)
	// List returns the containers carrying all of the given labels
	// (a label with an empty value matches any value).
	List(ctx context.Context, labels map[string]string) ([]Container, error)
	// Remove kills and removes a container, and its anonymous volumes.
	Remove(ctx context.Context, id string) error
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
	// Commit saves the container's filesystem as image ref.
	Commit(ctx context.Context, id, ref string) error
	RemoveImage(ctx context.Context, ref string) error
	// Logs streams the container's combined stdout and stderr as plain text.
	Logs(ctx context.Context, id string, tail int, since time.Time) (io.ReadCloser, error)

	// The archive and stat calls work on a paused container too. A Pause,
	// Unpause, Commit or Remove may cut one in flight short: it then fails
	// with ErrConflict.

	// PutArchive extracts a tar stream into dir inside the container.
	PutArchive(ctx context.Context, id, dir string, tar io.Reader) error
	// GetArchive returns a tar stream of path inside the container.
	GetArchive(ctx context.Context, id, path string) (io.ReadCloser, PathStat, error)
	// StatPath describes path inside the container (ErrNotFound if absent).
	StatPath(ctx context.Context, id, path string) (PathStat, error)

	// Agent returns a transport to the agent inside the container, starting
	// the agent if it is not running (ErrConflict if the container is
	// paused: nothing can start in it). Requests sent through it reach the
	// agent's execd API whatever the URL host is.
	Agent(ctx context.Context, id string) (http.RoundTripper, error)

	// EnsureVolume makes sure the named volume exists, creating it with
	// labels when create is set (ErrNotFound otherwise). It returns whether
	// it created the volume and the labels of the volume.
	EnsureVolume(ctx context.Context, name string, create bool, labels map[string]string) (created bool, volumeLabels map[string]string, err error)
	RemoveVolume(ctx context.Context, name string) error

	// Close releases the engine connection and agent sessions.
	Close() error
}

// RegistryAuth is the credential for pulling a private image.
type RegistryAuth struct {
	Username string
	Password string
}

// Spec is everything needed to create a sandbox container.
type Spec struct {
	Name     string
	Image    string
	Cmd      []string
	Env      []string
	Labels   map[string]string
	Platform string // "os/arch" or ""

	NanoCPUs    int64
	MemoryBytes int64
	GPUCount    int // 0 none, -1 all
	PidsLimit   int64
	// CPUShares (relative CPU weight) and MemoryReservationBytes (soft
	// memory limit) carry resource requests; 0 is the engine's default.
	CPUShares              int64
	MemoryReservationBytes int64

	NetworkMode    string
	CapDrop        []string
	CapAdd         []string
	SecurityOpt    []string
	ReadOnlyRootfs bool
	User           string
	OCIRuntime     string
	Mounts         []Mount
	Tmpfs          map[string]string
}

// Mount is a bind mount of a host path or a named volume.
type Mount struct {
	Type     string // "bind" or "volume"
	Source   string // host path or volume name
	Target   string
	ReadOnly bool
	SubPath  string // a directory inside the volume, mounted instead of all of it
	// Beneath, for a bind, is the checked directory Source lies in (an
	// allowed prefix). The runtime reaches Source from it without
	// following symlinks, creates missing directories, and mounts exactly
	// what it reached; a Source that is not below Beneath is refused.
	Beneath string
}

// MountError is a mount Create refuses: what was asked cannot be mounted
// as checked (a path swapped for a symlink, a subPath this engine cannot
// confine). It is the request's fault, not the engine's.
type MountError struct {
	Target  string // the mount's path in the sandbox
	SubPath bool   // the refusal is about Mount.SubPath
	Reason  string
}

func (e *MountError) Error() string { return "mount at " + e.Target + ": " + e.Reason }

// Container is the engine's view of one container.
type Container struct {
	ID         string
	Name       string
	Image      string // the image reference it was created from
	ImageTags  []string
	Labels     map[string]string
	Cmd        []string
	Created    time.Time
	Status     string // created, running, paused, restarting, removing, exited, dead
	Running    bool
	Paused     bool
	OOMKilled  bool
	ExitCode   int
	StartedAt  time.Time // zero until started
	FinishedAt time.Time
	Error      string // the engine's reason for a failed start, if any
}

// PathStat describes a path inside a container.
type PathStat struct {
	Name  string
	Size  int64
	Mode  os.FileMode
	Mtime time.Time
	IsDir bool
}

// IsolatedNetworks is implemented by runtimes that can make a network on
// which containers reach the outside but not each other.
type IsolatedNetworks interface {
	// EnsureIsolatedNetwork creates network name, carrying labels, unless
	// it exists; an existing one that lets its containers talk to each
	// other is an error, not silently used.
	EnsureIsolatedNetwork(ctx context.Context, name string, labels map[string]string) error
}
