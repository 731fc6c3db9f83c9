package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind classifies an Error; the api layer maps it to an HTTP status.
type Kind int

// Error kinds.
const (
	KindInvalid        Kind = iota // 400
	KindNotFound                   // 404
	KindConflict                   // 409
	KindUnavailable                // 503
	KindInternal                   // 500
	KindNotImplemented             // 501
	KindUnprocessable              // 422 (schema-level problems, as FastAPI reports them)
	KindTooLarge                   // 413
	KindTooMany                    // 429 (a cap on work in progress)
)

// Error is a domain error with upstream's namespaced code.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	Field   []string // for KindUnprocessable: the location of the bad field
	// RetryAfter, if set, is when the call may succeed if made again.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

func errf(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err as an *Error if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// EngineScope starts the engine-scoped codes below: on the wire it reads
// as the runtime's name in upper case (DOCKER::SANDBOX_NOT_FOUND, as
// upstream's Docker provider; KUBERNETES:: on Kubernetes), see WireCode.
const EngineScope = "ENGINE::"

// WireCode is code as the API answers it on runtime rt (its Name):
// EngineScope replaced by the runtime's prefix, other codes unchanged.
func WireCode(code, rt string) string {
	if rest, ok := strings.CutPrefix(code, EngineScope); ok {
		return strings.ToUpper(rt) + "::" + rest
	}
	return code
}

// Error codes (reference §1.9).
const (
	CodeSandboxNotFound     = EngineScope + "SANDBOX_NOT_FOUND"
	CodeInvalidParameter    = "SANDBOX::INVALID_PARAMETER"
	CodeInvalidMetadata     = "SANDBOX::INVALID_METADATA_LABEL"
	CodeReservedMetadata    = "INVALID_METADATA_LABEL"
	CodeInvalidMetaFormat   = "INVALID_METADATA_FORMAT"
	CodeNotRunning          = EngineScope + "SANDBOX_NOT_RUNNING"
	CodeNotPaused           = EngineScope + "SANDBOX_NOT_PAUSED"
	CodePauseFailed         = EngineScope + "SANDBOX_PAUSE_FAILED"
	CodeResumeFailed        = EngineScope + "SANDBOX_RESUME_FAILED"
	CodeInvalidExpiration   = EngineScope + "INVALID_EXPIRATION"
	CodeInvalidPort         = EngineScope + "INVALID_PORT"
	CodeImagePullFailed     = EngineScope + "SANDBOX_IMAGE_PULL_FAILED"
	CodeStartFailed         = EngineScope + "SANDBOX_START_FAILED"
	CodeDeleteFailed        = EngineScope + "SANDBOX_DELETE_FAILED"
	CodeQueryFailed         = EngineScope + "SANDBOX_QUERY_FAILED"
	CodeEngineUnavailable   = EngineScope + "INITIALIZATION_ERROR"
	CodeEngineTimeout       = EngineScope + "SANDBOX_ENGINE_TIMEOUT"
	CodeAgentFailed         = EngineScope + "SANDBOX_EXECD_START_FAILED"
	CodeAPINotSupported     = "SANDBOX::API_NOT_SUPPORTED"
	CodeUnsupportedPoolRef  = "SANDBOX::UNSUPPORTED_POOL_REF"
	CodeSnapshotNotFound    = "SNAPSHOT::NOT_FOUND"
	CodeSnapshotNotReady    = "SNAPSHOT::NOT_READY"
	CodeSnapshotState       = "SNAPSHOT::INVALID_STATE"
	CodeSnapshotSourceState = "SNAPSHOT::INVALID_SOURCE_STATE"
	CodeSnapshotConflict    = "SNAPSHOT::DELETE_CONFLICT"
	CodeSnapshotRestore     = "SNAPSHOT::INVALID_RESTORE_CONFIG"
	CodeSnapshotNotImpl     = "SNAPSHOT::NOT_IMPLEMENTED"
	CodeGeneral             = "GENERAL::UNKNOWN_ERROR"
	// CodeNotReady: sandboxd is starting or stopping (see life.go).
	CodeNotReady           = "GENERAL::SERVICE_UNAVAILABLE"
	CodeDiagnosticsNotImpl = "DIAGNOSTICS_NOT_IMPLEMENTED"
	CodePoolNotFound       = "POOL::NOT_FOUND"
	CodePoolInvalid        = "POOL::INVALID_PARAMETER"
	CodePoolExists         = "POOL::ALREADY_EXISTS"
)

// Volume error codes.
const (
	CodeVolInvalidName      = "VOLUME::INVALID_NAME"
	CodeVolDuplicateName    = "VOLUME::DUPLICATE_NAME"
	CodeVolInvalidBackend   = "VOLUME::INVALID_BACKEND"
	CodeVolInvalidMountPath = "VOLUME::INVALID_MOUNT_PATH"
	CodeVolInvalidSubPath   = "VOLUME::INVALID_SUB_PATH"
	CodeVolInvalidHostPath  = "VOLUME::INVALID_HOST_PATH"
	CodeVolHostNotAllowed   = "VOLUME::HOST_PATH_NOT_ALLOWED"
	CodeVolInvalidPVCName   = "VOLUME::INVALID_PVC_NAME"
	CodeVolUnsupported      = "VOLUME::UNSUPPORTED_BACKEND"
	CodeVolPVCNotFound      = "VOLUME::PVC_NOT_FOUND"
	CodeVolPVCNotAllowed    = "VOLUME::PVC_NOT_ALLOWED"
)

// ImageSpec names the sandbox image.
type ImageSpec struct {
	URI  string     `json:"uri"`
	Auth *ImageAuth `json:"auth,omitempty"`
}

// ImageAuth is a registry credential.
type ImageAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Platform is an os/arch pair.
type Platform struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// Volume is one mount request (reference §1.5.1).
type Volume struct {
	Name      string     `json:"name"`
	MountPath string     `json:"mountPath"`
	ReadOnly  bool       `json:"readOnly,omitempty"`
	SubPath   string     `json:"subPath,omitempty"`
	Host      *HostPath  `json:"host,omitempty"`
	PVC       *PVC       `json:"pvc,omitempty"`
	OSSFS     *anyObject `json:"ossfs,omitempty"`
}

// HostPath is a bind mount backend.
type HostPath struct {
	Path string `json:"path"`
}

// PVC is a named-volume backend (a Docker volume on this runtime).
type PVC struct {
	ClaimName                  string `json:"claimName"`
	CreateIfNotExists          *bool  `json:"createIfNotExists,omitempty"`
	DeleteOnSandboxTermination bool   `json:"deleteOnSandboxTermination,omitempty"`
}

type anyObject = json.RawMessage

// CreateRequest is POST /v1/sandboxes.
type CreateRequest struct {
	Image          *ImageSpec         `json:"image"`
	SnapshotID     string             `json:"snapshotId"`
	Platform       *Platform          `json:"platform"`
	Timeout        *int               `json:"timeout"`
	ResourceLimits map[string]string  `json:"resourceLimits"`
	Env            map[string]*string `json:"env"`
	Metadata       map[string]string  `json:"metadata"`
	Entrypoint     []string           `json:"entrypoint"`
	NetworkPolicy  *NetworkPolicy     `json:"networkPolicy"`
	SecureAccess   bool               `json:"secureAccess"`
	Volumes        []Volume           `json:"volumes"`
	Extensions     map[string]string  `json:"extensions"`

	// Upstream 1.1: Kubernetes-style resource requests, and lifecycle
	// hooks (OSEP-0020), which are refused as upstream's Docker provider
	// does.
	ResourceRequests map[string]string `json:"resourceRequests"`
	Lifecycle        json.RawMessage   `json:"lifecycle"`

	// Upstream 1.1.1: a fast-sandbox template and the credential proxy,
	// neither of which sandboxd has; see checkUpstreamOnly.
	TemplateID      string           `json:"templateId"`
	CredentialProxy *CredentialProxy `json:"credentialProxy"`

	// id is the sandbox's id when chosen before the create (a fork's
	// targets); empty, a new one.
	id string
}

// CredentialProxy is upstream's credentialProxy of a create request.
type CredentialProxy struct {
	Enabled bool `json:"enabled"`
}

// NetworkPolicy is upstream's egress policy. sandboxd enforces only
// deny-all (a sandbox without a network); anything finer needs upstream's
// egress sidecar and is refused.
type NetworkPolicy struct {
	DefaultAction string            `json:"defaultAction,omitempty"`
	Egress        []json.RawMessage `json:"egress,omitempty"`
}

// Status is a sandbox's state as the API reports it.
type Status struct {
	State            string    `json:"state"`
	Reason           string    `json:"reason,omitempty"`
	Message          string    `json:"message,omitempty"`
	LastTransitionAt time.Time `json:"lastTransitionAt,omitzero"`
}

// Sandbox is the API's view of a sandbox (reference §1.5.3); fields that
// are unset are omitted, never null.
type Sandbox struct {
	ID         string            `json:"id"`
	Image      *ImageSpec        `json:"image,omitempty"`
	SnapshotID string            `json:"snapshotId,omitempty"`
	Platform   *Platform         `json:"platform,omitempty"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// Page is one page of a list.
type Page struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"pageSize"`
	TotalItems  int  `json:"totalItems"`
	TotalPages  int  `json:"totalPages"`
	HasNextPage bool `json:"hasNextPage"`
}

// ListFilter selects sandboxes in List.
type ListFilter struct {
	States   []string
	Metadata map[string]string
	Page     int
	PageSize int
}

// Endpoint is where a port of a sandbox is reached.
type Endpoint struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// Snapshot is the API's view of a snapshot.
type Snapshot struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandboxId"`
	Name      string    `json:"name,omitempty"`
	Status    Status    `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
}

// wireTime normalises a timestamp as upstream writes it: UTC, microseconds.
func wireTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
