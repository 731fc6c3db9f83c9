// Package runtime defines what the lifecycle layer needs from an engine that
// runs sandboxes, in lifecycle's words: a neutral Spec and State, a small
// core interface (Runtime) and optional capabilities a runtime may lack
// (Archive, BulkFiles, Images, Volumes, Pauser, Stopper, HostPaths, Records,
// Leadership, Repairer, IsolatedNetworks, Egress, AddressPolicies), which it
// reports (Runtime.Features): callers never find one by asserting a
// runtime's type, so a wrapper or a fake offers exactly what it says.
//
// The package links only the standard library (and the policy values of
// runtime/egress): what implements or uses it pulls in no engine client.
//
// runtime/docker is the only code in sandboxd that talks to Docker; another
// engine (Kubernetes) is one more package implementing these interfaces.
//
// Error contract, for every method below unless it says otherwise: a
// failure wraps one of the sentinel errors when one applies, and callers
// branch only on those with errors.Is:
//   - ErrNotFound: the sandbox (or volume, image, path) does not exist.
//   - ErrConflict: the sandbox is not in a state that allows the call
//     (paused, stopped, a name in use), or a Pause, Unpause, Commit or
//     Remove cut the call short.
//   - ErrUnavailable: the engine does not answer (down, or past the
//     runtime's own API deadline).
//   - ErrContainerTimeout: the engine answers, but not about this sandbox
//     within the runtime's per-sandbox deadline (it is stuck on it).
//
// Any other error is the engine's refusal, reported to the client as a
// failure of the operation. Every call returns by ctx's end and by the
// runtime's own deadline, whichever comes first: no call may hang.
package runtime

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

// Errors that callers branch on. Implementations wrap them.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrUnavailable = errors.New("container engine unavailable")
	// ErrContainerTimeout: the engine answers, but a call about one
	// sandbox did not finish in time (the engine is stuck on it).
	ErrContainerTimeout = errors.New("container engine call timed out")
	// ErrUnsupported: the runtime cannot create what the spec asks for
	// (lifecycle answers 400, naming what).
	ErrUnsupported = errors.New("not supported by this runtime")
)

// Runtime is the core every engine provides: sandboxes made from a Spec,
// their state, logs and the transport to the agent inside them.
type Runtime interface {
	// Name is the engine's name in lower case ("docker", "kubernetes"). In
	// upper case it prefixes the engine-scoped error codes the API
	// answers (DOCKER::SANDBOX_NOT_FOUND, as upstream's Docker provider).
	Name() string
	// Ping reports whether the engine answers (ErrUnavailable if not).
	Ping(ctx context.Context) error
	// Create makes (but does not start) a sandbox and returns its id,
	// which callers treat as opaque (of any length). The image must be
	// present where the runtime has Images; else the engine fetches it.
	// A mount it cannot make exactly as checked is a *MountError; a name
	// in use is ErrConflict.
	Create(ctx context.Context, spec Spec) (string, error)
	// Start starts a created sandbox (ErrNotFound if it is gone).
	Start(ctx context.Context, id string) error
	// Inspect returns the sandbox's current state (ErrNotFound if gone).
	Inspect(ctx context.Context, id string) (Container, error)
	// List returns the sandboxes carrying all of the given labels (a label
	// with an empty value matches any value). Entries may lack ExitCode,
	// OOMKilled and FinishedAt; Inspect has them.
	List(ctx context.Context, labels map[string]string) ([]Container, error)
	// Remove kills and removes a sandbox and what the runtime made for it
	// alone (anonymous volumes, pinned mounts). id is the one Create
	// returned (or List found), never a name. ErrNotFound if it was
	// already gone, which callers treat as done.
	Remove(ctx context.Context, id string) error
	// Logs streams the sandbox's main process output (stdout and stderr
	// combined) as plain text: at most the last tail lines (0: all), from
	// since on (zero: from the start). The stream ends with ctx.
	Logs(ctx context.Context, id string, tail int, since time.Time) (io.ReadCloser, error)
	// Agent returns a transport to the agent inside the sandbox, starting
	// the agent if it is not running: ErrConflict if the sandbox is paused
	// or stopped (nothing can start in it), ErrNotFound if it is gone.
	// Setting the transport up (an exec attach) is bounded by ctx and by
	// the runtime's per-sandbox deadline (ErrContainerTimeout). Requests
	// sent through it reach the agent's execd API whatever the URL host.
	Agent(ctx context.Context, id string) (http.RoundTripper, error)
	// Close releases the engine connection and agent sessions; no call
	// may follow it.
	Close() error
	// Features reports the optional capabilities this runtime has. They
	// are constant for the runtime's life.
	Features() Features
}

// Features are a runtime's optional capabilities: a nil field is one it
// lacks, and what it serves is then not supported.
type Features struct {
	Archive          Archive
	BulkFiles        BulkFiles
	Images           Images
	Volumes          Volumes
	Pauser           Pauser
	Stopper          Stopper
	HostPaths        HostPaths
	Records          Records
	Leadership       Leadership
	Repairer         Repairer
	IsolatedNetworks IsolatedNetworks
	Egress           Egress
	AddressPolicies  AddressPolicies
}

// Archive is implemented by runtimes that can copy files in and out of a
// sandbox through the engine, without its agent; it is what works on a
// sandbox whose processes cannot run (stopped). Without it, files go
// through the agent only. The calls work on a paused sandbox too; a Pause,
// Unpause, Commit or Remove may cut one in flight short: it then fails
// with ErrConflict.
type Archive interface {
	// PutArchive extracts a tar stream into dir inside the sandbox
	// (ErrNotFound if dir does not exist).
	PutArchive(ctx context.Context, id, dir string, tar io.Reader) error
	// GetArchive returns a tar stream of path inside the sandbox
	// (ErrNotFound if absent); the transfer lasts until it is closed.
	GetArchive(ctx context.Context, id, path string) (io.ReadCloser, PathStat, error)
	// StatPath describes path inside the sandbox (ErrNotFound if absent).
	StatPath(ctx context.Context, id, path string) (PathStat, error)
}

// BulkFiles is implemented by runtimes whose agent transports may take an
// upload's files one by one, without the upload form (Docker's direct
// route, where the agent hands sandboxd each file's descriptor). Without
// it, or for a transport without such a path, uploads go to the agent as
// forms.
type BulkFiles interface {
	// FileWriter returns the writer of t, a transport Agent returned, or
	// nil if t has none.
	FileWriter(t http.RoundTripper) FileWriter
}

// FileWriter writes files into a sandbox through its agent.
type FileWriter interface {
	// WriteFile writes content to the file meta describes, creating its
	// missing parents. A refusal or failure of the agent is the agent's
	// error, with its status and code; an error reading content is
	// returned as it is.
	WriteFile(ctx context.Context, meta FileMeta, content io.Reader) error
}

// FileMeta is a file's path and permissions, as an execd upload's metadata
// gives them.
type FileMeta struct {
	Path  string
	Owner string // user name or uid; "" = the agent's
	Group string // group name or gid; "" = the agent's
	Mode  int    // octal digits written as a decimal number (644); 0 = the default
}

// Images is implemented by runtimes that manage images themselves: pulls
// before create, and snapshots (a sandbox's filesystem committed as an
// image). Without it the engine fetches images on Create and snapshots are
// not supported.
type Images interface {
	// EnsureImage makes ref available locally, pulling it if absent.
	// progress (may be nil) receives human-readable pull progress lines.
	EnsureImage(ctx context.Context, ref string, auth *RegistryAuth, platform string, progress func(string)) error
	// ImageExists reports whether ref is present locally.
	ImageExists(ctx context.Context, ref string) (bool, error)
	// Commit saves the sandbox's filesystem as image ref (ErrNotFound if
	// the sandbox is gone): its filesystem only. The image's configuration
	// is that of the image the sandbox was made from, never what its
	// create added (env, labels, command, user), so that a sandbox made
	// from the image carries nothing of its creator's request.
	Commit(ctx context.Context, id, ref string) error
	// RemoveImage removes image ref (ErrNotFound if absent, ErrConflict if
	// a sandbox uses it).
	RemoveImage(ctx context.Context, ref string) error
}

// Volumes is implemented by runtimes with named volumes (a Docker volume,
// a Kubernetes PersistentVolumeClaim). Without it, named volumes are not
// supported.
type Volumes interface {
	// EnsureVolume makes sure the named volume exists, creating it with
	// labels when create is set (ErrNotFound otherwise). It returns whether
	// it created the volume and the labels of the volume.
	EnsureVolume(ctx context.Context, name string, create bool, labels map[string]string) (created bool, volumeLabels map[string]string, err error)
	// RemoveVolume removes a named volume (ErrNotFound if absent,
	// ErrConflict if a sandbox still mounts it).
	RemoveVolume(ctx context.Context, name string) error
}

// Pauser is implemented by runtimes that can freeze a sandbox's processes
// and thaw them. Without it, pause and resume are not supported.
type Pauser interface {
	// Pause freezes a running sandbox (ErrConflict if it is not running or
	// already paused).
	Pause(ctx context.Context, id string) error
	// Unpause thaws a paused sandbox (ErrConflict if it is not paused).
	Unpause(ctx context.Context, id string) error
}

// Stopper is implemented by runtimes that can end a sandbox's processes
// and keep its filesystem, so that Start runs it again later (a sandbox
// asleep with its memory released). Without it, that sleep is not
// supported.
type Stopper interface {
	// Stop ends every process of a running sandbox: a signal to stop,
	// then a kill after grace. Its filesystem stays; Start runs its
	// entrypoint again. ErrNotFound if it is gone. A paused sandbox is
	// unpaused first (engines differ on stopping a frozen one).
	Stop(ctx context.Context, id string, grace time.Duration) error
}

// HostPaths is implemented by runtimes that can bind-mount a path of the
// host their engine runs on. The check is the runtime's: only it knows
// that host's filesystem and where the engine keeps its own data (a remote
// engine's host is not sandboxd's). Without it, host volumes are not
// supported.
type HostPaths interface {
	// CheckHostPath judges path (absolute, normalised) for a bind mount:
	// it must lie under one of the allowed prefixes the runtime opened at
	// start, be reached from it without a symlink, and be near none of
	// forbidden, nor of the engine's own data and socket. It returns the
	// mount to make (Source where it is, Beneath the opened prefix it lies
	// in). A refusal is a *HostPathError; an engine that cannot tell where
	// it keeps its data is ErrUnavailable.
	CheckHostPath(ctx context.Context, path string, forbidden []string) (Mount, error)
}

// HostPathError is a host path CheckHostPath refuses.
type HostPathError struct {
	// NotAllowed is set when the path is outside what may be mounted
	// (else it is malformed, missing its parent, or of the wrong type).
	NotAllowed bool
	Reason     string // starts with "host path <path>"
}

func (e *HostPathError) Error() string { return e.Reason }

// Records is implemented by runtimes whose engine can hold sandboxd's
// bookkeeping about each sandbox on the sandbox itself (Kubernetes: pod
// annotations), so that several sandboxd replicas share one cluster's
// state instead of each keeping a local file. A record is opaque bytes
// (lifecycle's JSON), at most 128 KiB, keyed by the sandbox's Spec.Name.
type Records interface {
	// PutRecord stores data as the record of sandbox name, replacing any.
	// ErrNotFound if no sandbox of that name exists (yet or any more): a
	// record lives and dies with its sandbox.
	PutRecord(ctx context.Context, name string, data []byte) error
	// Record returns the record of sandbox name (ErrNotFound if there is
	// no such sandbox, it is being removed, or it carries no record).
	Record(ctx context.Context, name string) ([]byte, error)
	// Records returns the records of the sandboxes carrying all of labels
	// (as List), by sandbox name; sandboxes without one, or being
	// removed, are left out.
	Records(ctx context.Context, labels map[string]string) (map[string][]byte, error)
	// UpdateRecord replaces the record of sandbox name with fn(current)
	// atomically against other replicas (compare-and-swap, retried with a
	// fresh current on a conflict; fn may run more than once). ErrNotFound
	// as Record; an error from fn is returned as is, nothing written.
	UpdateRecord(ctx context.Context, name string, fn func(current []byte) ([]byte, error)) error
	// Secret returns the cluster's random secret of this name (at least
	// 32 bytes), creating it on first use: every replica gets the same.
	Secret(ctx context.Context, name string) ([]byte, error)
}

// Leadership is implemented by runtimes shared by several sandboxd
// replicas (Kubernetes: a coordination.k8s.io Lease). One replica at a time
// runs the background work that must not run twice: reconciling, the
// reaper, pool fillers. Without it, this sandboxd is the only one.
type Leadership interface {
	// Lead blocks until this replica leads, or ctx ends (ctx's error). It
	// returns a context that ends when leadership is lost or ctx ends;
	// the replica must stop that work by then. Lead may be called again
	// after the returned context ended.
	Lead(ctx context.Context) (context.Context, error)
}

// Repairer is implemented by runtimes that can free a sandbox the engine
// is stuck on (a Docker container frozen while runc started a process in
// it). Repair reports whether the sandbox needed it; it is cheap when
// not, so callers may try it on every paused sandbox.
type Repairer interface {
	Repair(ctx context.Context, id string) (bool, error)
}

// IsolatedNetworks is implemented by runtimes that can make a network on
// which sandboxes reach the outside but not each other.
type IsolatedNetworks interface {
	// EnsureIsolatedNetwork creates network name, carrying labels, unless
	// it exists; an existing one that lets its sandboxes talk to each
	// other is an error, not silently used.
	EnsureIsolatedNetwork(ctx context.Context, name string, labels map[string]string) error
}

// AddressPolicies is implemented by runtimes that enforce an egress policy
// of address rules themselves, without an egress helper (Kubernetes: a
// NetworkPolicy). Lifecycle sets Network.Policy only on such a runtime,
// and only after CheckAddressPolicy accepted it.
type AddressPolicies interface {
	// CheckAddressPolicy reports whether the runtime can enforce pol. Its
	// error, unlike the package's contract, is the client's: it says in
	// the client's words what cannot be enforced (a domain rule) and
	// lifecycle answers it as a bad request.
	CheckAddressPolicy(pol egress.Policy) error
}

// RegistryAuth is the credential for pulling a private image.
type RegistryAuth struct {
	Username string
	Password string
}

// Spec is everything needed to create a sandbox, in no engine's words.
type Spec struct {
	Name     string // unique among the engine's sandboxes
	Image    string
	Cmd      []string // replaces the image's entrypoint and command
	Env      []string // KEY=value
	Labels   map[string]string
	Platform string // "os/arch" or ""

	Resources Resources
	User      string // "uid[:gid]" or "name[:group]"; "" = the image's
	// ReadOnlyRoot mounts the image read-only (Tmpfs gives scratch space).
	ReadOnlyRoot bool
	Capabilities Capabilities
	// NoNewPrivileges: no process gains privileges through execve
	// (setuid binaries, file capabilities).
	NoNewPrivileges bool
	// SeccompProfile and AppArmorProfile name profiles the engine knows;
	// "" = the engine's default profile.
	SeccompProfile  string
	AppArmorProfile string
	// UserNamespaces lets the sandbox's processes create unprivileged user
	// namespaces and, inside them, the mounts a tool such as bubblewrap
	// needs (a fresh /proc included): the engine's default syscall filter
	// plus exactly those calls, and /proc without masked paths. It never
	// adds a capability; lifecycle pairs it with a non-root user, since an
	// unmasked /proc is writable by root. A runtime that cannot do it
	// refuses the spec with ErrUnsupported.
	UserNamespaces bool
	// RuntimeClass is an alternative OCI runtime the engine offers
	// (Docker's runtime name, a Kubernetes RuntimeClass); "" = default.
	RuntimeClass string
	Network      Network
	Mounts       []Mount
	Tmpfs        []Tmpfs
}

// NonRootUser reports whether user is "uid:gid" with both numeric and not
// 0: a user that is not root whatever the image's /etc/passwd says, as a
// spec with UserNamespaces needs.
func NonRootUser(user string) bool {
	uid, gid, ok := strings.Cut(user, ":")
	if !ok {
		return false
	}
	for _, id := range []string{uid, gid} {
		if n, err := strconv.ParseUint(id, 10, 32); err != nil || n == 0 {
			return false
		}
	}
	return true
}

// Resources bound what a sandbox may use; 0 is no bound (the engine's
// default).
type Resources struct {
	NanoCPUs    int64 // CPU limit in billionths of a CPU
	MemoryBytes int64 // memory limit (no swap beyond it)
	GPUs        int   // 0 none, -1 all
	Pids        int64 // processes at once
	// CPURequest (nano-CPUs) and MemoryRequestBytes are what the sandbox
	// is guaranteed (Kubernetes requests; Docker: CPU weight and soft
	// memory limit).
	CPURequest         int64
	MemoryRequestBytes int64
}

// Capabilities is the set of Linux capabilities of a sandbox's processes:
// the engine's default set, or none if DropAll, minus Drop, plus Add.
// Names are upper case without the CAP_ prefix.
type Capabilities struct {
	DropAll bool
	Drop    []string
	Add     []string
}

// NetworkMode is what network a sandbox is attached to.
type NetworkMode int

// Network modes.
const (
	// NetworkDefault is the engine's default network (Docker's bridge, a
	// pod network).
	NetworkDefault NetworkMode = iota
	// NetworkNone: no network interface but loopback.
	NetworkNone
	// NetworkIsolated is the network Name made by
	// IsolatedNetworks.EnsureIsolatedNetwork.
	NetworkIsolated
	// NetworkNamed is an existing network Name the operator chose.
	NetworkNamed
	// NetworkJoin shares the network namespace of sandbox Name (its id):
	// a policed sandbox joins its egress helper's.
	NetworkJoin
)

// Network is a sandbox's network intent.
type Network struct {
	Mode NetworkMode
	Name string // for NetworkIsolated, NetworkNamed, NetworkJoin
	// Policy, on an AddressPolicies runtime, is the egress policy the
	// runtime enforces (NetworkDefault, NetworkIsolated); nil allows all.
	Policy *egress.Policy
}

// MountKind is what a Mount mounts.
type MountKind int

// Mount kinds.
const (
	MountHost   MountKind = iota + 1 // a host path (see HostPaths)
	MountVolume                      // a named volume (see Volumes)
)

// Mount is a bind mount of a host path or a named volume.
type Mount struct {
	Kind     MountKind
	Source   string // host path or volume name
	Target   string // path in the sandbox
	ReadOnly bool
	SubPath  string // a directory inside the volume, mounted instead of all of it
	// Beneath, for a host path, is the checked directory Source lies in
	// (an allowed prefix, from CheckHostPath). The runtime reaches Source
	// from it without following symlinks, creates missing directories, and
	// mounts exactly what it reached; a Source not below it is refused.
	Beneath string
}

// Tmpfs is a memory-backed scratch filesystem in the sandbox.
type Tmpfs struct {
	Path      string
	SizeBytes int64       // 0: the engine's default
	Mode      os.FileMode // permission bits; 0: 1777
	// Exec allows running programs from it (a code sandbox's /tmp must);
	// it is always nosuid and nodev.
	Exec bool
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

// State is a sandbox's life stage, as any engine can tell it.
type State int

// States.
const (
	StateUnknown    State = iota
	StateCreated          // made, not started (or still starting)
	StateRunning          // its processes run
	StatePaused           // its processes are frozen
	StateRestarting       // its main process ended and the engine restarts it
	StateRemoving         // being removed
	StateExited           // its main process ended
	StateDead             // the engine failed to stop or remove it
)

var stateNames = [...]string{"unknown", "created", "running", "paused", "restarting", "removing", "exited", "dead"}

// String is the state's lower-case name.
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return stateNames[0]
	}
	return stateNames[s]
}

// Active reports whether the sandbox has processes, running or frozen:
// running, paused or restarting (Docker's Running flag).
func (s State) Active() bool {
	return s == StateRunning || s == StatePaused || s == StateRestarting
}

// Stopped reports whether the sandbox's main process has ended for good.
func (s State) Stopped() bool { return s == StateExited || s == StateDead }

// Container is the engine's view of one sandbox.
type Container struct {
	ID        string
	Name      string
	Image     string // the image reference it was created from
	Labels    map[string]string
	Cmd       []string
	Created   time.Time
	State     State
	OOMKilled bool
	ExitCode  int
	StartedAt time.Time // zero until started
	// FinishedAt is when the main process last ended (zero if never).
	FinishedAt time.Time
	Error      string // the engine's reason for a failed start, if any
	// Limits (CPU and memory) and Mounts (the paths where the create's
	// volumes are mounted, not the runtime's own) are known from Inspect
	// only.
	Limits Resources
	Mounts []string
}

// PathStat describes a path inside a sandbox.
type PathStat struct {
	Name  string
	Size  int64
	Mode  os.FileMode
	Mtime time.Time
	IsDir bool
}

// ShortID is id cut to 12 characters for logs, or id itself if shorter
// (ids are opaque: a runtime's may be short).
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
