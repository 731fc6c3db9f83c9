package lifecycle

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/egress"
)

// Sandboxes is the service of the sandboxes themselves: it plans and
// provisions creates, reports, pauses, renews and deletes sandboxes, and
// hands out their tokens and the transport to their agents.
type Sandboxes struct {
	*deps
	tokenKey []byte
	// deadlines reports and moves deadlines; warm hands out pool members;
	// egress polices creates.
	deadlines deadlines
	warm      warmPools
	egress    egressPlanner
	sleep     waker

	// inFlight holds the ids of the sandboxes being provisioned, which
	// Reconcile leaves alone.
	inFlight sync.Map

	// paused holds the ids of sandboxes paused through sandboxd: their
	// agent is frozen, so file transfers are refused instead of hanging.
	paused sync.Map

	// routes holds the container of each ready sandbox whose agent the
	// proxy has reached. A ready record's container never changes, so the
	// proxy reads the record once per sandbox rather than once per request
	// (a bbolt read and a JSON decode; on Kubernetes an API call). An entry
	// goes with its sandbox, or as soon as its agent cannot be reached.
	routes sync.Map // sandbox id → container id
}

// deadlines is what Sandboxes needs of the expiry service.
type deadlines interface {
	deadline(rec *Record) *time.Time
	Touch(id string)
	forget(id string)
}

// warmPools is what a create needs of the pools service: a request naming
// a pool made into the pool's, the pool a plan matches, and a member for
// a plan.
type warmPools interface {
	applyPoolRef(req *CreateRequest) (string, error)
	assignPool(ref string, p *createPlan)
	claim(ctx context.Context, p *createPlan) (*Sandbox, error)
}

// egressPlanner is how a create is policed (egress.go): a policy planned
// into the spec, a helper made for the created sandbox and started beside
// it, removed after it.
type egressPlanner interface {
	requestPolicy(np *NetworkPolicy) (*egress.Policy, error)
	planEgress(p *createPlan, pol *egress.Policy) error
	prepareEgress(ctx context.Context, p *createPlan) (detach func(cid string) error)
	startEgress(ctx context.Context, p *createPlan) (wait func() error)
	removeEgress(ctx context.Context, rec *Record) error
}

// Token returns the access token for a sandbox: an HMAC of its id, so it
// survives restarts without being stored, and never appears in labels.
func (s *Sandboxes) Token(id string) string {
	mac := hmac.New(sha256.New, s.tokenKey)
	mac.Write([]byte("sandbox-token:" + id))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// EgressAuthHeader carries a sandbox's egress credential on port 18080,
// as upstream's sidecar takes it (OPENSANDBOX_EGRESS_TOKEN).
const EgressAuthHeader = "OPENSANDBOX-EGRESS-AUTH"

// EgressToken returns the credential of sandbox id's egress API: the
// 18080 endpoint's header, which the SDKs send with their egress calls.
// It is not the execd token: whoever drives the sandbox with that one
// (an agent, code it runs) must not lift the key holder's policy.
func (s *Sandboxes) EgressToken(id string) string {
	mac := hmac.New(sha256.New, s.tokenKey)
	mac.Write([]byte("egress-token:" + id))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// CheckEgressToken reports whether tok opens sandbox id's egress API
// (constant time).
func (s *Sandboxes) CheckEgressToken(id, tok string) bool {
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.EgressToken(id))) == 1
}

// CheckToken reports whether tok opens sandbox id (constant time).
func (s *Sandboxes) CheckToken(id, tok string) bool {
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.Token(id))) == 1
}

// Create validates a request and provisions the sandbox synchronously:
// when it returns, the container runs and its endpoints resolve.
func (s *Sandboxes) Create(ctx context.Context, req CreateRequest) (*Sandbox, error) {
	done, err := s.life.begin()
	if err != nil {
		return nil, err
	}
	defer done()
	plan, err := s.plan(ctx, req)
	if err != nil {
		return nil, err
	}
	if sb, err := s.warm.claim(ctx, plan); sb != nil || err != nil {
		return sb, err
	}
	return s.provision(ctx, plan)
}

// plan validates a create request into what provision runs: the record
// to keep, the spec to create and the volumes made for it. Checks that need
// nothing but the request come first, then those that read state (the
// snapshot, the engine for volumes).
func (s *Sandboxes) plan(ctx context.Context, req CreateRequest) (*createPlan, error) {
	if err := checkUpstreamOnly(req, s.rt.Name()); err != nil {
		return nil, err
	}
	poolRef, err := s.warm.applyPoolRef(&req)
	if err != nil {
		return nil, err
	}
	req.SnapshotID = strings.TrimSpace(req.SnapshotID)
	if err := checkShape(req); err != nil {
		return nil, err
	}
	renew, err := parseRenewOnAccess(req.Extensions)
	if err != nil {
		return nil, err
	}
	hard, err := s.defaults.parseHardening(req.Extensions)
	if err != nil {
		return nil, err
	}
	sleep, err := sleepPolicy(req, s.cfg.Lifecycle, s.rt)
	if err != nil {
		return nil, err
	}
	p := &createPlan{}
	image, err := s.source(&req, p)
	if err != nil {
		return nil, err
	}
	if err := validateMetadata(req.Metadata, CodeInvalidMetadata); err != nil {
		return nil, err
	}
	platform, err := parsePlatform(req.Platform)
	if err != nil {
		return nil, err
	}
	if err := s.checkSupported(req); err != nil {
		return nil, err
	}
	policy, err := s.egress.requestPolicy(req.NetworkPolicy)
	if err != nil {
		return nil, err
	}
	if err := sleep.checkPoliced(policy != nil); err != nil {
		return nil, err
	}
	res, err := ParseResources(req.ResourceLimits, s.defaults.cpu, s.defaults.memory)
	if err != nil {
		return nil, err
	}
	if err := applyRequests(&res, req.ResourceRequests); err != nil {
		return nil, err
	}
	env, err := buildEnv(req.Env)
	if err != nil {
		return nil, err
	}
	if p.volumes, err = s.prepareVolumes(ctx, req.Volumes); err != nil {
		return nil, err
	}
	id, now := req.id, wireTime(s.now())
	if id == "" {
		id = newID()
	}
	p.rec = Record{
		ID: id, State: recordCreating, CreatedAt: now, Metadata: req.Metadata,
		SnapshotID: req.SnapshotID, Platform: platform,
		Entrypoint: req.Entrypoint, RenewOnAccess: renew, ManagedVolumes: p.volumes.managed,
		IdleTimeout: int(s.cfg.Lifecycle.IdleTimeout.Seconds()), LastActivity: now,
		ReadOnlyRootfs: hard.readOnlyRootfs, Sleep: sleep, Extensions: maps.Clone(req.Extensions),
	}
	delete(p.rec.Extensions, ExtPoolRef)
	p.rec.IdleTimeout = sleep.idleTimeout(p.rec.IdleTimeout)
	if req.Image != nil {
		p.rec.Image = image // a restore reports its snapshot, not the image
	}
	if req.Timeout != nil {
		exp := now.Add(time.Duration(*req.Timeout) * time.Second)
		p.rec.ExpiresAt = &exp
	}
	p.spec = s.defaults.sandboxSpec(id, image, req.Entrypoint, env, s.labels(&p.rec, req.Metadata), res, s.network(), p.volumes.mounts, hard)
	if platform != nil {
		p.spec.Platform = platform.OS + "/" + platform.Arch
	}
	if err := s.egress.planEgress(p, policy); err != nil {
		return nil, err
	}
	s.warm.assignPool(poolRef, p)
	return p, nil
}

// checkShape checks what the request's schema requires, as FastAPI
// reports it (422 with the field's location).
func checkShape(req CreateRequest) error {
	unprocessable := func(msg string, loc ...string) error {
		return &Error{Kind: KindUnprocessable, Code: CodeInvalidParameter, Message: msg, Field: append([]string{"body"}, loc...)}
	}
	hasImage := req.Image != nil
	switch {
	case hasImage == (req.SnapshotID != ""):
		return unprocessable("exactly one of image and snapshotId is required")
	case hasImage && strings.TrimSpace(req.Image.URI) == "":
		return unprocessable("image.uri must not be empty", "image", "uri")
	case hasImage && req.Image.Auth != nil && (req.Image.Auth.Username == "" || req.Image.Auth.Password == ""):
		return unprocessable("image.auth needs username and password", "image", "auth")
	case hasImage && len(req.Entrypoint) == 0:
		return unprocessable("entrypoint is required with image (at least one element)", "entrypoint")
	case req.Timeout != nil && *req.Timeout < 60:
		return unprocessable("timeout must be at least 60 seconds (or null for manual cleanup)", "timeout")
	}
	return nil
}

// source is the image a sandbox is made from: the request's (with its
// registry credential in p), or a ready snapshot's, whose sandboxes idle
// unless told what to run.
func (s *Sandboxes) source(req *CreateRequest, p *createPlan) (string, error) {
	if req.Image != nil {
		if a := req.Image.Auth; a != nil {
			p.auth = &runtime.RegistryAuth{Username: a.Username, Password: a.Password}
		}
		return strings.TrimSpace(req.Image.URI), nil
	}
	snap, err := s.store.Snapshot(req.SnapshotID)
	switch {
	case errors.Is(err, errNoRecord):
		return "", errf(KindNotFound, CodeSnapshotNotFound, "snapshot %s not found", req.SnapshotID)
	case err != nil:
		return "", s.engineError(err, "read snapshot")
	case snap.State != snapshotReady:
		return "", errf(KindConflict, CodeSnapshotNotReady, "snapshot %s is %s, not Ready", snap.ID, snap.State)
	case snap.Image == "":
		return "", errf(KindConflict, CodeSnapshotRestore, "snapshot %s has no image", snap.ID)
	}
	if len(req.Entrypoint) == 0 {
		req.Entrypoint = slices.Clone(restoreEntrypoint)
	}
	return snap.Image, nil
}

// parsePlatform checks a requested platform: Linux on amd64 or arm64.
func parsePlatform(req *Platform) (*Platform, error) {
	if req == nil {
		return nil, nil
	}
	pl := Platform{OS: strings.ToLower(req.OS), Arch: strings.ToLower(req.Arch)}
	if pl.OS != "linux" {
		return nil, errf(KindInvalid, CodeInvalidParameter, "platform.os %q is not supported: sandboxd runs linux sandboxes", req.OS)
	}
	if pl.Arch != "amd64" && pl.Arch != "arm64" {
		return nil, errf(KindInvalid, CodeInvalidParameter, "platform.arch %q must be amd64 or arm64", req.Arch)
	}
	return &pl, nil
}

// checkSupported refuses what this server does not offer: a timeout past
// its cap, and upstream features its runtime lacks.
func (s *Sandboxes) checkSupported(req CreateRequest) error {
	if max := s.cfg.Server.MaxSandboxTimeoutSeconds; req.Timeout != nil && max > 0 && *req.Timeout > max {
		return errf(KindInvalid, CodeInvalidParameter, "timeout %d exceeds the server's max_sandbox_timeout_seconds (%d)", *req.Timeout, max)
	}
	if req.SecureAccess {
		return errf(KindInvalid, CodeInvalidParameter, "secureAccess is not supported when runtime.type='%s'", s.rt.Name())
	}
	if l := strings.TrimSpace(string(req.Lifecycle)); l != "" && l != "null" {
		return errf(KindInvalid, CodeInvalidParameter, "lifecycle hooks (preStart, periodic) are not supported when runtime.type='%s'", s.rt.Name())
	}
	return nil
}

// labels are a sandbox's labels: the user's metadata and upstream's
// bookkeeping, so that upstream tooling recognises the sandbox.
func (s *Sandboxes) labels(rec *Record, metadata map[string]string) map[string]string {
	labels := maps.Clone(metadata)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelID] = rec.ID
	labels[LabelInstance] = s.instance
	if rec.ExpiresAt != nil {
		labels[LabelExpiresAt] = rec.ExpiresAt.Format(time.RFC3339Nano)
	} else {
		labels[LabelManualCleanup] = "true"
	}
	if rec.Platform != nil {
		labels[LabelPlatformOS], labels[LabelPlatformArch] = rec.Platform.OS, rec.Platform.Arch
	}
	if rec.SnapshotID != "" {
		labels[LabelSnapshotID] = rec.SnapshotID
	}
	if rec.RenewOnAccess > 0 {
		labels[LabelRenewExtend] = strconv.Itoa(rec.RenewOnAccess)
	}
	return labels
}

func buildEnv(env map[string]*string) ([]string, error) {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, errf(KindInvalid, CodeInvalidParameter, "env key %q is not a valid variable name", k)
		}
		v := env[k]
		if v == nil {
			continue
		}
		if strings.Contains(*v, "\x00") {
			return nil, errf(KindInvalid, CodeInvalidParameter, "env %s contains a NUL byte", k)
		}
		out = append(out, k+"="+*v)
	}
	return out, nil
}

// creating reports whether sandbox id is being provisioned.
func (s *Sandboxes) creating(id string) bool {
	_, ok := s.inFlight.Load(id)
	return ok
}

// provision runs a plan: pull, record, create, start.
func (s *Sandboxes) provision(ctx context.Context, p *createPlan) (*Sandbox, error) {
	id := p.rec.ID
	s.inFlight.Store(id, true)
	defer s.inFlight.Delete(id)
	log := s.log.With("sandbox_id", id)
	start := s.now()
	if err := s.ensureImage(ctx, p.spec.Image, p.auth, p.spec.Platform, func(line string) {
		log.InfoContext(ctx, "pulling image", "image", p.spec.Image, "progress", line)
	}); err != nil {
		s.metrics.CreateFailures.Add(1)
		s.removeVolumes(context.WithoutCancel(ctx), p.volumes.created)
		if e, ok := AsError(s.engineError(err, "")); ok && e.Kind == KindUnavailable {
			return nil, e
		}
		return nil, &Error{Kind: KindInternal, Code: CodeImagePullFailed, Message: fmt.Sprintf("image %s is not available and could not be pulled: %v", p.spec.Image, err), Err: err}
	}
	if err := s.store.PutSandbox(&p.rec); err != nil {
		s.removeVolumes(context.WithoutCancel(ctx), p.volumes.created)
		return nil, &Error{Kind: KindInternal, Code: CodeStartFailed, Message: "record sandbox", Err: err}
	}
	fail := func(err error, what string) (*Sandbox, error) {
		s.metrics.CreateFailures.Add(1)
		log.ErrorContext(ctx, "create failed", "step", what, "err", err)
		s.destroy(context.WithoutCancel(ctx), &p.rec, p.rec.ContainerID)
		s.removeVolumes(context.WithoutCancel(ctx), p.volumes.created)
		if e := mountRefusal(err); e != nil {
			return nil, e
		}
		if e, ok := AsError(s.engineError(err, what)); ok && (e.Kind == KindUnavailable || e.Kind == KindInvalid || e.Code == CodeStartFailed) {
			return nil, e
		}
		return nil, &Error{Kind: KindInternal, Code: CodeStartFailed, Message: fmt.Sprintf("%s: %v", what, err), Err: err}
	}
	detach := s.egress.prepareEgress(ctx, p)
	cid, err := s.rt.Create(ctx, p.spec)
	if err != nil {
		_ = detach("") // its helper must exist before the failure removes it
		return fail(err, "create container")
	}
	p.rec.ContainerID = cid
	if err := detach(cid); err != nil {
		return fail(err, "start egress helper")
	}
	if err := s.rt.Start(ctx, cid); err != nil {
		return fail(err, "start container")
	}
	waitEgress := s.egress.startEgress(ctx, p)
	agentErr := s.awaitAgent(ctx, &p.rec)
	egressErr := waitEgress()
	if agentErr != nil {
		return fail(agentErr, "start sandbox")
	}
	if egressErr != nil {
		return fail(egressErr, "start egress helper")
	}
	p.rec.State = recordReady
	if err := s.store.PutSandbox(&p.rec); err != nil {
		return fail(err, "record sandbox")
	}
	s.metrics.Creates.Add(1)
	s.metrics.CreateSeconds.Observe(s.now().Sub(start))
	log.InfoContext(ctx, "sandbox created", "image", p.spec.Image, "container", runtime.ShortID(cid), "duration_ms", s.now().Sub(start).Milliseconds())
	sb := s.view(&p.rec, nil)
	sb.Status = Status{State: "Running", Reason: "CONTAINER_RUNNING", Message: "Sandbox container started successfully.", LastTransitionAt: p.rec.CreatedAt}
	return sb, nil
}

// destroy removes a sandbox's container, managed volumes and record.
func (s *Sandboxes) destroy(ctx context.Context, rec *Record, cid string) error {
	var err error
	if cid == "" {
		err = s.removeLabelled(ctx, map[string]string{LabelID: rec.ID, LabelInstance: s.instance})
	} else if err = s.rt.Remove(ctx, cid); errors.Is(err, runtime.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return err
	}
	if err := s.egress.removeEgress(ctx, rec); err != nil {
		return err
	}
	s.removeVolumes(ctx, rec.ManagedVolumes)
	s.deadlines.forget(rec.ID)
	s.sleep.forget(rec.ID)
	s.paused.Delete(rec.ID)
	s.routes.Delete(rec.ID)
	if err := s.store.DeleteSandbox(rec.ID); err != nil && !errors.Is(err, errNoRecord) {
		return err
	}
	return nil
}

// status maps a container's engine state to the API's (reference §1.5.3).
func status(c *runtime.Container) Status {
	last := c.Created
	if !c.FinishedAt.IsZero() {
		last = c.FinishedAt
	}
	last = wireTime(last)
	switch c.State {
	case runtime.StatePaused:
		return Status{"Paused", "CONTAINER_PAUSED", "Sandbox container is paused.", last}
	case runtime.StateRestarting:
		return Status{"Running", "CONTAINER_RESTARTING", "Sandbox container is restarting.", last}
	case runtime.StateRunning:
		return Status{"Running", "CONTAINER_RUNNING", "Sandbox container is running.", last}
	case runtime.StateCreated:
		return Status{"Pending", "CONTAINER_STARTING", "Sandbox container is starting.", last}
	case runtime.StateExited, runtime.StateDead:
		if c.OOMKilled {
			return Status{"Failed", "CONTAINER_OOM_KILLED", fmt.Sprintf("Sandbox container was killed for exceeding its memory limit (exit code %d).", c.ExitCode), last}
		}
		if c.ExitCode == 0 {
			return Status{"Terminated", "CONTAINER_EXITED", "Sandbox container exited.", last}
		}
		return Status{"Failed", "CONTAINER_EXITED_ERROR", fmt.Sprintf("Sandbox container exited with code %d.", c.ExitCode), last}
	}
	return Status{"Unknown", "CONTAINER_STATE_UNKNOWN", "Sandbox container state is " + c.State.String() + ".", last}
}

// view builds the API object from a record and (if known) its container.
func (s *Sandboxes) view(rec *Record, c *runtime.Container) *Sandbox {
	sb := &Sandbox{
		ID: rec.ID, SnapshotID: rec.SnapshotID, Platform: rec.Platform,
		Metadata: rec.Metadata, Entrypoint: rec.Entrypoint, CreatedAt: rec.CreatedAt,
	}
	if rec.Image != "" {
		sb.Image = &ImageSpec{URI: rec.Image}
	}
	if sb.Entrypoint == nil {
		sb.Entrypoint = []string{}
	}
	if len(sb.Metadata) == 0 {
		sb.Metadata = nil
	}
	if d := s.deadlines.deadline(rec); d != nil {
		t := wireTime(*d)
		sb.ExpiresAt = &t
	}
	switch {
	case rec.State == recordCreating:
		sb.Status = Status{"Pending", "CONTAINER_STARTING", "Sandbox is being created.", rec.CreatedAt}
	case c != nil:
		sb.Status = status(c)
		if c.FinishedAt.IsZero() {
			// An engine's list may have the creation time in whole seconds only.
			sb.Status.LastTransitionAt = rec.CreatedAt
		}
	}
	if st, ok := s.sleep.sleepStatus(rec); ok && rec.State == recordReady {
		sb.Status = st
	}
	return sb
}

// Get returns one sandbox.
func (s *Sandboxes) Get(ctx context.Context, id string) (*Sandbox, error) {
	rec, err := s.record(id)
	if err != nil {
		return nil, err
	}
	if rec.State == recordCreating {
		return s.view(rec, nil), nil
	}
	c, err := s.inspect(ctx, rec)
	if err != nil {
		return nil, err
	}
	return s.view(rec, &c), nil
}

// inspect returns a ready sandbox's container; a container removed behind
// sandboxd's back makes the sandbox gone (404) and drops its record.
func (s *Sandboxes) inspect(ctx context.Context, rec *Record) (runtime.Container, error) {
	c, err := s.rt.Inspect(ctx, rec.ContainerID)
	if errors.Is(err, runtime.ErrNotFound) {
		s.log.WarnContext(ctx, "sandbox container vanished; forgetting sandbox", "sandbox_id", rec.ID)
		_ = s.destroy(ctx, rec, rec.ContainerID)
		return c, notFound(rec.ID)
	}
	if err != nil {
		return c, s.engineError(err, "inspect sandbox "+rec.ID)
	}
	return c, nil
}

// List returns a filtered, paginated list, newest first.
func (s *Sandboxes) List(ctx context.Context, f ListFilter) ([]*Sandbox, Page, error) {
	recs, err := s.store.Sandboxes()
	if err != nil {
		return nil, Page{}, &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "read sandbox records", Err: err}
	}
	conts, err := s.rt.List(ctx, map[string]string{LabelInstance: s.instance})
	if err != nil {
		return nil, Page{}, s.engineError(err, "list sandboxes")
	}
	byID := map[string]*runtime.Container{}
	for i := range conts {
		byID[conts[i].Labels[LabelID]] = &conts[i]
	}
	var items []*Sandbox
	for _, rec := range recs {
		c := byID[rec.ID]
		if rec.State == recordReady && c == nil {
			continue // vanished; Get or the reaper forgets it
		}
		if c != nil && c.State.Stopped() {
			// The list summary lacks the exit code and OOM flag.
			if full, err := s.rt.Inspect(ctx, c.ID); err == nil {
				c = &full
			}
		}
		sb := s.view(rec, c)
		if !matchFilter(sb, f) {
			continue
		}
		items = append(items, sb)
	}
	slices.SortFunc(items, func(a, b *Sandbox) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return paginate(items, f.Page, f.PageSize)
}

func matchFilter(sb *Sandbox, f ListFilter) bool {
	if len(f.States) > 0 && !slices.ContainsFunc(f.States, func(s string) bool { return strings.EqualFold(s, sb.Status.State) }) {
		return false
	}
	for k, v := range f.Metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Delete kills and removes a sandbox.
func (s *Sandboxes) Delete(ctx context.Context, id string) error {
	rec, err := s.record(id)
	if err != nil {
		return err
	}
	if err := s.destroy(ctx, rec, rec.ContainerID); err != nil {
		return s.opError(err, CodeDeleteFailed, "delete sandbox "+id)
	}
	s.metrics.Deletes.Add(1)
	s.log.InfoContext(ctx, "sandbox deleted", "sandbox_id", id)
	return nil
}

// PatchMetadata applies an RFC 7396 merge patch to the user metadata.
func (s *Sandboxes) PatchMetadata(ctx context.Context, id string, patch map[string]*string) (*Sandbox, error) {
	set := map[string]string{}
	for k, v := range patch {
		if strings.HasPrefix(k, reservedPrefix) {
			return nil, errf(KindInvalid, CodeReservedMetadata, "metadata key %q uses the reserved prefix %q", k, reservedPrefix)
		}
		if v != nil {
			set[k] = *v
		}
	}
	if err := validateMetadata(set, CodeReservedMetadata); err != nil {
		return nil, err
	}
	if _, err := s.record(id); err != nil {
		return nil, err
	}
	_, err := s.store.UpdateSandbox(id, func(r *Record) error {
		md := mergePatch(r.Metadata, patch)
		if len(md) > maxMetadataEntries {
			return errf(KindInvalid, CodeInvalidMetadata, "metadata would have %d entries, at most %d allowed", len(md), maxMetadataEntries)
		}
		r.Metadata = md
		return nil
	})
	if errors.Is(err, errNoRecord) {
		return nil, notFound(id)
	}
	if err != nil {
		if _, ok := AsError(err); ok {
			return nil, err
		}
		return nil, &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "update metadata", Err: err}
	}
	return s.Get(ctx, id)
}

// mergePatch applies a flat RFC 7396 merge patch: a value sets, null deletes.
func mergePatch(cur map[string]string, patch map[string]*string) map[string]string {
	out := make(map[string]string, len(cur)+len(patch))
	for k, v := range cur {
		out[k] = v
	}
	for k, v := range patch {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = *v
		}
	}
	return out
}

// forgetRoute drops the proxy's route to sandbox id's agent, which is
// no longer reached the same way (the sandbox went to sleep).
func (s *Sandboxes) forgetRoute(id string) { s.routes.Delete(id) }

// isPaused reports whether sandbox id was paused through sandboxd.
func (s *Sandboxes) isPaused(id string) bool {
	_, ok := s.paused.Load(id)
	return ok
}

// Pause freezes a running sandbox.
func (s *Sandboxes) Pause(ctx context.Context, id string) error {
	pauser, rec, err := s.pauseTarget(ctx, id, runtime.StateRunning)
	if err != nil {
		return err
	}
	s.paused.Store(id, true)
	if err := pauser.Pause(ctx, rec.ContainerID); err != nil {
		s.paused.Delete(id)
		return s.opError(err, CodePauseFailed, "pause sandbox "+id)
	}
	return nil
}

// Resume unfreezes a paused sandbox, or wakes a sleeping one.
func (s *Sandboxes) Resume(ctx context.Context, id string) error {
	if rec, err := s.record(id); err == nil && rec.Asleep != "" {
		return s.sleep.wake(ctx, id, wakeByResume)
	}
	pauser, rec, err := s.pauseTarget(ctx, id, runtime.StatePaused)
	if err != nil {
		return err
	}
	if err := pauser.Unpause(ctx, rec.ContainerID); err != nil {
		return s.opError(err, CodeResumeFailed, "resume sandbox "+id)
	}
	s.paused.Delete(id)
	s.deadlines.Touch(id)
	return nil
}

// pauseTarget returns the runtime's pause and sandbox id, which must be in
// state want (running to pause, paused to resume), or the error to answer.
func (s *Sandboxes) pauseTarget(ctx context.Context, id string, want runtime.State) (runtime.Pauser, *Record, error) {
	p := s.rt.Features().Pauser
	if p == nil {
		return nil, nil, s.unsupported("pause and resume are")
	}
	rec, c, err := s.ready(ctx, id)
	switch {
	case err != nil:
		return nil, nil, err
	case c.State == want:
		return p, rec, nil
	case want == runtime.StateRunning:
		return nil, nil, errf(KindConflict, CodeNotRunning, "Sandbox is not in a running state (it is %s).", status(&c).State)
	}
	return nil, nil, errf(KindConflict, CodeNotPaused, "Sandbox is not paused (it is %s).", status(&c).State)
}

// ready returns a sandbox whose container exists.
func (s *Sandboxes) ready(ctx context.Context, id string) (*Record, runtime.Container, error) {
	rec, err := s.record(id)
	if err != nil {
		return nil, runtime.Container{}, err
	}
	if rec.State != recordReady {
		return nil, runtime.Container{}, errf(KindConflict, CodeNotRunning, "sandbox %s is still being created", id)
	}
	c, err := s.inspect(ctx, rec)
	return rec, c, err
}

// Renew sets a new absolute expiry. It returns the sandbox's resulting
// deadline, what GET reports: an idle timeout can make it earlier than at,
// renew on access later.
func (s *Sandboxes) Renew(ctx context.Context, id string, at time.Time) (time.Time, error) {
	rec, err := s.record(id)
	if err != nil {
		return time.Time{}, err
	}
	now := s.now()
	if !at.After(now) {
		return time.Time{}, errf(KindInvalid, CodeInvalidExpiration, "New expiration time must be in the future.")
	}
	if rec.ExpiresAt == nil {
		return time.Time{}, errf(KindConflict, CodeInvalidExpiration, "Sandbox %s does not have automatic expiration enabled.", id)
	}
	if max := s.cfg.Server.MaxSandboxTimeoutSeconds; max > 0 && at.Sub(now) > time.Duration(max)*time.Second {
		return time.Time{}, errf(KindInvalid, CodeInvalidExpiration, "New expiration time is more than max_sandbox_timeout_seconds (%d) from now.", max)
	}
	if err := s.sleep.wake(ctx, id, wakeByAPI); err != nil {
		return time.Time{}, err
	}
	at = wireTime(at)
	rec, err = s.store.UpdateSandbox(id, func(r *Record) error {
		r.ExpiresAt = &at
		return nil
	})
	if err != nil {
		return time.Time{}, &Error{Kind: KindInternal, Code: CodeQueryFailed, Message: "persist renewal", Err: err}
	}
	s.deadlines.Touch(id)
	exp := wireTime(*s.deadlines.deadline(rec))
	s.log.InfoContext(ctx, "sandbox renewed", "sandbox_id", id, "expires_at", exp)
	return exp, nil
}

// Endpoint returns where port of sandbox id is reached: always through
// sandboxd's proxy route on the host the client used (or eip), with the
// sandbox's token in headers (its egress token for the egress API's port).
func (s *Sandboxes) Endpoint(ctx context.Context, id string, port int, requestHost string) (*Endpoint, error) {
	if port < 1 || port > 65535 {
		return nil, errf(KindInvalid, CodeInvalidPort, "port %d must be between 1 and 65535", port)
	}
	if _, err := s.record(id); err != nil {
		return nil, err
	}
	if err := s.sleep.wake(ctx, id, wakeByAPI); err != nil {
		return nil, err
	}
	host := requestHost
	if eip := s.cfg.Server.EIP; eip != "" {
		host = strings.TrimPrefix(strings.TrimPrefix(eip, "https://"), "http://")
		host = strings.TrimSuffix(host, "/")
	}
	headers := map[string]string{TokenHeader: s.Token(id)}
	if port == EgressPort {
		headers = map[string]string{EgressAuthHeader: s.EgressToken(id)}
	}
	return &Endpoint{Endpoint: fmt.Sprintf("%s/sandboxes/%s/proxy/%d", host, id, port), Headers: headers}, nil
}

// Transport returns a RoundTripper to the agent of a running sandbox, for
// the proxy route. Each call counts as activity.
func (s *Sandboxes) Transport(ctx context.Context, id string) (http.RoundTripper, error) {
	var rec *Record
	cid, known := s.routes.Load(id)
	if !known {
		var err error
		if rec, err = s.record(id); err != nil {
			return nil, err
		}
		if rec.State != recordReady {
			return nil, errf(KindConflict, CodeNotRunning, "sandbox %s is still being created", id)
		}
		cid = rec.ContainerID
	}
	s.deadlines.Touch(id)
	if err := s.sleep.wake(ctx, id, wakeByAccess); err != nil {
		return nil, err
	}
	rt, err := s.rt.Agent(ctx, cid.(string))
	if err == nil {
		if !known {
			s.routes.Store(id, cid)
		}
		return rt, nil
	}
	s.routes.Delete(id)
	if rec == nil {
		// The record says why: the sandbox may be gone.
		var rerr error
		if rec, rerr = s.record(id); rerr != nil {
			return nil, rerr
		}
	}
	if errors.Is(err, runtime.ErrNotFound) {
		_, ierr := s.inspect(ctx, rec)
		return nil, ierr
	}
	if errors.Is(err, runtime.ErrContainerTimeout) {
		return nil, s.engineError(err, "start the agent of sandbox "+id)
	}
	if errors.Is(err, runtime.ErrConflict) {
		c, ierr := s.inspect(ctx, rec)
		if ierr != nil {
			return nil, ierr
		}
		return nil, errf(KindConflict, CodeNotRunning, "sandbox %s is %s; its agent cannot run", id, status(&c).State)
	}
	return nil, &Error{Kind: KindUnavailable, Code: CodeAgentFailed, Message: "cannot reach the agent in sandbox " + id, Err: err}
}

// Reconcile brings the sandboxes in line with the engine after a start:
// a container without a record goes to adopt (a pool member) or is
// removed as half-created, and a record whose container is gone is
// forgotten. It returns how many sandboxes it found alive.
func (s *Sandboxes) Reconcile(ctx context.Context, adopt func(context.Context, runtime.Container) bool) (int, error) {
	conts, err := s.rt.List(ctx, map[string]string{LabelInstance: s.instance})
	if err != nil {
		return 0, s.engineError(err, "list containers")
	}
	recs, err := s.store.Sandboxes()
	if err != nil {
		return 0, err
	}
	byID := map[string]*Record{}
	for _, r := range recs {
		byID[r.ID] = r
	}
	seen := map[string]bool{}
	adopted := 0
	for _, c := range conts {
		id := c.Labels[LabelID]
		rec := byID[id]
		if rec == nil && adopt(ctx, c) {
			continue
		}
		if s.creating(id) {
			continue // a create in flight (a replica that leads later)
		}
		if rec == nil || rec.State != recordReady {
			if s.othersCreate(c) {
				seen[id] = true // the reaper removes it if it never gets ready
				continue
			}
			s.log.Warn("removing half-created sandbox container", "sandbox_id", id, "container", runtime.ShortID(c.ID))
			if err := s.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				s.log.Error("remove half-created container", "container", runtime.ShortID(c.ID), "err", err)
			}
			continue
		}
		seen[id] = true
		adopted++
	}
	for _, r := range recs {
		if seen[r.ID] || s.creating(r.ID) {
			continue
		}
		if r.State == recordReady {
			s.log.Warn("sandbox container gone while sandboxd was down; forgetting it", "sandbox_id", r.ID)
		}
		_ = s.destroy(ctx, r, r.ContainerID)
	}
	return adopted, nil
}

// paginate cuts one page out of items (pages start at 1).
func paginate[T any](items []T, page, size int) ([]T, Page, error) {
	p := Page{Page: page, PageSize: size, TotalItems: len(items)}
	p.TotalPages = (len(items) + size - 1) / size
	p.HasNextPage = page < p.TotalPages
	// A page past the end is empty; (page-1)*size is computed only where
	// it cannot overflow (a client may ask for page 7e17).
	lo := len(items)
	if page-1 <= len(items)/size {
		lo = min((page-1)*size, len(items))
	}
	hi := min(lo+size, len(items))
	return items[lo:hi], p, nil
}

// restoreEntrypoint is what a sandbox made from a snapshot runs unless
// its request says otherwise: nothing (upstream's default).
var restoreEntrypoint = []string{"tail", "-f", "/dev/null"}
