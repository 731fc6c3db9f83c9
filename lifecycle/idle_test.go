package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
)

// TestExpiryRules checks the deadline of a record under each rule.
func TestExpiryRules(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	const never time.Duration = -1
	tests := []struct {
		name   string
		rec    Record        // LastActivity is t0 unless set
		max    int           // max_sandbox_timeout_seconds
		touch  time.Duration // in-memory activity at t0+touch (0 = none)
		want   time.Duration // deadline - t0, or never
		idle   bool
		renews bool
	}{
		{name: "manual cleanup", rec: Record{}, want: never},
		{name: "ttl only", rec: Record{ExpiresAt: at(time.Hour)}, want: time.Hour},
		{name: "idle timeout without ttl", rec: Record{IdleTimeout: 600}, want: 10 * time.Minute, idle: true, renews: true},
		{name: "idle timeout before ttl", rec: Record{ExpiresAt: at(time.Hour), IdleTimeout: 600},
			want: 10 * time.Minute, idle: true, renews: true},
		{name: "ttl caps the idle timeout", rec: Record{ExpiresAt: at(5 * time.Minute), IdleTimeout: 600}, want: 5 * time.Minute},
		{name: "ttl wins a tie", rec: Record{ExpiresAt: at(10 * time.Minute), IdleTimeout: 600}, want: 10 * time.Minute},
		{name: "renew on access extends the ttl", rec: Record{ExpiresAt: at(time.Minute), RenewOnAccess: 300, LastActivity: t0.Add(2 * time.Minute)},
			want: 7 * time.Minute, idle: true, renews: true},
		{name: "renew on access never shortens the ttl", rec: Record{ExpiresAt: at(time.Hour), RenewOnAccess: 300, LastActivity: t0.Add(2 * time.Minute)},
			want: time.Hour, renews: true},
		{name: "renew on access without ttl is an idle timeout", rec: Record{RenewOnAccess: 300, LastActivity: t0.Add(time.Hour)},
			want: 65 * time.Minute, idle: true, renews: true},
		{name: "renew on access replaces the server's idle timeout", rec: Record{ExpiresAt: at(time.Hour), RenewOnAccess: 300, IdleTimeout: 60},
			want: time.Hour, renews: true},
		{name: "renew on access cut to the max timeout", rec: Record{ExpiresAt: at(time.Minute), RenewOnAccess: 3600, LastActivity: t0.Add(30 * time.Minute)},
			max: 1800, want: time.Hour, idle: true, renews: true},
		{name: "renew on access under the max timeout", rec: Record{ExpiresAt: at(time.Minute), RenewOnAccess: 600, LastActivity: t0.Add(30 * time.Minute)},
			max: 1800, want: 40 * time.Minute, idle: true, renews: true},
		{name: "max timeout does not shorten a ttl", rec: Record{ExpiresAt: at(time.Hour)}, max: 60, want: time.Hour},
		{name: "in-memory activity newer than the record", rec: Record{IdleTimeout: 60}, touch: 5 * time.Minute,
			want: 6 * time.Minute, idle: true, renews: true},
		{name: "in-memory activity older than the record", rec: Record{IdleTimeout: 60, LastActivity: t0.Add(10 * time.Minute)}, touch: 5 * time.Minute,
			want: 11 * time.Minute, idle: true, renews: true},
		{name: "in-memory activity renews on access", rec: Record{ExpiresAt: at(time.Minute), RenewOnAccess: 300}, touch: 3 * time.Minute,
			want: 8 * time.Minute, idle: true, renews: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) { c.Server.MaxSandboxTimeoutSeconds = tt.max })
			rec := tt.rec
			rec.ID, rec.CreatedAt = "sb", t0
			if rec.LastActivity.IsZero() {
				rec.LastActivity = t0
			}
			if tt.touch != 0 {
				e.clock.t = t0.Add(tt.touch)
				e.m.Expiry.Touch(rec.ID)
			}
			got, ok := e.m.Expiry.expiry(&rec)
			d := e.m.Expiry.deadline(&rec)
			if tt.want == never {
				if ok || d != nil {
					t.Fatalf("expiry = %+v, %v; deadline = %v; want none", got, ok, d)
				}
				return
			}
			if !ok || !got.at.Equal(t0.Add(tt.want)) || got.idle != tt.idle || got.renews != tt.renews {
				t.Errorf("expiry = %+v, %v; want at t0+%v idle=%v renews=%v", got, ok, tt.want, tt.idle, tt.renews)
			}
			if d == nil || !d.Equal(t0.Add(tt.want)) {
				t.Errorf("deadline = %v, want t0+%v", d, tt.want)
			}
		})
	}
}

// Expectations of a scenario step besides an expiresAt offset.
const (
	gone  time.Duration = -1 // the reaper removed the sandbox
	never time.Duration = -2 // the sandbox has no expiresAt
)

// Scenario operations.
type op int

const (
	opNone         op = iota
	opProxy           // a request through the proxy route
	opHousekeeping    // GET, list, endpoint, reconcile: none is activity
	opRenew           // renew-expiration to now+arg
	opSweep           // a reaper sweep, nothing running in the sandbox
	opSweepBusy       // a reaper sweep, a command running in the sandbox
	opCrash           // kill -9 and start again on the same store
)

// TestExpiryScenarios drives one sandbox through activity, housekeeping,
// sweeps and crashes on a fake clock, checking expiresAt after each step.
func TestExpiryScenarios(t *testing.T) {
	type step struct {
		advance time.Duration
		op      op
		arg     time.Duration
		want    time.Duration // expiresAt - createdAt, or gone or never
	}
	tests := []struct {
		name    string
		idle    time.Duration // [lifecycle] idle_timeout
		max     int           // max_sandbox_timeout_seconds
		timeout *int
		extend  string // access.renew.extend.seconds
		steps   []step
	}{
		{name: "idle timeout: housekeeping is not activity", idle: 10 * time.Minute, timeout: ptr(3600), steps: []step{
			{0, opNone, 0, 10 * time.Minute},
			{4 * time.Minute, opHousekeeping, 0, 10 * time.Minute},
			{4 * time.Minute, opProxy, 0, 18 * time.Minute},
			{9 * time.Minute, opSweep, 0, 18 * time.Minute},
			{time.Minute, opSweep, 0, gone},
		}},
		{name: "idle timeout: the ttl caps an active sandbox", idle: 10 * time.Minute, timeout: ptr(900), steps: []step{
			{8 * time.Minute, opProxy, 0, 15 * time.Minute},
			{6 * time.Minute, opProxy, 0, 15 * time.Minute},
			{time.Minute, opSweepBusy, 0, gone},
		}},
		{name: "idle timeout: running work is activity", idle: 10 * time.Minute, steps: []step{
			{0, opNone, 0, 10 * time.Minute},
			{10 * time.Minute, opSweepBusy, 0, 20 * time.Minute},
			{10 * time.Minute, opSweepBusy, 0, 30 * time.Minute},
			{10 * time.Minute, opSweep, 0, gone},
		}},
		{name: "idle timeout: a renewal is activity", idle: 10 * time.Minute, timeout: ptr(600), steps: []step{
			{8 * time.Minute, opRenew, 2 * time.Hour, 18 * time.Minute},
			{9 * time.Minute, opSweep, 0, 18 * time.Minute},
			{time.Minute, opSweep, 0, gone},
		}},
		{name: "idle timeout: a renewal can shorten the ttl", idle: 10 * time.Minute, timeout: ptr(3600), steps: []step{
			{time.Minute, opRenew, 2 * time.Minute, 3 * time.Minute},
			{2 * time.Minute, opSweepBusy, 0, gone},
		}},
		{name: "ttl only: upstream's fixed expiry", timeout: ptr(600), steps: []step{
			{5 * time.Minute, opProxy, 0, 10 * time.Minute},
			{5 * time.Minute, opSweepBusy, 0, gone},
		}},
		{name: "manual cleanup", timeout: nil, steps: []step{
			{0, opNone, 0, never},
			{24 * time.Hour, opSweep, 0, never},
		}},
		{name: "renew on access: activity extends the ttl", timeout: ptr(60), extend: "300", steps: []step{
			{0, opNone, 0, 5 * time.Minute}, // creation is activity
			{4 * time.Minute, opProxy, 0, 9 * time.Minute},
			{4 * time.Minute, opHousekeeping, 0, 9 * time.Minute},
			{time.Minute, opSweepBusy, 0, 14 * time.Minute},
			{5 * time.Minute, opSweep, 0, gone},
		}},
		{name: "renew on access: a longer ttl stands", timeout: ptr(3600), extend: "300", steps: []step{
			{30 * time.Minute, opProxy, 0, time.Hour},
			{30 * time.Minute, opSweep, 0, gone},
		}},
		{name: "renew on access: a renewal is activity", timeout: ptr(600), extend: "300", steps: []step{
			{9 * time.Minute, opRenew, time.Minute, 14 * time.Minute},
			{5 * time.Minute, opSweep, 0, gone},
		}},
		{name: "renew on access without ttl", extend: "300", steps: []step{
			{0, opNone, 0, 5 * time.Minute},
			{4 * time.Minute, opProxy, 0, 9 * time.Minute},
			{5 * time.Minute, opSweep, 0, gone},
		}},
		{name: "renew on access replaces the idle timeout", idle: time.Minute, timeout: ptr(3600), extend: "300", steps: []step{
			{0, opNone, 0, time.Hour},
			{30 * time.Minute, opSweep, 0, time.Hour},
		}},
		{name: "renew on access cut to the max timeout", max: 600, timeout: ptr(60), extend: "3600", steps: []step{
			{0, opNone, 0, 10 * time.Minute},
			{9 * time.Minute, opProxy, 0, 19 * time.Minute},
		}},
		{name: "crash: persisted activity survives, newer activity is lost", idle: 10 * time.Minute, steps: []step{
			{5 * time.Minute, opProxy, 0, 15 * time.Minute},
			{time.Minute, opSweep, 0, 15 * time.Minute}, // persists
			{time.Minute, opProxy, 0, 17 * time.Minute},
			{0, opCrash, 0, 15 * time.Minute},
			{8 * time.Minute, opSweep, 0, gone},
		}},
		{name: "crash: extended deadline survives", timeout: ptr(60), extend: "300", steps: []step{
			{4 * time.Minute, opProxy, 0, 9 * time.Minute},
			{0, opSweep, 0, 9 * time.Minute},
			{0, opCrash, 0, 9 * time.Minute},
			{4 * time.Minute, opSweep, 0, 9 * time.Minute},
			{time.Minute, opSweep, 0, gone},
		}},
	}
	agent := func(running int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/_sandboxd/activity" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, `{"running":%d}`, running)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) {
				c.Lifecycle.IdleTimeout = config.Duration{Duration: tt.idle}
				c.Server.MaxSandboxTimeoutSeconds = tt.max
			})
			ctx := context.Background()
			req := validRequest()
			req.Timeout = tt.timeout
			if tt.extend != "" {
				req.Extensions = map[string]string{ExtRenewOnAccess: tt.extend}
			}
			sb, cid := e.create(t, req)
			for i, s := range tt.steps {
				e.clock.Advance(s.advance)
				e.rt.SetAgent(agent(0))
				var renewed time.Time
				var err error
				switch s.op {
				case opProxy:
					_, err = e.m.Sandboxes.Transport(ctx, sb.ID)
				case opHousekeeping:
					if _, err = e.m.Sandboxes.Get(ctx, sb.ID); err == nil {
						if _, _, err = e.m.Sandboxes.List(ctx, ListFilter{Page: 1, PageSize: 10}); err == nil {
							if _, err = e.m.Sandboxes.Endpoint(ctx, sb.ID, ExecdPort, "localhost"); err == nil {
								err = e.m.Reconcile(ctx)
							}
						}
					}
				case opRenew:
					renewed, err = e.m.Sandboxes.Renew(ctx, sb.ID, e.clock.Now().Add(s.arg))
				case opSweepBusy:
					e.rt.SetAgent(agent(1))
					e.m.Expiry.Sweep(ctx)
				case opSweep:
					e.m.Expiry.Sweep(ctx)
				case opCrash:
					if e.m, err = New(e.cfg, e.rt, e.store, slog.New(slog.DiscardHandler)); err == nil {
						e.m.d.now = e.clock.Now
						err = e.m.Reconcile(ctx)
					}
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got, err := e.m.Sandboxes.Get(ctx, sb.ID)
				switch {
				case s.want == gone:
					if e.rt.Exists(cid) || !isNotFound(err) {
						t.Fatalf("step %d: container exists=%v, Get error %v; want the sandbox reaped", i, e.rt.Exists(cid), err)
					}
				case err != nil:
					t.Fatalf("step %d: Get: %v", i, err)
				case s.want == never:
					if got.ExpiresAt != nil {
						t.Fatalf("step %d: expiresAt = %v, want none", i, got.ExpiresAt)
					}
				case got.ExpiresAt == nil || !got.ExpiresAt.Equal(sb.CreatedAt.Add(s.want)):
					t.Fatalf("step %d: expiresAt = %v, want createdAt+%v", i, got.ExpiresAt, s.want)
				case s.op == opRenew && !renewed.Equal(*got.ExpiresAt):
					t.Fatalf("step %d: Renew returned %v, Get reports %v", i, renewed, got.ExpiresAt)
				}
			}
		})
	}
}

func isNotFound(err error) bool {
	e, ok := AsError(err)
	return ok && e.Kind == KindNotFound
}

// TestSweepSeesLateActivity: a request that arrives while the reaper asks
// the agent whether work is running saves the sandbox.
func TestSweepSeesLateActivity(t *testing.T) {
	for _, late := range []bool{false, true} {
		e := newEnv(t, func(c *config.Config) { c.Lifecycle.IdleTimeout = config.Duration{Duration: time.Minute} })
		sb, cid := e.create(t, validRequest())
		e.clock.Advance(2 * time.Minute)
		e.rt.SetAgent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if late {
				e.m.Expiry.Touch(sb.ID)
			}
			_, _ = io.WriteString(w, `{"running":0}`)
		}))
		e.m.Expiry.Sweep(context.Background())
		if got := e.rt.Exists(cid); got != late {
			t.Errorf("request during the busy check = %v: container exists = %v, want %v", late, got, late)
		}
	}
}
