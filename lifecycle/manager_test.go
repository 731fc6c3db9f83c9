package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

func ptr[T any](v T) *T { return &v }

func TestMergePatch(t *testing.T) {
	cur := map[string]string{"a": "1", "b": "2"}
	tests := []struct {
		name  string
		patch map[string]*string
		want  map[string]string
	}{
		{"set new", map[string]*string{"c": ptr("3")}, map[string]string{"a": "1", "b": "2", "c": "3"}},
		{"replace", map[string]*string{"a": ptr("x")}, map[string]string{"a": "x", "b": "2"}},
		{"delete with null", map[string]*string{"a": nil}, map[string]string{"b": "2"}},
		{"delete absent key is ignored", map[string]*string{"zz": nil}, map[string]string{"a": "1", "b": "2"}},
		{"empty patch is a no-op", map[string]*string{}, map[string]string{"a": "1", "b": "2"}},
		{"nil patch is a no-op", nil, map[string]string{"a": "1", "b": "2"}},
		{"mixed", map[string]*string{"a": nil, "b": ptr(""), "d": ptr("4")}, map[string]string{"b": "", "d": "4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mergePatch(cur, tt.patch)
			if !maps.Equal(got, tt.want) {
				t.Errorf("mergePatch = %v, want %v", got, tt.want)
			}
			if !maps.Equal(cur, map[string]string{"a": "1", "b": "2"}) {
				t.Errorf("mergePatch modified its input: %v", cur)
			}
		})
	}
	if got := mergePatch(nil, map[string]*string{"a": ptr("1")}); !maps.Equal(got, map[string]string{"a": "1"}) {
		t.Errorf("mergePatch(nil, a=1) = %v", got)
	}
}

func TestCreateValidation(t *testing.T) {
	bad := func(edit func(*CreateRequest)) CreateRequest {
		r := validRequest()
		edit(&r)
		return r
	}
	tests := []struct {
		name string
		req  CreateRequest
		kind Kind
		code string
	}{
		{"neither image nor snapshot", bad(func(r *CreateRequest) { r.Image = nil }), KindUnprocessable, CodeInvalidParameter},
		{"both image and snapshot", bad(func(r *CreateRequest) { r.SnapshotID = "s1" }), KindUnprocessable, CodeInvalidParameter},
		{"blank image uri", bad(func(r *CreateRequest) { r.Image.URI = "  " }), KindUnprocessable, CodeInvalidParameter},
		{"auth without password", bad(func(r *CreateRequest) { r.Image.Auth = &ImageAuth{Username: "u"} }), KindUnprocessable, CodeInvalidParameter},
		{"empty entrypoint", bad(func(r *CreateRequest) { r.Entrypoint = []string{} }), KindUnprocessable, CodeInvalidParameter},
		{"timeout below 60", bad(func(r *CreateRequest) { r.Timeout = ptr(59) }), KindUnprocessable, CodeInvalidParameter},
		{"timeout above max", bad(func(r *CreateRequest) { r.Timeout = ptr(3601) }), KindInvalid, CodeInvalidParameter},
		{"secureAccess", bad(func(r *CreateRequest) { r.SecureAccess = true }), KindInvalid, CodeInvalidParameter},
		{"lifecycle hooks", bad(func(r *CreateRequest) { r.Lifecycle = json.RawMessage(`{"preStart":{"command":["true"]}}`) }), KindInvalid, CodeInvalidParameter},
		{"platform os", bad(func(r *CreateRequest) { r.Platform = &Platform{OS: "windows", Arch: "amd64"} }), KindInvalid, CodeInvalidParameter},
		{"platform arch", bad(func(r *CreateRequest) { r.Platform = &Platform{OS: "linux", Arch: "386"} }), KindInvalid, CodeInvalidParameter},
		{"networkPolicy allow", bad(func(r *CreateRequest) { r.NetworkPolicy = &NetworkPolicy{DefaultAction: "allow"} }), KindInvalid, CodeInvalidParameter},
		{"networkPolicy with egress rules", bad(func(r *CreateRequest) {
			r.NetworkPolicy = &NetworkPolicy{DefaultAction: "deny", Egress: []json.RawMessage{json.RawMessage(`{"action":"allow","target":"pypi.org"}`)}}
		}), KindInvalid, CodeInvalidParameter},
		{"poolRef", bad(func(r *CreateRequest) { r.Extensions = map[string]string{ExtPoolRef: "warm"} }), KindInvalid, CodeUnsupportedPoolRef},
		{"renew extension out of range", bad(func(r *CreateRequest) { r.Extensions = map[string]string{ExtRenewOnAccess: "10"} }), KindInvalid, CodeInvalidParameter},
		{"reserved metadata", bad(func(r *CreateRequest) { r.Metadata = map[string]string{"opensandbox.io/id": "x"} }), KindInvalid, CodeInvalidMetadata},
		{"bad metadata value", bad(func(r *CreateRequest) { r.Metadata = map[string]string{"k": "a b"} }), KindInvalid, CodeInvalidMetadata},
		{"bad memory", bad(func(r *CreateRequest) { r.ResourceLimits = map[string]string{"memory": "lots"} }), KindInvalid, CodeInvalidParameter},
		{"env key with =", bad(func(r *CreateRequest) { r.Env = map[string]*string{"A=B": ptr("x")} }), KindInvalid, CodeInvalidParameter},
		{"env value with NUL", bad(func(r *CreateRequest) { r.Env = map[string]*string{"A": ptr("x\x00")} }), KindInvalid, CodeInvalidParameter},
		{"host volume without allow-list", bad(func(r *CreateRequest) {
			r.Volumes = []Volume{{Name: "v", MountPath: "/m", Host: &HostPath{Path: "/srv"}}}
		}), KindInvalid, CodeVolHostNotAllowed},
		{"unknown snapshot", bad(func(r *CreateRequest) { r.Image, r.SnapshotID = nil, "nope" }), KindNotFound, CodeSnapshotNotFound},
		{"snapshot not ready", bad(func(r *CreateRequest) { r.Image, r.SnapshotID = nil, "creating" }), KindConflict, CodeSnapshotNotReady},
		{"snapshot without image", bad(func(r *CreateRequest) { r.Image, r.SnapshotID = nil, "noimage" }), KindConflict, CodeSnapshotRestore},
	}
	e := newEnv(t, func(c *config.Config) { c.Server.MaxSandboxTimeoutSeconds = 3600 })
	for _, s := range []SnapshotRecord{
		{ID: "creating", State: snapshotCreating, Image: "opensandbox-snapshots:creating"},
		{ID: "noimage", State: snapshotReady},
	} {
		if err := e.store.PutSnapshot(&s); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, err := e.m.Sandboxes.Create(context.Background(), tt.req)
			if sb != nil {
				t.Errorf("Create returned a sandbox with an error")
			}
			wantCode(t, err, tt.kind, tt.code)
			if tt.kind == KindUnprocessable {
				if e, _ := AsError(err); len(e.Field) == 0 || e.Field[0] != "body" {
					t.Errorf("422 field location = %v, want it to start with body", e.Field)
				}
			}
		})
	}
	recs, _ := e.store.Sandboxes()
	containers, _ := e.rt.List(context.Background(), nil)
	if len(recs) != 0 || len(containers) != 0 {
		t.Errorf("invalid requests left %d records and %d containers", len(recs), len(containers))
	}
}

func TestCreateSpec(t *testing.T) {
	e := newEnv(t, nil)
	req := validRequest()
	req.Metadata = map[string]string{"team": "a", "example.com/owner": "bob"}
	req.Env = map[string]*string{"B": ptr("2"), "A": ptr("1"), "SKIP": nil}
	req.Platform = &Platform{OS: "Linux", Arch: "AMD64"}
	req.Extensions = map[string]string{ExtRenewOnAccess: "600"}
	sb, cid := e.create(t, req)
	now := e.clock.Now()

	if sb.Status.State != "Running" || sb.Status.Reason != "CONTAINER_RUNNING" {
		t.Errorf("create status = %+v, want Running", sb.Status)
	}
	if !sb.CreatedAt.Equal(now) || sb.ExpiresAt == nil || !sb.ExpiresAt.Equal(now.Add(600*time.Second)) {
		t.Errorf("createdAt %v expiresAt %v, want %v and +600s", sb.CreatedAt, sb.ExpiresAt, now)
	}
	if sb.Platform == nil || *sb.Platform != (Platform{OS: "linux", Arch: "amd64"}) {
		t.Errorf("platform = %+v, want lower-cased linux/amd64", sb.Platform)
	}
	if sb.Image == nil || sb.Image.URI != "busybox:latest" || !slices.Equal(sb.Entrypoint, req.Entrypoint) {
		t.Errorf("image %+v entrypoint %v", sb.Image, sb.Entrypoint)
	}

	spec := e.rt.Spec(t, cid)
	if spec.Name != "sandbox-"+sb.ID || spec.Image != "busybox:latest" || !slices.Equal(spec.Cmd, req.Entrypoint) {
		t.Errorf("spec name %q image %q cmd %v", spec.Name, spec.Image, spec.Cmd)
	}
	if caps := spec.Capabilities; !caps.DropAll || len(caps.Drop) != 0 {
		t.Errorf("capabilities %+v, want all dropped", caps)
	}
	if slices.Contains(spec.Capabilities.Add, "SYS_ADMIN") || slices.Contains(spec.Capabilities.Add, "NET_RAW") {
		t.Errorf("added capabilities %v hold a dangerous one", spec.Capabilities.Add)
	}
	if !spec.NoNewPrivileges {
		t.Error("no-new-privileges is off")
	}
	if r := spec.Resources; r.Pids != 4096 || r.MemoryBytes != 2<<30 || r.NanoCPUs != 1e9 {
		t.Errorf("limits pids %d memory %d cpu %d, want 4096, 2Gi, 1", r.Pids, r.MemoryBytes, r.NanoCPUs)
	}
	if want := (runtime.Network{Mode: runtime.NetworkIsolated, Name: DefaultNetwork}); spec.Network != want || spec.Platform != "linux/amd64" {
		t.Errorf("network %+v platform %q", spec.Network, spec.Platform)
	}
	if !slices.Equal(spec.Env, []string{"A=1", "B=2"}) {
		t.Errorf("Env = %v, want [A=1 B=2]", spec.Env)
	}
	wantLabels := map[string]string{
		LabelID:             sb.ID,
		LabelInstance:       e.m.Instance(),
		LabelExpiresAt:      now.Add(600 * time.Second).Format(time.RFC3339Nano),
		LabelPlatformOS:     "linux",
		LabelPlatformArch:   "amd64",
		LabelRenewExtend:    "600",
		"team":              "a",
		"example.com/owner": "bob",
	}
	if !maps.Equal(spec.Labels, wantLabels) {
		t.Errorf("labels = %v\nwant %v", spec.Labels, wantLabels)
	}
	if strings.Contains(strings.Join(slices.Collect(maps.Values(spec.Labels)), " "), e.m.Sandboxes.Token(sb.ID)) {
		t.Error("the access token is in a label")
	}
	rec, _ := e.store.Sandbox(sb.ID)
	if rec.State != recordReady || rec.RenewOnAccess != 600 || rec.ContainerID != cid {
		t.Errorf("record = %+v", rec)
	}
}

func TestCreateVariants(t *testing.T) {
	tests := []struct {
		name  string
		cfg   func(*config.Config)
		edit  func(*CreateRequest)
		check func(t *testing.T, sb *Sandbox, spec runtime.Spec)
	}{
		{
			name: "manual cleanup",
			edit: func(r *CreateRequest) { r.Timeout = nil },
			check: func(t *testing.T, sb *Sandbox, spec runtime.Spec) {
				if sb.ExpiresAt != nil {
					t.Errorf("expiresAt = %v, want none", sb.ExpiresAt)
				}
				if _, ok := spec.Labels[LabelExpiresAt]; ok || spec.Labels[LabelManualCleanup] != "true" {
					t.Errorf("labels = %v, want manual-cleanup and no expires-at", spec.Labels)
				}
			},
		},
		{
			name: "deny-all network policy",
			edit: func(r *CreateRequest) { r.NetworkPolicy = &NetworkPolicy{DefaultAction: "Deny"} },
			check: func(t *testing.T, _ *Sandbox, spec runtime.Spec) {
				if spec.Network.Mode != runtime.NetworkNone {
					t.Errorf("network = %+v, want none", spec.Network)
				}
			},
		},
		{
			name: "explicit limits",
			edit: func(r *CreateRequest) {
				r.ResourceLimits = map[string]string{"cpu": "250m", "memory": "512Mi", "gpu": "all"}
			},
			check: func(t *testing.T, _ *Sandbox, spec runtime.Spec) {
				if r := spec.Resources; r.NanoCPUs != 25e7 || r.MemoryBytes != 512<<20 || r.GPUs != -1 {
					t.Errorf("limits = %+v", r)
				}
			},
		},
		{
			name: "read-only rootfs gets a /tmp tmpfs",
			cfg:  func(c *config.Config) { c.Docker.ReadOnlyRootfs = true; c.Docker.SeccompProfile = "/p.json" },
			check: func(t *testing.T, _ *Sandbox, spec runtime.Spec) {
				if !spec.ReadOnlyRoot || !slices.Equal(spec.Tmpfs, []runtime.Tmpfs{scratchTmp}) || spec.SeccompProfile != "/p.json" {
					t.Errorf("spec = %+v", spec)
				}
			},
		},
		{
			name: "idle timeout is recorded",
			cfg:  func(c *config.Config) { c.Lifecycle.IdleTimeout = config.Duration{Duration: 10 * time.Minute} },
			edit: func(r *CreateRequest) { r.Timeout = nil },
			check: func(t *testing.T, sb *Sandbox, _ runtime.Spec) {
				if sb.ExpiresAt == nil || !sb.ExpiresAt.Equal(sb.CreatedAt.Add(10*time.Minute)) {
					t.Errorf("expiresAt = %v, want createdAt + idle timeout", sb.ExpiresAt)
				}
			},
		},
		{
			name: "snapshot restore",
			edit: func(r *CreateRequest) { r.Image, r.SnapshotID, r.Entrypoint = nil, " snap1 ", nil },
			check: func(t *testing.T, sb *Sandbox, spec runtime.Spec) {
				if spec.Image != snapshotImage("snap1") || spec.Labels[LabelSnapshotID] != "snap1" {
					t.Errorf("image %q labels %v", spec.Image, spec.Labels)
				}
				if !slices.Equal(spec.Cmd, []string{"tail", "-f", "/dev/null"}) {
					t.Errorf("cmd = %v, want the default entrypoint", spec.Cmd)
				}
				if sb.Image != nil || sb.SnapshotID != "snap1" {
					t.Errorf("image %+v snapshotId %q, want no image and snap1", sb.Image, sb.SnapshotID)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.cfg)
			if err := e.store.PutSnapshot(&SnapshotRecord{ID: "snap1", State: snapshotReady, Image: snapshotImage("snap1")}); err != nil {
				t.Fatal(err)
			}
			req := validRequest()
			if tt.edit != nil {
				tt.edit(&req)
			}
			sb, cid := e.create(t, req)
			tt.check(t, sb, e.rt.Spec(t, cid))
		})
	}
}

func TestCreateFailureCleansUp(t *testing.T) {
	e := newEnv(t, nil)
	e.rt.FailCreate(errors.New("boom"))
	_, err := e.m.Sandboxes.Create(context.Background(), validRequest())
	wantCode(t, err, KindInternal, CodeStartFailed)
	if recs, _ := e.store.Sandboxes(); len(recs) != 0 {
		t.Errorf("failed create left records: %+v", recs)
	}

	e.rt.FailCreate(runtime.ErrUnavailable)
	_, err = e.m.Sandboxes.Create(context.Background(), validRequest())
	wantCode(t, err, KindUnavailable, CodeEngineUnavailable)
}

func TestGetStatus(t *testing.T) {
	finished := time.Date(2026, 6, 1, 13, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name   string
		set    func(c *runtime.Container)
		state  string
		reason string
		last   time.Time // zero: createdAt
	}{
		{"running", func(c *runtime.Container) {}, "Running", "CONTAINER_RUNNING", time.Time{}},
		{"paused", func(c *runtime.Container) { c.State = runtime.StatePaused }, "Paused", "CONTAINER_PAUSED", time.Time{}},
		{"restarting", func(c *runtime.Container) { c.State = runtime.StateRestarting }, "Running", "CONTAINER_RESTARTING", time.Time{}},
		{"created", func(c *runtime.Container) { c.State = runtime.StateCreated }, "Pending", "CONTAINER_STARTING", time.Time{}},
		{"exited 0", func(c *runtime.Container) {
			c.State, c.FinishedAt = runtime.StateExited, finished
		}, "Terminated", "CONTAINER_EXITED", finished.Truncate(time.Microsecond)},
		{"exited 1", func(c *runtime.Container) {
			c.State, c.ExitCode, c.FinishedAt = runtime.StateExited, 1, finished
		}, "Failed", "CONTAINER_EXITED_ERROR", finished.Truncate(time.Microsecond)},
		{"dead", func(c *runtime.Container) { c.State, c.ExitCode = runtime.StateDead, 2 }, "Failed", "CONTAINER_EXITED_ERROR", time.Time{}},
		{"oom killed", func(c *runtime.Container) {
			c.State, c.ExitCode, c.OOMKilled = runtime.StateExited, 137, true
		}, "Failed", "CONTAINER_OOM_KILLED", time.Time{}},
		{"removing", func(c *runtime.Container) { c.State = runtime.StateRemoving }, "Unknown", "CONTAINER_STATE_UNKNOWN", time.Time{}},
	}
	e := newEnv(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, cid := e.create(t, validRequest())
			e.rt.Set(t, cid, tt.set)
			got, err := e.m.Sandboxes.Get(context.Background(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.State != tt.state || got.Status.Reason != tt.reason || got.Status.Message == "" {
				t.Errorf("status = %+v, want %s/%s", got.Status, tt.state, tt.reason)
			}
			want := tt.last
			if want.IsZero() {
				want = sb.CreatedAt
			}
			if !got.Status.LastTransitionAt.Equal(want) || got.Status.LastTransitionAt.Location() != time.UTC {
				t.Errorf("lastTransitionAt = %v, want %v UTC", got.Status.LastTransitionAt, want)
			}
		})
	}
	if strings.Contains(status(&runtime.Container{State: runtime.StateExited, ExitCode: 3}).Message, "3") == false {
		t.Error("exit code missing from the Failed message")
	}
}

func TestGetNotFoundAndVanished(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.m.Sandboxes.Get(context.Background(), "no-such-id")
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)

	sb, cid := e.create(t, validRequest())
	if err := e.rt.Remove(context.Background(), cid); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Sandboxes.Get(context.Background(), sb.ID)
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)
	if _, err := e.store.Sandbox(sb.ID); !errors.Is(err, errNoRecord) {
		t.Errorf("record of a vanished sandbox kept: %v", err)
	}
}

func TestList(t *testing.T) {
	e := newEnv(t, nil)
	type made struct {
		id, cid string
	}
	var all []made
	// Five sandboxes, one second apart: s0 oldest.
	mds := []map[string]string{{"team": "a"}, {"team": "b"}, {"team": "a", "env": "x"}, nil, {"team": "a"}}
	for _, md := range mds {
		req := validRequest()
		req.Metadata = md
		sb, cid := e.create(t, req)
		all = append(all, made{sb.ID, cid})
		e.clock.Advance(time.Second)
	}
	e.rt.Set(t, all[1].cid, func(c *runtime.Container) { c.State = runtime.StatePaused })
	e.rt.Set(t, all[2].cid, func(c *runtime.Container) { c.State, c.ExitCode = runtime.StateExited, 1 })
	e.rt.Set(t, all[3].cid, func(c *runtime.Container) { c.State = runtime.StateExited })
	// Noise: another instance's container, and a record whose container vanished.
	e.rt.Add(runtime.Container{Labels: map[string]string{LabelID: "foreign", LabelInstance: "other"}, State: runtime.StateRunning})
	if err := e.store.PutSandbox(&Record{ID: "ghost", State: recordReady, ContainerID: "gone", CreatedAt: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	ids := func(items []*Sandbox) []string {
		var out []string
		for _, sb := range items {
			out = append(out, sb.ID)
		}
		return out
	}
	tests := []struct {
		name     string
		f        ListFilter
		want     []int // indexes into all, in order
		wantPage Page
	}{
		{"all newest first", ListFilter{Page: 1, PageSize: 20}, []int{4, 3, 2, 1, 0}, Page{1, 20, 5, 1, false}},
		{"state is case-insensitive", ListFilter{States: []string{"running"}, Page: 1, PageSize: 20}, []int{4, 0}, Page{1, 20, 2, 1, false}},
		{"states are ORed", ListFilter{States: []string{"PAUSED", "Terminated"}, Page: 1, PageSize: 20}, []int{3, 1}, Page{1, 20, 2, 1, false}},
		{"exit code from a full inspect", ListFilter{States: []string{"Failed"}, Page: 1, PageSize: 20}, []int{2}, Page{1, 20, 1, 1, false}},
		{"metadata", ListFilter{Metadata: map[string]string{"team": "a"}, Page: 1, PageSize: 20}, []int{4, 2, 0}, Page{1, 20, 3, 1, false}},
		{"metadata ANDed", ListFilter{Metadata: map[string]string{"team": "a", "env": "x"}, Page: 1, PageSize: 20}, []int{2}, Page{1, 20, 1, 1, false}},
		{"metadata and state", ListFilter{States: []string{"Running"}, Metadata: map[string]string{"team": "a"}, Page: 1, PageSize: 20}, []int{4, 0}, Page{1, 20, 2, 1, false}},
		{"no match", ListFilter{Metadata: map[string]string{"team": "zz"}, Page: 1, PageSize: 20}, nil, Page{1, 20, 0, 0, false}},
		{"page 1 of 3", ListFilter{Page: 1, PageSize: 2}, []int{4, 3}, Page{1, 2, 5, 3, true}},
		{"page 2 of 3", ListFilter{Page: 2, PageSize: 2}, []int{2, 1}, Page{2, 2, 5, 3, true}},
		{"last page", ListFilter{Page: 3, PageSize: 2}, []int{0}, Page{3, 2, 5, 3, false}},
		{"page past the end", ListFilter{Page: 9, PageSize: 2}, nil, Page{9, 2, 5, 3, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, page, err := e.m.Sandboxes.List(context.Background(), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, i := range tt.want {
				want = append(want, all[i].id)
			}
			if got := ids(items); !slices.Equal(got, want) {
				t.Errorf("ids = %v, want %v", got, want)
			}
			if page != tt.wantPage {
				t.Errorf("page = %+v, want %+v", page, tt.wantPage)
			}
		})
	}
}

func TestPaginate(t *testing.T) {
	items := []int{1, 2, 3, 4, 5}
	tests := []struct {
		page, size int
		want       []int
		p          Page
	}{
		{1, 5, []int{1, 2, 3, 4, 5}, Page{1, 5, 5, 1, false}},
		{1, 200, []int{1, 2, 3, 4, 5}, Page{1, 200, 5, 1, false}},
		{2, 4, []int{5}, Page{2, 4, 5, 2, false}},
		{3, 4, []int{}, Page{3, 4, 5, 2, false}},
		{700000000000000000, 20, []int{}, Page{700000000000000000, 20, 5, 1, false}}, // (page-1)*size overflows
	}
	for _, tt := range tests {
		got, p, err := paginate(items, tt.page, tt.size)
		if err != nil || !slices.Equal(got, tt.want) || p != tt.p {
			t.Errorf("paginate(page %d, size %d) = %v %+v %v; want %v %+v", tt.page, tt.size, got, p, err, tt.want, tt.p)
		}
	}
	if _, p, _ := paginate([]int(nil), 1, 20); p != (Page{1, 20, 0, 0, false}) {
		t.Errorf("empty pagination = %+v", p)
	}
}

func TestPatchMetadata(t *testing.T) {
	e := newEnv(t, nil)
	req := validRequest()
	req.Metadata = map[string]string{"a": "1", "b": "2"}
	sb, _ := e.create(t, req)
	ctx := context.Background()
	tests := []struct {
		name  string
		patch map[string]*string
		want  map[string]string // nil with code set: unchanged
		code  string
	}{
		{"empty patch", map[string]*string{}, map[string]string{"a": "1", "b": "2"}, ""},
		{"set and delete", map[string]*string{"a": nil, "c": ptr("3")}, map[string]string{"b": "2", "c": "3"}, ""},
		{"reserved key", map[string]*string{"opensandbox.io/expires-at": ptr("x")}, nil, CodeReservedMetadata},
		{"reserved key delete", map[string]*string{"opensandbox.io/id": nil}, nil, CodeReservedMetadata},
		{"bad value", map[string]*string{"d": ptr("not valid")}, nil, CodeInvalidMetadata},
		{"bad key", map[string]*string{"bad key": ptr("v")}, nil, CodeInvalidMetadata},
		{"delete all", map[string]*string{"b": nil, "c": nil}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := e.store.Sandbox(sb.ID)
			got, err := e.m.Sandboxes.PatchMetadata(ctx, sb.ID, tt.patch)
			if tt.code != "" {
				wantCode(t, err, KindInvalid, tt.code)
				after, _ := e.store.Sandbox(sb.ID)
				if !maps.Equal(before.Metadata, after.Metadata) {
					t.Errorf("rejected patch changed metadata to %v", after.Metadata)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.Metadata, tt.want) {
				t.Errorf("metadata = %v, want %v", got.Metadata, tt.want)
			}
			if tt.want == nil && got.Metadata != nil {
				t.Errorf("empty metadata = %#v, want nil (omitted on the wire)", got.Metadata)
			}
		})
	}
	_, err := e.m.Sandboxes.PatchMetadata(ctx, "nope", map[string]*string{"a": ptr("1")})
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)
}

func TestRenew(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Server.MaxSandboxTimeoutSeconds = 7200 })
	ctx := context.Background()
	sb, _ := e.create(t, validRequest())
	manualReq := validRequest()
	manualReq.Timeout = nil
	manual, _ := e.create(t, manualReq)
	now := e.clock.Now()
	tests := []struct {
		name string
		id   string
		at   time.Time
		kind Kind
		code string // "" = ok
	}{
		{"past", sb.ID, now.Add(-time.Second), KindInvalid, CodeInvalidExpiration},
		{"now", sb.ID, now, KindInvalid, CodeInvalidExpiration},
		{"manual cleanup", manual.ID, now.Add(time.Hour), KindConflict, CodeInvalidExpiration},
		{"beyond max", sb.ID, now.Add(7201 * time.Second), KindInvalid, CodeInvalidExpiration},
		{"unknown", "nope", now.Add(time.Hour), KindNotFound, CodeSandboxNotFound},
		{"extend", sb.ID, now.Add(time.Hour).Add(1500 * time.Nanosecond), 0, ""},
		{"shorten", sb.ID, now.Add(2 * time.Minute), 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.m.Sandboxes.Renew(ctx, tt.id, tt.at)
			if tt.code != "" {
				wantCode(t, err, tt.kind, tt.code)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.at.Truncate(time.Microsecond)
			if !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("Renew = %v, want %v in UTC", got, want)
			}
			rec, _ := e.store.Sandbox(tt.id)
			if rec.ExpiresAt == nil || !rec.ExpiresAt.Equal(want) {
				t.Errorf("stored expiry = %v, want %v", rec.ExpiresAt, want)
			}
			view, _ := e.m.Sandboxes.Get(ctx, tt.id)
			if view.ExpiresAt == nil || !view.ExpiresAt.Equal(want) {
				t.Errorf("Get expiresAt = %v, want %v", view.ExpiresAt, want)
			}
		})
	}
}

func TestPauseResume(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, cid := e.create(t, validRequest())

	wantCode(t, e.m.Sandboxes.Resume(ctx, sb.ID), KindConflict, CodeNotPaused)
	if err := e.m.Sandboxes.Pause(ctx, sb.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if got, _ := e.m.Sandboxes.Get(ctx, sb.ID); got.Status.State != "Paused" {
		t.Errorf("after pause state = %s", got.Status.State)
	}
	wantCode(t, e.m.Sandboxes.Pause(ctx, sb.ID), KindConflict, CodeNotRunning)
	if err := e.m.Sandboxes.Resume(ctx, sb.ID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if got, _ := e.m.Sandboxes.Get(ctx, sb.ID); got.Status.State != "Running" {
		t.Errorf("after resume state = %s", got.Status.State)
	}
	e.rt.Set(t, cid, func(c *runtime.Container) { c.State = runtime.StateExited })
	wantCode(t, e.m.Sandboxes.Pause(ctx, sb.ID), KindConflict, CodeNotRunning)
	wantCode(t, e.m.Sandboxes.Resume(ctx, sb.ID), KindConflict, CodeNotPaused)
	wantCode(t, e.m.Sandboxes.Pause(ctx, "nope"), KindNotFound, CodeSandboxNotFound)
	wantCode(t, e.m.Sandboxes.Resume(ctx, "nope"), KindNotFound, CodeSandboxNotFound)
}

func TestEndpoint(t *testing.T) {
	tests := []struct {
		name string
		eip  string
		port int
		host string
		want string // with %s for the id; "" = error
		code string
	}{
		{"execd", "", 44772, "127.0.0.1:8080", "127.0.0.1:8080/sandboxes/%s/proxy/44772", ""},
		{"egress", "", 18080, "localhost:9", "localhost:9/sandboxes/%s/proxy/18080", ""},
		{"eip overrides host", "https://sb.example.com/", 8080, "127.0.0.1:8080", "sb.example.com/sandboxes/%s/proxy/8080", ""},
		{"eip without scheme", "10.0.0.5:8080", 1, "127.0.0.1:8080", "10.0.0.5:8080/sandboxes/%s/proxy/1", ""},
		{"port 0", "", 0, "h", "", CodeInvalidPort},
		{"port 65536", "", 65536, "h", "", CodeInvalidPort},
		{"negative port", "", -1, "h", "", CodeInvalidPort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) { c.Server.EIP = tt.eip })
			sb, _ := e.create(t, validRequest())
			ep, err := e.m.Sandboxes.Endpoint(context.Background(), sb.ID, tt.port, tt.host)
			if tt.code != "" {
				wantCode(t, err, KindInvalid, tt.code)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Replace(tt.want, "%s", sb.ID, 1); ep.Endpoint != want {
				t.Errorf("endpoint = %q, want %q", ep.Endpoint, want)
			}
			// The egress API's port carries the egress token, which is not
			// the execd token.
			hdr, tok := TokenHeader, e.m.Sandboxes.Token(sb.ID)
			if tt.port == EgressPort {
				hdr, tok = EgressAuthHeader, e.m.Sandboxes.EgressToken(sb.ID)
				if tok == e.m.Sandboxes.Token(sb.ID) || !e.m.Sandboxes.CheckEgressToken(sb.ID, tok) || e.m.Sandboxes.CheckEgressToken(sb.ID, e.m.Sandboxes.Token(sb.ID)) {
					t.Errorf("the egress token is the execd token, or does not open its own check")
				}
			}
			if len(ep.Headers) != 1 || ep.Headers[hdr] != tok || tok == "" {
				t.Errorf("headers = %v, want only %s with the token", ep.Headers, hdr)
			}
		})
	}
	e := newEnv(t, nil)
	_, err := e.m.Sandboxes.Endpoint(context.Background(), "nope", 44772, "h")
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)
}

func TestToken(t *testing.T) {
	e := newEnv(t, nil)
	a, b := "sandbox-a", "sandbox-b"
	tests := []struct {
		name string
		id   string
		tok  string
		want bool
	}{
		{"own token", a, e.m.Sandboxes.Token(a), true},
		{"another sandbox's token", a, e.m.Sandboxes.Token(b), false},
		{"empty", a, "", false},
		{"truncated", a, e.m.Sandboxes.Token(a)[:10], false},
		{"prefixed", a, "x" + e.m.Sandboxes.Token(a), false},
	}
	for _, tt := range tests {
		if got := e.m.Sandboxes.CheckToken(tt.id, tt.tok); got != tt.want {
			t.Errorf("%s: CheckToken = %v, want %v", tt.name, got, tt.want)
		}
	}
	if e.m.Sandboxes.Token(a) == e.m.Sandboxes.Token(b) {
		t.Error("two sandboxes share a token")
	}

	// Tokens survive a restart (same store) but differ between stores.
	tok := e.m.Sandboxes.Token(a)
	m2, err := New(e.cfg, e.rt, e.store, e.m.d.log)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Sandboxes.Token(a) != tok || m2.Instance() != e.m.Instance() {
		t.Error("token or instance id changed with a new Manager on the same store")
	}
	if other := newEnv(t, nil); other.m.Sandboxes.Token(a) == tok {
		t.Error("two stores derive the same token")
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	req := validRequest()
	req.Volumes = []Volume{{Name: "c", MountPath: "/c", PVC: &PVC{ClaimName: "scratch", DeleteOnSandboxTermination: true}}}
	sb, cid := e.create(t, req)
	keep, keepCID := e.create(t, validRequest())
	if !e.rt.HasVolume("scratch") {
		t.Fatal("named volume not created")
	}
	if err := e.m.Sandboxes.Delete(ctx, sb.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if e.rt.Exists(cid) {
		t.Error("container still exists")
	}
	if e.rt.HasVolume("scratch") {
		t.Error("managed volume not removed")
	}
	if _, err := e.store.Sandbox(sb.ID); !errors.Is(err, errNoRecord) {
		t.Errorf("record still there: %v", err)
	}
	_, err := e.m.Sandboxes.Get(ctx, sb.ID)
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)
	wantCode(t, e.m.Sandboxes.Delete(ctx, sb.ID), KindNotFound, CodeSandboxNotFound)
	if _, err := e.m.Sandboxes.Get(ctx, keep.ID); err != nil || !e.rt.Exists(keepCID) {
		t.Errorf("the other sandbox was affected: %v", err)
	}
	// A container already gone is not an error for Delete.
	if err := e.rt.Remove(ctx, keepCID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Sandboxes.Delete(ctx, keep.ID); err != nil {
		t.Errorf("Delete of a sandbox whose container vanished: %v", err)
	}
}

func TestTransport(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.rt.SetAgent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "agent:"+r.URL.Path)
	}))
	sb, cid := e.create(t, validRequest())
	if body := viaAgent(t, e.m, sb.ID, http.MethodGet, "/ping", ""); body != "agent:/ping" {
		t.Errorf("agent answered %q", body)
	}

	e.rt.Set(t, cid, func(c *runtime.Container) { c.State = runtime.StatePaused })
	_, err := e.m.Sandboxes.Transport(ctx, sb.ID)
	wantCode(t, err, KindConflict, CodeNotRunning)

	if err := e.rt.Remove(ctx, cid); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Sandboxes.Transport(ctx, sb.ID)
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)
	_, err = e.m.Sandboxes.Transport(ctx, "nope")
	wantCode(t, err, KindNotFound, CodeSandboxNotFound)
}

func TestReconcile(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	inst := e.m.Instance()
	labels := func(id, instance string) map[string]string {
		return map[string]string{LabelID: id, LabelInstance: instance}
	}
	running := func(id, instance string) runtime.Container {
		return runtime.Container{Labels: labels(id, instance), State: runtime.StateRunning}
	}
	now := e.clock.Now()
	future := now.Add(time.Hour)
	past := now.Add(-time.Minute)

	orphan := e.rt.Add(running("orphan", inst))      // ours, no record
	halfMade := e.rt.Add(running("half", inst))      // ours, record still creating
	foreign := e.rt.Add(running("foreign", "other")) // another instance, no record
	adopted := e.rt.Add(running("adopted", inst))    // ours, ready record
	expired := e.rt.Add(running("expired", inst))    // ours, ready but expired while down
	unlabelled := e.rt.Add(runtime.Container{State: runtime.StateRunning})
	for _, r := range []*Record{
		{ID: "half", State: recordCreating, ContainerID: halfMade, CreatedAt: now},
		{ID: "adopted", State: recordReady, ContainerID: adopted, CreatedAt: now, ExpiresAt: &future},
		{ID: "expired", State: recordReady, ContainerID: expired, CreatedAt: now, ExpiresAt: &past},
		{ID: "vanished", State: recordReady, ContainerID: "gone", CreatedAt: now, ExpiresAt: &future},
	} {
		if err := e.store.PutSandbox(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.m.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	containers := []struct {
		name string
		id   string
		keep bool
	}{
		{"orphan", orphan, false},
		{"half-created", halfMade, false},
		{"foreign", foreign, true},
		{"adopted", adopted, true},
		{"expired", expired, false},
		{"unlabelled", unlabelled, true},
	}
	for _, c := range containers {
		if got := e.rt.Exists(c.id); got != c.keep {
			t.Errorf("container %s exists = %v, want %v", c.name, got, c.keep)
		}
	}
	records := map[string]bool{"half": false, "adopted": true, "expired": false, "vanished": false}
	for id, keep := range records {
		_, err := e.store.Sandbox(id)
		if got := err == nil; got != keep {
			t.Errorf("record %s kept = %v, want %v (%v)", id, got, keep, err)
		}
	}
	if _, err := e.m.Sandboxes.Get(ctx, "adopted"); err != nil {
		t.Errorf("adopted sandbox: %v", err)
	}
}

func TestReconcileSnapshots(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.store.PutSnapshot(&SnapshotRecord{ID: "s", State: snapshotCreating, Image: "img"}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := e.m.Snapshots.GetSnapshot("s")
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.State != snapshotReady || s.Status.Reason != "snapshot_recovery_ready" {
		t.Errorf("interrupted snapshot with its image present = %+v, want Ready", s.Status)
	}
}
