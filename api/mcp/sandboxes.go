package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Wire shapes of the lifecycle API (camelCase).
type wireSandbox struct {
	ID    string `json:"id"`
	Image *struct {
		URI string `json:"uri"`
	} `json:"image"`
	SnapshotID string    `json:"snapshotId"`
	Platform   *Platform `json:"platform"`
	Status     struct {
		State            string `json:"state"`
		Reason           string `json:"reason"`
		Message          string `json:"message"`
		LastTransitionAt string `json:"lastTransitionAt"`
	} `json:"status"`
	Metadata   map[string]string `json:"metadata"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  string            `json:"expiresAt"`
	CreatedAt  string            `json:"createdAt"`
}

// Platform is an OS and architecture.
type Platform struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// SandboxInfo is a sandbox as upstream opensandbox-mcp reports it.
type SandboxInfo struct {
	ID         string            `json:"id"`
	Status     SandboxStatus     `json:"status"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  string            `json:"expires_at,omitempty" jsonschema:"when it expires (RFC 3339); absent when it never does"`
	CreatedAt  string            `json:"created_at"`
	Image      *ImageInfo        `json:"image,omitempty"`
	SnapshotID string            `json:"snapshot_id,omitempty"`
	Platform   *Platform         `json:"platform,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
}

// SandboxStatus is a sandbox's state.
type SandboxStatus struct {
	State            string `json:"state" jsonschema:"Running, Paused, Pending, Terminated, Failed or Unknown"`
	Reason           string `json:"reason,omitempty"`
	Message          string `json:"message,omitempty"`
	LastTransitionAt string `json:"last_transition_at,omitempty"`
}

// ImageInfo is the image a sandbox runs.
type ImageInfo struct {
	Image string `json:"image"`
}

func (w *wireSandbox) info() SandboxInfo {
	in := SandboxInfo{
		ID: w.ID, Entrypoint: w.Entrypoint, ExpiresAt: w.ExpiresAt, CreatedAt: w.CreatedAt,
		SnapshotID: w.SnapshotID, Platform: w.Platform, Metadata: w.Metadata,
		Status: SandboxStatus{State: w.Status.State, Reason: w.Status.Reason, Message: w.Status.Message, LastTransitionAt: w.Status.LastTransitionAt},
	}
	if in.Entrypoint == nil {
		in.Entrypoint = []string{}
	}
	if w.Image != nil {
		in.Image = &ImageInfo{Image: w.Image.URI}
	}
	return in
}

// sandboxArg is the argument that names a sandbox.
type sandboxArg struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as sandbox_create or sandbox_list returned it"`
}

func (a sandboxArg) validate() error { return checkID("sandbox_id", a.SandboxID) }

func (a SnapshotArgs) validate() error { return checkID("snapshot_id", a.SnapshotID) }

// CreateArgs are sandbox_create's arguments (upstream's, plus volumes).
type CreateArgs struct {
	Image                        string            `json:"image" jsonschema:"container image to run, e.g. python:3.12-slim or opensandbox/code-interpreter:v1.1.0 (the server must have it or be able to pull it)"`
	AuthUsername                 string            `json:"auth_username,omitempty" jsonschema:"registry user for a private image (with auth_password)"`
	AuthPassword                 string            `json:"auth_password,omitempty" jsonschema:"registry password for a private image (with auth_username)"`
	TimeoutSeconds               *float64          `json:"timeout_seconds,omitempty" jsonschema:"seconds until the sandbox is deleted automatically (default 600; 0 for no expiry if the server allows it); extend it with sandbox_renew"`
	ReadyTimeoutSeconds          *float64          `json:"ready_timeout_seconds,omitempty" jsonschema:"seconds to wait for the sandbox to answer (default 30)"`
	HealthCheckPollingIntervalMS *int              `json:"health_check_polling_interval_ms,omitempty" jsonschema:"milliseconds between readiness checks (default 200)"`
	SkipHealthCheck              bool              `json:"skip_health_check,omitempty" jsonschema:"return without waiting for the sandbox to answer"`
	Env                          map[string]string `json:"env,omitempty" jsonschema:"environment variables of the sandbox"`
	Metadata                     map[string]string `json:"metadata,omitempty" jsonschema:"labels to find the sandbox by (sandbox_list's filter)"`
	Resource                     map[string]string `json:"resource,omitempty" jsonschema:"resource limits, e.g. {\"cpu\": \"1\", \"memory\": \"2Gi\"}; the server's defaults when absent"`
	Extensions                   map[string]string `json:"extensions,omitempty" jsonschema:"OpenSandbox extensions (opaque key/value pairs)"`
	NetworkPolicy                map[string]any    `json:"network_policy,omitempty" jsonschema:"egress policy: {\"defaultAction\": \"deny\"} cuts the network off"`
	Entrypoint                   []string          `json:"entrypoint,omitempty" jsonschema:"the sandbox's main process (default [\"tail\", \"-f\", \"/dev/null\"]; for opensandbox/code-interpreter images use [\"/opt/code-interpreter/code-interpreter.sh\"] so that code_run works)"`
	Volumes                      []map[string]any  `json:"volumes,omitempty" jsonschema:"volumes as the lifecycle API takes them: [{\"name\", \"mountPath\", \"readOnly\"?, \"host\": {\"path\"}} or {\"pvc\": {\"claimName\"}}]; host paths must be allowed by the server's configuration"`
}

// CreateResult is what sandbox_create and sandbox_connect return.
type CreateResult struct {
	SandboxID string      `json:"sandbox_id"`
	Info      SandboxInfo `json:"info"`
}

// ConnectArgs are sandbox_connect's arguments.
type ConnectArgs struct {
	sandboxArg
	ConnectTimeoutSeconds        *float64 `json:"connect_timeout_seconds,omitempty" jsonschema:"seconds to wait for the sandbox to answer (default 30)"`
	HealthCheckPollingIntervalMS *int     `json:"health_check_polling_interval_ms,omitempty" jsonschema:"milliseconds between readiness checks (default 200)"`
	SkipHealthCheck              bool     `json:"skip_health_check,omitempty" jsonschema:"return without waiting for the sandbox to answer"`
}

// StatusResult is the result of a tool that only acts.
type StatusResult struct {
	Status string `json:"status"`
	State  string `json:"state,omitempty" jsonschema:"the sandbox's state afterwards"`
}

// ListArgs are sandbox_list's arguments.
type ListArgs struct {
	Filter *struct {
		States   []string          `json:"states,omitempty" jsonschema:"states to list, e.g. [\"Running\", \"Paused\"]"`
		Metadata map[string]string `json:"metadata,omitempty" jsonschema:"labels a sandbox must all have"`
		PageSize int               `json:"page_size,omitempty" jsonschema:"sandboxes per page (1 to 200, default 20)"`
		Page     int               `json:"page,omitempty" jsonschema:"page number, from 1"`
	} `json:"filter,omitempty"`
}

// ListResult is a page of sandboxes.
type ListResult struct {
	SandboxInfos []SandboxInfo `json:"sandbox_infos"`
	Pagination   struct {
		Page        int  `json:"page"`
		PageSize    int  `json:"page_size"`
		TotalItems  int  `json:"total_items"`
		TotalPages  int  `json:"total_pages"`
		HasNextPage bool `json:"has_next_page"`
	} `json:"pagination"`
}

// RenewArgs are sandbox_renew's arguments.
type RenewArgs struct {
	sandboxArg
	TimeoutSeconds float64 `json:"timeout_seconds" jsonschema:"the sandbox then expires this many seconds from now"`
}

// EndpointArgs are sandbox_get_endpoint's arguments.
type EndpointArgs struct {
	sandboxArg
	Port             int  `json:"port" jsonschema:"port a server in the sandbox listens on (1 to 65535)"`
	ConnectIfMissing bool `json:"connect_if_missing,omitempty" jsonschema:"accepted for compatibility; sandboxd always knows every sandbox"`
}

// EndpointResult is how to reach a port of a sandbox.
type EndpointResult struct {
	Endpoint string            `json:"endpoint" jsonschema:"host:port/path without a scheme, as the OpenSandbox SDKs use it"`
	URL      string            `json:"url" jsonschema:"the same as a full URL for a browser or curl"`
	Headers  map[string]string `json:"headers" jsonschema:"headers every request to the URL must carry (an access token of this sandbox only)"`
}

// MetricsResult is a sandbox's resource use.
type MetricsResult struct {
	CPUCount         float64 `json:"cpu_count"`
	CPUUsedPercent   float64 `json:"cpu_used_percentage"`
	MemoryTotalInMiB float64 `json:"memory_total_in_mib"`
	MemoryUsedInMiB  float64 `json:"memory_used_in_mib"`
	Timestamp        int64   `json:"timestamp" jsonschema:"Unix milliseconds"`
}

// HealthResult says whether a sandbox answers.
type HealthResult struct {
	SandboxID string `json:"sandbox_id"`
	Healthy   bool   `json:"healthy"`
}

// compatArg is upstream's connect_if_missing, accepted and ignored:
// sandboxd holds every sandbox's state server-side.
type compatArg struct {
	ConnectIfMissing bool `json:"connect_if_missing,omitempty" jsonschema:"accepted for compatibility; sandboxd always knows every sandbox"`
}

// SnapshotArgs name a snapshot.
type SnapshotArgs struct {
	SnapshotID string `json:"snapshot_id" jsonschema:"the snapshot's id, as snapshot_create or snapshot_list returned it"`
}

// SnapshotCreateArgs are snapshot_create's arguments.
type SnapshotCreateArgs struct {
	sandboxArg
	Name string `json:"name,omitempty" jsonschema:"a name for the snapshot"`
}

// SnapshotListArgs filter snapshot_list.
type SnapshotListArgs struct {
	SandboxID string   `json:"sandbox_id,omitempty" jsonschema:"only the snapshots of this sandbox"`
	States    []string `json:"states,omitempty" jsonschema:"only these states: Creating, Ready, Failed"`
}

// SnapshotRestoreArgs are snapshot_restore's arguments.
type SnapshotRestoreArgs struct {
	SnapshotArgs
	TimeoutSeconds *float64          `json:"timeout_seconds,omitempty" jsonschema:"seconds until the new sandbox is deleted automatically (default 600)"`
	Entrypoint     []string          `json:"entrypoint,omitempty" jsonschema:"the new sandbox's main process (default [\"tail\", \"-f\", \"/dev/null\"])"`
	Env            map[string]string `json:"env,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Resource       map[string]string `json:"resource,omitempty"`
}

// Snapshot is a saved state of a sandbox.
type Snapshot struct {
	ID        string `json:"id"`
	SandboxID string `json:"sandbox_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Status    struct {
		State   string `json:"state" jsonschema:"Creating, Ready, Failed or Deleting"`
		Reason  string `json:"reason,omitempty"`
		Message string `json:"message,omitempty"`
	} `json:"status"`
	CreatedAt string `json:"created_at,omitempty"`
}

type wireSnapshot struct {
	ID        string `json:"id"`
	SandboxID string `json:"sandboxId"`
	Name      string `json:"name"`
	Status    struct {
		State   string `json:"state"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"status"`
	CreatedAt string `json:"createdAt"`
}

func (w wireSnapshot) snapshot() Snapshot {
	s := Snapshot{ID: w.ID, SandboxID: w.SandboxID, Name: w.Name, CreatedAt: w.CreatedAt}
	s.Status.State, s.Status.Reason, s.Status.Message = w.Status.State, w.Status.Reason, w.Status.Message
	return s
}

// SnapshotList is a list of snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// defaultEntrypoint is the OpenSandbox SDKs' default main process.
var defaultEntrypoint = []string{"tail", "-f", "/dev/null"}

// timeoutField is the create request's timeout: default 600 s, 0 for none.
func timeoutField(sec *float64) (*int, error) {
	if sec == nil {
		t := 600
		return &t, nil
	}
	if *sec < 0 {
		return nil, errors.New("timeout_seconds must not be negative")
	}
	if *sec == 0 {
		return nil, nil
	}
	t := int(*sec)
	return &t, nil
}

func (t *tools) addSandboxTools(s *sdk.Server, opts Options) {
	if !opts.NoCreate {
		add(s, t, &sdk.Tool{Name: "sandbox_create", Annotations: mutating, Description: `Create a new sandbox: an isolated container running image, and wait until it answers.
Use it before running anything, unless sandbox_list shows a sandbox to reuse. Keep the returned sandbox_id: every other tool needs it.
For Python with code_run use image "opensandbox/code-interpreter:v1.1.0" with entrypoint ["/opt/code-interpreter/code-interpreter.sh"].
The sandbox is deleted after timeout_seconds (default 600) unless renewed with sandbox_renew; delete it with sandbox_kill when done.
Returns {sandbox_id, info}.`}, t.create)
		add(s, t, &sdk.Tool{Name: "snapshot_restore", Annotations: mutating, Description: `Create a new sandbox from a snapshot (see snapshot_create): its files as they were when the snapshot was taken.
Returns {sandbox_id, info} like sandbox_create.`}, t.snapshotRestore)
	}
	add(s, t, &sdk.Tool{Name: "sandbox_connect", Annotations: readOnly, Description: `Check that an existing sandbox exists and answers, and return its details.
Use it to pick up a sandbox created earlier (e.g. in another conversation). Returns {sandbox_id, info}.`}, t.connect)
	add(s, t, &sdk.Tool{Name: "sandbox_kill", Annotations: destructive, Description: `Delete a sandbox and everything in it, at once. Use it when the work is done. Returns {status: "killed"}.`},
		func(ctx context.Context, c *caller, in sandboxArg) (*sdk.CallToolResult, StatusResult, error) {
			err := c.json(ctx, http.MethodDelete, lifecyclePath("/sandboxes/%s", in.SandboxID), nil, nil, nil)
			return nil, StatusResult{Status: "killed"}, err
		})
	add(s, t, &sdk.Tool{Name: "sandbox_get_info", Annotations: readOnly, Description: `Return a sandbox's details: state (Running, Paused...), image, metadata, creation and expiry times.`},
		func(ctx context.Context, c *caller, in sandboxArg) (*sdk.CallToolResult, SandboxInfo, error) {
			var w wireSandbox
			err := c.json(ctx, http.MethodGet, lifecyclePath("/sandboxes/%s", in.SandboxID), nil, nil, &w)
			return nil, w.info(), err
		})
	add(s, t, &sdk.Tool{Name: "sandbox_list", Annotations: readOnly, Description: `List the sandboxes this key can use, newest first, optionally filtered by state and metadata.
Returns {sandbox_infos, pagination}; ask for the next page with filter.page when pagination.has_next_page is true.`}, t.list)
	add(s, t, &sdk.Tool{Name: "sandbox_renew", Annotations: idempotent, Description: `Set a sandbox to expire timeout_seconds from now, e.g. to keep it for longer work. Returns {expires_at}.`}, t.renew)
	add(s, t, &sdk.Tool{Name: "sandbox_pause", Annotations: idempotent, Description: `Pause a running sandbox: its processes are frozen (memory kept) until sandbox_resume. Commands and files cannot be used while it is paused.
Returns {status: "paused", state}.`},
		func(ctx context.Context, c *caller, in sandboxArg) (*sdk.CallToolResult, StatusResult, error) {
			return c.transition(ctx, in.SandboxID, "pause", "paused")
		})
	add(s, t, &sdk.Tool{Name: "sandbox_resume", Annotations: idempotent, Description: `Resume a paused sandbox: its processes continue where they stopped. Returns {status: "resumed", state}.`},
		func(ctx context.Context, c *caller, in sandboxArg) (*sdk.CallToolResult, StatusResult, error) {
			return c.transition(ctx, in.SandboxID, "resume", "resumed")
		})
	add(s, t, &sdk.Tool{Name: "sandbox_get_endpoint", Annotations: readOnly, Description: `Return how to reach a port a server listens on inside the sandbox (e.g. a web app on 8000), through sandboxd: {endpoint (no scheme, for the OpenSandbox SDKs), url (for a browser or curl), headers (to send with every request)}.
Start the server first, e.g. with command_run and background true.`}, t.endpoint)
	add(s, t, &sdk.Tool{Name: "sandbox_get_metrics", Annotations: readOnly, Description: `Return a sandbox's CPU and memory use: {cpu_count, cpu_used_percentage, memory_total_in_mib, memory_used_in_mib, timestamp}.`},
		func(ctx context.Context, c *caller, in struct {
			sandboxArg
			compatArg
		}) (*sdk.CallToolResult, MetricsResult, error) {
			var m struct {
				CPUCount float64 `json:"cpu_count"`
				CPUUsed  float64 `json:"cpu_used_pct"`
				MemTotal float64 `json:"mem_total_mib"`
				MemUsed  float64 `json:"mem_used_mib"`
				Time     int64   `json:"timestamp"`
			}
			err := c.json(ctx, http.MethodGet, execdPath(in.SandboxID, "/metrics"), nil, nil, &m)
			return nil, MetricsResult{m.CPUCount, m.CPUUsed, m.MemTotal, m.MemUsed, m.Time}, err
		})
	add(s, t, &sdk.Tool{Name: "sandbox_healthcheck", Annotations: readOnly, Description: `Check whether a sandbox answers (its command and file API is up). Returns {sandbox_id, healthy}.`},
		func(ctx context.Context, c *caller, in struct {
			sandboxArg
			compatArg
		}) (*sdk.CallToolResult, HealthResult, error) {
			err := c.json(ctx, http.MethodGet, execdPath(in.SandboxID, "/ping"), nil, nil, nil)
			var ae *apiError
			if errors.As(err, &ae) && ae.Status/100 == 5 {
				err = nil // the sandbox does not answer: that is the answer
			}
			return nil, HealthResult{SandboxID: in.SandboxID, Healthy: err == nil}, err
		})
	add(s, t, &sdk.Tool{Name: "snapshot_create", Annotations: mutating, Description: `Save a running sandbox's files as a snapshot, to restore later with snapshot_restore (the sandbox keeps running).
Taking it happens in the background: snapshot_get shows status.state Creating, then Ready. Returns the snapshot.`},
		func(ctx context.Context, c *caller, in SnapshotCreateArgs) (*sdk.CallToolResult, Snapshot, error) {
			body := map[string]any{}
			if in.Name != "" {
				body["name"] = in.Name
			}
			var w wireSnapshot
			err := c.json(ctx, http.MethodPost, lifecyclePath("/sandboxes/%s/snapshots", in.SandboxID), nil, body, &w)
			return nil, w.snapshot(), err
		})
	add(s, t, &sdk.Tool{Name: "snapshot_get", Annotations: readOnly, Description: `Return a snapshot: its state (Creating, Ready, Failed), sandbox and name.`},
		func(ctx context.Context, c *caller, in SnapshotArgs) (*sdk.CallToolResult, Snapshot, error) {
			var w wireSnapshot
			err := c.json(ctx, http.MethodGet, lifecyclePath("/snapshots/%s", in.SnapshotID), nil, nil, &w)
			return nil, w.snapshot(), err
		})
	add(s, t, &sdk.Tool{Name: "snapshot_list", Annotations: readOnly, Description: `List snapshots (the first 200), optionally of one sandbox or in some states. Returns {snapshots}.`},
		func(ctx context.Context, c *caller, in SnapshotListArgs) (*sdk.CallToolResult, SnapshotList, error) {
			q := url.Values{"pageSize": {"200"}}
			if in.SandboxID != "" {
				q.Set("sandboxId", in.SandboxID)
			}
			for _, st := range in.States {
				q.Add("state", st)
			}
			var w struct {
				Items []wireSnapshot `json:"items"`
			}
			err := c.json(ctx, http.MethodGet, lifecyclePath("/snapshots"), q, nil, &w)
			out := SnapshotList{Snapshots: []Snapshot{}}
			for _, it := range w.Items {
				out.Snapshots = append(out.Snapshots, it.snapshot())
			}
			return nil, out, err
		})
	add(s, t, &sdk.Tool{Name: "snapshot_delete", Annotations: destructive, Description: `Delete a snapshot. Returns {status: "deleted"}.`},
		func(ctx context.Context, c *caller, in SnapshotArgs) (*sdk.CallToolResult, StatusResult, error) {
			err := c.json(ctx, http.MethodDelete, lifecyclePath("/snapshots/%s", in.SnapshotID), nil, nil, nil)
			return nil, StatusResult{Status: "deleted"}, err
		})
}

func (t *tools) create(ctx context.Context, c *caller, in CreateArgs) (*sdk.CallToolResult, CreateResult, error) {
	if in.Image == "" {
		return nil, CreateResult{}, errors.New("image must not be empty")
	}
	if (in.AuthUsername == "") != (in.AuthPassword == "") {
		return nil, CreateResult{}, errors.New("auth_username and auth_password must be provided together")
	}
	timeout, err := timeoutField(in.TimeoutSeconds)
	if err != nil {
		return nil, CreateResult{}, err
	}
	image := map[string]any{"uri": in.Image}
	if in.AuthUsername != "" {
		image["auth"] = map[string]string{"username": in.AuthUsername, "password": in.AuthPassword}
	}
	entrypoint := in.Entrypoint
	if len(entrypoint) == 0 {
		entrypoint = defaultEntrypoint
	}
	body := map[string]any{"image": image, "entrypoint": entrypoint, "timeout": timeout}
	setIf(body, "env", in.Env)
	setIf(body, "metadata", in.Metadata)
	setIf(body, "resourceLimits", in.Resource)
	setIf(body, "extensions", in.Extensions)
	setIf(body, "networkPolicy", in.NetworkPolicy)
	setIf(body, "volumes", in.Volumes)
	return c.createSandbox(ctx, body, readiness{in.SkipHealthCheck, in.ReadyTimeoutSeconds, in.HealthCheckPollingIntervalMS})
}

func (t *tools) snapshotRestore(ctx context.Context, c *caller, in SnapshotRestoreArgs) (*sdk.CallToolResult, CreateResult, error) {
	timeout, err := timeoutField(in.TimeoutSeconds)
	if err != nil {
		return nil, CreateResult{}, err
	}
	body := map[string]any{"snapshotId": in.SnapshotID, "timeout": timeout}
	setIf(body, "entrypoint", in.Entrypoint)
	setIf(body, "env", in.Env)
	setIf(body, "metadata", in.Metadata)
	setIf(body, "resourceLimits", in.Resource)
	return c.createSandbox(ctx, body, readiness{})
}

// setIf sets body[k] to a non-empty map or slice v.
func setIf[V map[string]string | map[string]any | []map[string]any | []string](body map[string]any, k string, v V) {
	if len(v) > 0 {
		body[k] = v
	}
}

// readiness is how long to wait for a sandbox to answer.
type readiness struct {
	skip     bool
	timeout  *float64
	interval *int
}

// createSandbox creates a sandbox and waits for it to answer.
func (c *caller) createSandbox(ctx context.Context, body map[string]any, r readiness) (*sdk.CallToolResult, CreateResult, error) {
	var w wireSandbox
	if err := c.json(ctx, http.MethodPost, lifecyclePath("/sandboxes"), nil, body, &w); err != nil {
		return nil, CreateResult{}, err
	}
	return c.ready(ctx, w.ID, r)
}

func (t *tools) connect(ctx context.Context, c *caller, in ConnectArgs) (*sdk.CallToolResult, CreateResult, error) {
	return c.ready(ctx, in.SandboxID, readiness{in.SkipHealthCheck, in.ConnectTimeoutSeconds, in.HealthCheckPollingIntervalMS})
}

// ready waits until the sandbox's execd API answers (unless told not to)
// and returns the sandbox's details.
func (c *caller) ready(ctx context.Context, id string, r readiness) (*sdk.CallToolResult, CreateResult, error) {
	if !r.skip {
		timeout, interval := 30*time.Second, 200*time.Millisecond
		if r.timeout != nil && *r.timeout > 0 {
			timeout = time.Duration(*r.timeout * float64(time.Second))
		}
		if r.interval != nil && *r.interval > 0 {
			interval = time.Duration(*r.interval) * time.Millisecond
		}
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		for {
			err := c.json(wctx, http.MethodGet, execdPath(id, "/ping"), nil, nil, nil)
			if err == nil {
				break
			}
			var ae *apiError
			if errors.As(err, &ae) && ae.Status/100 == 4 {
				return nil, CreateResult{SandboxID: id}, err // gone, or not this key's
			}
			select {
			case <-wctx.Done():
				return nil, CreateResult{SandboxID: id}, fmt.Errorf("sandbox %s did not answer within %v (it exists; check it with sandbox_get_info): %w", id, timeout, err)
			case <-time.After(interval):
			}
		}
	}
	var w wireSandbox
	if err := c.json(ctx, http.MethodGet, lifecyclePath("/sandboxes/%s", id), nil, nil, &w); err != nil {
		return nil, CreateResult{SandboxID: id}, err
	}
	return nil, CreateResult{SandboxID: id, Info: w.info()}, nil
}

func (t *tools) list(ctx context.Context, c *caller, in ListArgs) (*sdk.CallToolResult, ListResult, error) {
	q := url.Values{}
	if f := in.Filter; f != nil {
		for _, st := range f.States {
			q.Add("state", st)
		}
		if len(f.Metadata) > 0 {
			m := url.Values{}
			for k, v := range f.Metadata {
				m.Set(k, v)
			}
			q.Set("metadata", m.Encode())
		}
		if f.PageSize != 0 {
			q.Set("pageSize", strconv.Itoa(f.PageSize))
		}
		if f.Page != 0 {
			q.Set("page", strconv.Itoa(f.Page))
		}
	}
	var w struct {
		Items      []wireSandbox `json:"items"`
		Pagination struct {
			Page        int  `json:"page"`
			PageSize    int  `json:"pageSize"`
			TotalItems  int  `json:"totalItems"`
			TotalPages  int  `json:"totalPages"`
			HasNextPage bool `json:"hasNextPage"`
		} `json:"pagination"`
	}
	var out ListResult
	out.SandboxInfos = []SandboxInfo{}
	if err := c.json(ctx, http.MethodGet, lifecyclePath("/sandboxes"), q, nil, &w); err != nil {
		return nil, out, err
	}
	for i := range w.Items {
		out.SandboxInfos = append(out.SandboxInfos, w.Items[i].info())
	}
	p := w.Pagination
	out.Pagination.Page, out.Pagination.PageSize, out.Pagination.TotalItems, out.Pagination.TotalPages, out.Pagination.HasNextPage =
		p.Page, p.PageSize, p.TotalItems, p.TotalPages, p.HasNextPage
	return nil, out, nil
}

func (t *tools) renew(ctx context.Context, c *caller, in RenewArgs) (*sdk.CallToolResult, map[string]string, error) {
	if in.TimeoutSeconds <= 0 {
		return nil, nil, errors.New("timeout_seconds must be positive")
	}
	at := time.Now().UTC().Add(time.Duration(in.TimeoutSeconds * float64(time.Second)))
	var w struct {
		ExpiresAt string `json:"expiresAt"`
	}
	err := c.json(ctx, http.MethodPost, lifecyclePath("/sandboxes/%s/renew-expiration", in.SandboxID), nil,
		map[string]string{"expiresAt": at.Format(time.RFC3339Nano)}, &w)
	return nil, map[string]string{"expires_at": w.ExpiresAt}, err
}

// transition pauses or resumes a sandbox and reports its state afterwards.
func (c *caller) transition(ctx context.Context, id, action, done string) (*sdk.CallToolResult, StatusResult, error) {
	if err := c.json(ctx, http.MethodPost, lifecyclePath("/sandboxes/%s/"+action, id), nil, nil, nil); err != nil {
		return nil, StatusResult{}, err
	}
	var w wireSandbox
	if err := c.json(ctx, http.MethodGet, lifecyclePath("/sandboxes/%s", id), nil, nil, &w); err != nil {
		return nil, StatusResult{}, err
	}
	return nil, StatusResult{Status: done, State: w.Status.State}, nil
}

func (t *tools) endpoint(ctx context.Context, c *caller, in EndpointArgs) (*sdk.CallToolResult, EndpointResult, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, EndpointResult{}, fmt.Errorf("port %d is not between 1 and 65535", in.Port)
	}
	var w struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	err := c.json(ctx, http.MethodGet, lifecyclePath("/sandboxes/%s/endpoints/"+strconv.Itoa(in.Port), in.SandboxID),
		url.Values{"use_server_proxy": {"true"}}, nil, &w)
	if err != nil {
		return nil, EndpointResult{}, err
	}
	if w.Headers == nil {
		w.Headers = map[string]string{}
	}
	return nil, EndpointResult{Endpoint: w.Endpoint, URL: c.origin.Scheme + "://" + w.Endpoint, Headers: w.Headers}, nil
}
