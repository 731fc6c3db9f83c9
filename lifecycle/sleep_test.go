package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

// TestParseSleepPolicy checks the create's sleep keys: each bad value is
// a 400 naming its key, and the server's default applies only to a
// sandbox that sets no threshold.
func TestParseSleepPolicy(t *testing.T) {
	lim := sleepLimits{minIdle: 30}
	def := sleepLimits{minIdle: 30, defaultIdle: 600, defaultAction: "stop"}
	tests := []struct {
		name    string
		ext     map[string]string
		lim     sleepLimits
		want    *SleepPolicy // nil: none
		wantKey string       // the key a 400 names
	}{
		{name: "nothing", ext: nil, lim: lim},
		{name: "other keys only", ext: map[string]string{"foo": "bar", ExtIdleAction: "stop"}, lim: lim},
		{name: "threshold opts in to pause", ext: map[string]string{ExtSleepAfterIdle: "30"}, lim: lim,
			want: &SleepPolicy{IdleSeconds: 30, IdleAction: "pause", ResumeOn: "access", Timeout: 600}},
		{name: "stop, api, wait", ext: map[string]string{ExtSleepAfterIdle: " 86400 ", ExtIdleAction: "STOP", ExtResumeOn: "api", ExtResumeWait: "5"}, lim: lim,
			want: &SleepPolicy{IdleSeconds: 86400, IdleAction: "stop", ResumeOn: "api", ResumeWait: 5, Timeout: 600}},
		{name: "idle delete", ext: map[string]string{ExtSleepAfterIdle: "60", ExtIdleAction: "delete"}, lim: lim,
			want: &SleepPolicy{IdleSeconds: 60, IdleAction: "delete", ResumeOn: "access", Timeout: 600}},
		{name: "expire action alone", ext: map[string]string{ExtExpireAction: "stop"}, lim: lim,
			want: &SleepPolicy{ExpireAction: "stop", ResumeOn: "access", Timeout: 600}},
		{name: "server default", ext: nil, lim: def,
			want: &SleepPolicy{IdleSeconds: 600, IdleAction: "stop", ResumeOn: "access", Timeout: 600}},
		{name: "server default threshold, sandbox's action", ext: map[string]string{ExtIdleAction: "pause"}, lim: def,
			want: &SleepPolicy{IdleSeconds: 600, IdleAction: "pause", ResumeOn: "access", Timeout: 600}},
		{name: "sandbox's threshold over the server's", ext: map[string]string{ExtSleepAfterIdle: "45"}, lim: def,
			want: &SleepPolicy{IdleSeconds: 45, IdleAction: "pause", ResumeOn: "access", Timeout: 600}},
		{name: "test minimum", ext: map[string]string{ExtSleepAfterIdle: "2"}, lim: sleepLimits{minIdle: 1},
			want: &SleepPolicy{IdleSeconds: 2, IdleAction: "pause", ResumeOn: "access", Timeout: 600}},
		{name: "below the minimum", ext: map[string]string{ExtSleepAfterIdle: "29"}, lim: lim, wantKey: ExtSleepAfterIdle},
		{name: "above the maximum", ext: map[string]string{ExtSleepAfterIdle: "86401"}, lim: lim, wantKey: ExtSleepAfterIdle},
		{name: "not a number", ext: map[string]string{ExtSleepAfterIdle: "abc"}, lim: lim, wantKey: ExtSleepAfterIdle},
		{name: "a duration", ext: map[string]string{ExtSleepAfterIdle: "60s"}, lim: lim, wantKey: ExtSleepAfterIdle},
		{name: "bad idle action", ext: map[string]string{ExtSleepAfterIdle: "60", ExtIdleAction: "hibernate"}, lim: lim, wantKey: ExtIdleAction},
		{name: "bad resume-on", ext: map[string]string{ExtSleepAfterIdle: "60", ExtResumeOn: "always"}, lim: lim, wantKey: ExtResumeOn},
		{name: "bad wait", ext: map[string]string{ExtSleepAfterIdle: "60", ExtResumeWait: "0"}, lim: lim, wantKey: ExtResumeWait},
		{name: "wait too long", ext: map[string]string{ExtSleepAfterIdle: "60", ExtResumeWait: "301"}, lim: lim, wantKey: ExtResumeWait},
		{name: "bad expire action", ext: map[string]string{ExtExpireAction: "keep"}, lim: lim, wantKey: ExtExpireAction},
		{name: "delete cannot wake", ext: map[string]string{ExtSleepAfterIdle: "60", ExtIdleAction: "delete", ExtResumeOn: "access"}, lim: lim, wantKey: ExtResumeOn},
	}
	timeout := 600
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSleepPolicy(tt.ext, &timeout, tt.lim)
			if tt.wantKey != "" {
				wantCode(t, err, KindInvalid, CodeInvalidParameter)
				if e, _ := AsError(err); !strings.Contains(e.Message, tt.wantKey) {
					t.Fatalf("message %q does not name %s", e.Message, tt.wantKey)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.want == nil && got != nil:
				t.Fatalf("policy = %+v, want none", *got)
			case tt.want != nil && (got == nil || *got != *tt.want):
				t.Fatalf("policy = %+v, want %+v", got, *tt.want)
			}
		})
	}
}

// sleepEnv is a test env with sandboxes that may sleep after 30 s.
func sleepEnv(t *testing.T) *testEnv {
	e := newEnv(t, func(c *config.Config) { c.Lifecycle.IdleTimeout = config.Duration{Duration: 10 * time.Minute} })
	e.rt.SetAgent(activity(0))
	return e
}

// activity is an agent that reports running work.
func activity(running int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_sandboxd/activity" {
			_, _ = io.WriteString(w, `{"running":`+string(rune('0'+running))+`}`)
			return
		}
		_, _ = io.WriteString(w, "{}")
	})
}

func sleepRequest(ext map[string]string) CreateRequest {
	req := validRequest()
	req.Extensions = ext
	return req
}

// wantState fails unless the sandbox's container and status are as given.
func (e *testEnv) wantState(t *testing.T, id, cid string, cont runtime.State, state, reason string) {
	t.Helper()
	c, err := e.rt.Inspect(context.Background(), cid)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := e.m.Sandboxes.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != cont || sb.Status.State != state || sb.Status.Reason != reason {
		t.Fatalf("container %s, status %s/%s (%s); want %s, %s/%s", c.State, sb.Status.State, sb.Status.Reason, sb.Status.Message, cont, state, reason)
	}
}

// TestSleepOnIdleAndWake: an idle sandbox sleeps at its threshold, by
// pause or stop, and a proxied request wakes it before it is served; its
// own threshold replaces the server's idle timeout.
func TestSleepOnIdleAndWake(t *testing.T) {
	for _, tt := range []struct {
		action string
		asleep runtime.State
		reason string
	}{
		{"pause", runtime.StatePaused, reasonIdlePaused},
		{"stop", runtime.StateExited, reasonIdleStopped},
	} {
		t.Run(tt.action, func(t *testing.T) {
			e := sleepEnv(t)
			ctx := context.Background()
			sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30", ExtIdleAction: tt.action}))
			if !sb.ExpiresAt.Equal(sb.CreatedAt.Add(10 * time.Minute)) {
				t.Fatalf("expiresAt = %v, want the timeout's (the server's idle timeout does not apply)", sb.ExpiresAt)
			}
			e.clock.Advance(29 * time.Second)
			e.m.Expiry.Sweep(ctx)
			e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
			e.clock.Advance(time.Second)
			e.m.Expiry.Sweep(ctx)
			e.wantState(t, sb.ID, cid, tt.asleep, "Paused", tt.reason)
			if got := e.m.Metrics().Sleeps.Load(); got != 1 {
				t.Fatalf("sleeps = %d, want 1", got)
			}
			if _, err := e.m.Sandboxes.Transport(ctx, sb.ID); err != nil {
				t.Fatalf("Transport to a sleeping sandbox: %v", err)
			}
			e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
			// The wake is activity: no sleep for another 30 s.
			e.clock.Advance(29 * time.Second)
			e.m.Expiry.Sweep(ctx)
			e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
			e.clock.Advance(10 * time.Minute)
			e.m.Expiry.Sweep(ctx)
			if e.rt.Exists(cid) {
				t.Fatal("expired asleep without an expire action: not deleted")
			}
		})
	}
}

// TestSleepKeptAwake: requests, and work running, keep a sandbox awake;
// housekeeping (GET, list) does not.
func TestSleepKeptAwake(t *testing.T) {
	e := sleepEnv(t)
	ctx := context.Background()
	sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30"}))
	e.clock.Advance(20 * time.Second)
	if _, err := e.m.Sandboxes.Transport(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(20 * time.Second)
	e.m.Expiry.Sweep(ctx)
	e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
	e.rt.SetAgent(activity(1))
	e.clock.Advance(20 * time.Second)
	e.m.Expiry.Sweep(ctx)
	e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
	e.rt.SetAgent(activity(0))
	e.clock.Advance(20 * time.Second)
	for range 3 {
		_, _ = e.m.Sandboxes.Get(ctx, sb.ID)
		_, _, _ = e.m.Sandboxes.List(ctx, ListFilter{Page: 1, PageSize: 10})
	}
	e.clock.Advance(10 * time.Second)
	e.m.Expiry.Sweep(ctx)
	e.wantState(t, sb.ID, cid, runtime.StatePaused, "Paused", reasonIdlePaused)
	list, _, err := e.m.Sandboxes.List(ctx, ListFilter{States: []string{"Paused"}, Page: 1, PageSize: 10})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("list state=Paused: %v, %v", list, err)
	}
}

// TestSleepCalledOffByLateActivity: a request that comes in after the
// sweep found the sandbox idle, but before it is frozen, calls the sleep
// off: it must never be forwarded into a frozen container.
func TestSleepCalledOffByLateActivity(t *testing.T) {
	e := sleepEnv(t)
	sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30"}))
	e.clock.Advance(31 * time.Second)
	e.rt.SetAgent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.m.Expiry.Touch(sb.ID) // a request while the sweep asks about work
		_, _ = io.WriteString(w, `{"running":0}`)
	}))
	e.m.Expiry.Sweep(context.Background())
	e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
}

// TestSleepWakesOnce: concurrent first calls to a sleeping sandbox share
// one wake, and none gets an error.
func TestSleepWakesOnce(t *testing.T) {
	for _, action := range []string{"pause", "stop"} {
		t.Run(action, func(t *testing.T) {
			e := sleepEnv(t)
			ctx := context.Background()
			sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30", ExtIdleAction: action}))
			e.clock.Advance(time.Minute)
			e.m.Expiry.Sweep(ctx)
			var rouses atomic.Int32
			method := map[string]string{"pause": "Unpause", "stop": "Inspect"}[action]
			e.rt.Hook(method, func(context.Context, string) error {
				if action == "pause" {
					rouses.Add(1)
				}
				time.Sleep(50 * time.Millisecond)
				return nil
			})
			var starts atomic.Int32
			if action == "stop" {
				e.rt.SetAgent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/_sandboxd/started" {
						starts.Add(1)
					}
				}))
			}
			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for range 20 {
				wg.Go(func() {
					_, err := e.m.Sandboxes.Transport(ctx, sb.ID)
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("concurrent wake: %v", err)
				}
			}
			e.rt.Hook(method, nil)
			e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
			if n := rouses.Load() + starts.Load(); n != 1 {
				t.Fatalf("%d wakes, want 1", n)
			}
			if got := e.m.Metrics().Wakes.Load(); got != 1 {
				t.Fatalf("wakes metric = %d, want 1", got)
			}
		})
	}
}

// TestSleepResumeOn: what wakes a sandbox is its resume-on's choice.
func TestSleepResumeOn(t *testing.T) {
	ctx := context.Background()
	t.Run("api", func(t *testing.T) {
		e := sleepEnv(t)
		sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30", ExtResumeOn: "api"}))
		e.clock.Advance(time.Minute)
		e.m.Expiry.Sweep(ctx)
		_, err := e.m.Sandboxes.Transport(ctx, sb.ID)
		wantCode(t, err, KindUnavailable, CodeSandboxPaused)
		if er, _ := AsError(err); er.RetryAfter != time.Second {
			t.Fatalf("RetryAfter = %v, want 1s", er.RetryAfter)
		}
		e.wantState(t, sb.ID, cid, runtime.StatePaused, "Paused", reasonIdlePaused)
		if _, err := e.m.Sandboxes.Endpoint(ctx, sb.ID, ExecdPort, "localhost"); err != nil {
			t.Fatal(err)
		}
		e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
	})
	t.Run("off", func(t *testing.T) {
		e := sleepEnv(t)
		sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30", ExtIdleAction: "stop", ExtResumeOn: "off"}))
		e.clock.Advance(time.Minute)
		e.m.Expiry.Sweep(ctx)
		_, err := e.m.Sandboxes.Transport(ctx, sb.ID)
		wantCode(t, err, KindConflict, CodeNotRunning)
		if _, err := e.m.Sandboxes.Endpoint(ctx, sb.ID, ExecdPort, "localhost"); err != nil {
			t.Fatal(err)
		}
		e.wantState(t, sb.ID, cid, runtime.StateExited, "Paused", reasonIdleStopped)
		if err := e.m.Sandboxes.Resume(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
	})
}

// TestSleepSurvivesRestart: a sandbox asleep when sandboxd restarts is
// still asleep (and not reaped as stopped), and the next call wakes it.
func TestSleepSurvivesRestart(t *testing.T) {
	for _, action := range []string{"pause", "stop"} {
		t.Run(action, func(t *testing.T) {
			e := sleepEnv(t)
			ctx := context.Background()
			sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30", ExtIdleAction: action}))
			e.clock.Advance(time.Minute)
			e.m.Expiry.Sweep(ctx)
			m, err := New(e.cfg, e.rt, e.store, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			m.d.now = e.clock.Now
			if err := m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			e.m = m
			want := map[string]runtime.State{"pause": runtime.StatePaused, "stop": runtime.StateExited}[action]
			e.wantState(t, sb.ID, cid, want, "Paused", sleepReason("IDLE_", action))
			if _, err := e.m.Sandboxes.Transport(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
		})
	}
}

// TestSleepAtExpiry: with an expire action, expiry puts the sandbox to
// sleep (going deeper if asked) instead of deleting it; a wake grants its
// timeout again; after the retention it is deleted.
func TestSleepAtExpiry(t *testing.T) {
	ctx := context.Background()
	e := sleepEnv(t)
	sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30", ExtExpireAction: "stop"}))
	e.clock.Advance(time.Minute)
	e.m.Expiry.Sweep(ctx)
	e.wantState(t, sb.ID, cid, runtime.StatePaused, "Paused", reasonIdlePaused)
	e.clock.Advance(10 * time.Minute)
	e.m.Expiry.Sweep(ctx)
	e.wantState(t, sb.ID, cid, runtime.StateExited, "Paused", reasonExpiredStopped)
	e.m.Expiry.Sweep(ctx) // asleep at its expiry: left alone
	e.wantState(t, sb.ID, cid, runtime.StateExited, "Paused", reasonExpiredStopped)
	if _, err := e.m.Sandboxes.Transport(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err := e.m.Sandboxes.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := e.clock.Now().Add(10 * time.Minute); got.Status.State != "Running" || got.ExpiresAt == nil || !got.ExpiresAt.Equal(want) {
		t.Fatalf("after the wake: %s, expiresAt %v; want Running until %v", got.Status.State, got.ExpiresAt, want)
	}
	e.clock.Advance(11 * time.Minute)
	e.m.Expiry.Sweep(ctx)
	e.wantState(t, sb.ID, cid, runtime.StateExited, "Paused", reasonExpiredStopped)
	e.clock.Advance(7*24*time.Hour + time.Minute)
	e.m.Expiry.Sweep(ctx)
	if e.rt.Exists(cid) {
		t.Fatal("asleep past the retention: not deleted")
	}
}

// TestSleepUnsupported: a runtime that cannot pause or stop refuses the
// policy at create, before anything is made.
func TestSleepUnsupported(t *testing.T) {
	e := newEnv(t, nil)
	m, err := New(e.cfg, bareRuntime{e.rt}, e.store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []map[string]string{
		{ExtSleepAfterIdle: "60"},
		{ExtSleepAfterIdle: "60", ExtIdleAction: "stop"},
		{ExtExpireAction: "pause"},
	} {
		_, err := m.Sandboxes.Create(context.Background(), sleepRequest(ext))
		wantCode(t, err, KindInvalid, CodeAPINotSupported)
	}
	if _, err := m.Sandboxes.Create(context.Background(), sleepRequest(map[string]string{ExtSleepAfterIdle: "60", ExtIdleAction: "delete"})); err != nil {
		t.Fatalf("idle delete needs no capability: %v", err)
	}
}

// bareRuntime is a runtime without optional capabilities, as one that
// cannot pause or stop.
type bareRuntime struct{ runtime.Runtime }

func (bareRuntime) Features() runtime.Features { return runtime.Features{} }

// TestSleepPolicedRefusesStop: under an egress policy, only a sleep by
// pause is allowed (a stop loses the firewall's namespace).
func TestSleepPolicedRefusesStop(t *testing.T) {
	for _, tt := range []struct {
		p       *SleepPolicy
		refused bool
	}{
		{nil, false},
		{&SleepPolicy{IdleSeconds: 60, IdleAction: "pause"}, false},
		{&SleepPolicy{IdleSeconds: 60, IdleAction: "delete"}, false},
		{&SleepPolicy{IdleSeconds: 60, IdleAction: "stop"}, true},
		{&SleepPolicy{ExpireAction: "stop"}, true},
		{&SleepPolicy{IdleSeconds: 60, IdleAction: "pause", ExpireAction: "stop"}, true},
	} {
		err := tt.p.checkPoliced(true)
		if tt.refused {
			wantCode(t, err, KindInvalid, CodeInvalidParameter)
		} else if err != nil {
			t.Errorf("%+v: %v", tt.p, err)
		}
		if err := tt.p.checkPoliced(false); err != nil {
			t.Errorf("%+v unpoliced: %v", tt.p, err)
		}
	}
}

// TestSleepRenewWhileExpiredAsleep: a renewal of a sandbox asleep since
// its expiry stands; the wake does not cut it back to the regrant.
func TestSleepRenewWhileExpiredAsleep(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.rt.SetAgent(activity(0))
	sb, cid := e.create(t, sleepRequest(map[string]string{ExtExpireAction: "pause", ExtResumeOn: "off"}))
	e.clock.Advance(11 * time.Minute)
	e.m.Expiry.Sweep(ctx)
	e.wantState(t, sb.ID, cid, runtime.StatePaused, "Paused", reasonExpiredPaused)
	want := e.clock.Now().Add(2 * time.Hour)
	if _, err := e.m.Sandboxes.Renew(ctx, sb.ID, want); err != nil {
		t.Fatal(err)
	}
	e.m.Expiry.Sweep(ctx)
	e.wantState(t, sb.ID, cid, runtime.StatePaused, "Paused", reasonExpiredPaused) // off: a renewal does not wake it
	if err := e.m.Sandboxes.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err := e.m.Sandboxes.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.State != "Running" || got.ExpiresAt == nil || !got.ExpiresAt.Equal(want) {
		t.Fatalf("after the resume: %s, expiresAt %v; want Running until %v", got.Status.State, got.ExpiresAt, want)
	}
}

// TestSleepResumeWait: a call waits for a slow wake up to the policy's
// resume wait, then gets 503 SANDBOX::RESUMING with Retry-After while the
// wake goes on; a later call finds the sandbox awake.
func TestSleepResumeWait(t *testing.T) {
	ctx := context.Background()
	e := sleepEnv(t)
	sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30", ExtResumeWait: "1"}))
	e.clock.Advance(time.Minute)
	e.m.Expiry.Sweep(ctx)
	release := make(chan struct{})
	e.rt.Hook("Unpause", func(context.Context, string) error { <-release; return nil })
	_, err := e.m.Sandboxes.Transport(ctx, sb.ID)
	wantCode(t, err, KindUnavailable, CodeSandboxResuming)
	if er, _ := AsError(err); er.RetryAfter != time.Second {
		t.Fatalf("RetryAfter = %v, want 1s", er.RetryAfter)
	}
	if got, err := e.m.Sandboxes.Get(ctx, sb.ID); err != nil || got.Status.State != "Resuming" || got.Status.Reason != reasonResuming {
		t.Fatalf("during the wake: %+v, %v; want Resuming", got, err)
	}
	close(release)
	if _, err := e.m.Sandboxes.Transport(ctx, sb.ID); err != nil {
		t.Fatalf("after the wake: %v", err)
	}
	e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
}

// TestSleepServerDefault: [lifecycle] sleep_after_idle and sleep_action
// apply to a sandbox that sets no threshold.
func TestSleepServerDefault(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(c *config.Config) {
		c.Lifecycle.SleepAfterIdle = config.Duration{Duration: time.Minute}
		c.Lifecycle.SleepAction = "stop"
	})
	e.rt.SetAgent(activity(0))
	sb, cid := e.create(t, validRequest())
	e.clock.Advance(61 * time.Second)
	e.m.Expiry.Sweep(ctx)
	e.wantState(t, sb.ID, cid, runtime.StateExited, "Paused", reasonIdleStopped)
}

// TestSleepResumeBeforeSweep: POST /resume wakes a sandbox recorded
// asleep even before a sweep of this process learnt of it.
func TestSleepResumeBeforeSweep(t *testing.T) {
	ctx := context.Background()
	e := sleepEnv(t)
	sb, cid := e.create(t, sleepRequest(map[string]string{ExtSleepAfterIdle: "30", ExtIdleAction: "stop"}))
	e.clock.Advance(time.Minute)
	e.m.Expiry.Sweep(ctx)
	m, err := New(e.cfg, e.rt, e.store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.d.now = e.clock.Now
	m.served() // serving without the reconcile's sweep
	e.m = m
	if err := e.m.Sandboxes.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.wantState(t, sb.ID, cid, runtime.StateRunning, "Running", "CONTAINER_RUNNING")
}
