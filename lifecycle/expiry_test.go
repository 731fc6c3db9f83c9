package lifecycle

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

func TestRenewOnAccessThroughProxy(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Server.MaxSandboxTimeoutSeconds = 3600 })
	ctx := context.Background()
	req := validRequest()
	req.Timeout = ptr(60)
	req.Extensions = map[string]string{ExtRenewOnAccess: "600"}
	sb, _ := e.create(t, req)
	t0 := sb.CreatedAt
	if !sb.ExpiresAt.Equal(t0.Add(10 * time.Minute)) {
		// Creation itself is activity: expiresAt is createdAt + E.
		t.Errorf("expiresAt at create = %v, want createdAt+600s", sb.ExpiresAt)
	}
	steps := []struct {
		advance time.Duration
		want    time.Duration // expected expiresAt - t0
	}{
		{5 * time.Minute, 15 * time.Minute},
		{5 * time.Minute, 20 * time.Minute},
		{45 * time.Minute, 65 * time.Minute}, // the cap bounds each extension, not the lifetime
	}
	for i, s := range steps {
		e.clock.Advance(s.advance)
		if _, err := e.m.Sandboxes.Transport(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		got, err := e.m.Sandboxes.Get(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !got.ExpiresAt.Equal(t0.Add(s.want)) {
			t.Errorf("step %d: expiresAt = %v, want createdAt+%v", i, got.ExpiresAt, s.want)
		}
	}
}

func TestTouchMovesIdleDeadline(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Lifecycle.IdleTimeout = config.Duration{Duration: 5 * time.Minute} })
	req := validRequest()
	req.Timeout = nil
	sb, _ := e.create(t, req)
	if !sb.ExpiresAt.Equal(sb.CreatedAt.Add(5 * time.Minute)) {
		t.Fatalf("expiresAt = %v, want createdAt+5m", sb.ExpiresAt)
	}
	e.clock.Advance(3 * time.Minute)
	e.m.Expiry.Touch(sb.ID)
	got, err := e.m.Sandboxes.Get(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := e.clock.Now().Add(5 * time.Minute); !got.ExpiresAt.Equal(want) {
		t.Errorf("after Touch expiresAt = %v, want %v", got.ExpiresAt, want)
	}
}

func TestSweepTTL(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	short := validRequest()
	short.Timeout = ptr(60)
	expiring, expiringCID := e.create(t, short)
	long, longCID := e.create(t, validRequest()) // 600 s
	manualReq := validRequest()
	manualReq.Timeout = nil
	manual, manualCID := e.create(t, manualReq)

	e.clock.Advance(59 * time.Second)
	e.m.Expiry.Sweep(ctx)
	if !e.rt.Exists(expiringCID) {
		t.Fatal("sandbox reaped before its deadline")
	}
	e.clock.Advance(time.Second) // exactly at the deadline
	e.m.Expiry.Sweep(ctx)
	if e.rt.Exists(expiringCID) {
		t.Error("expired sandbox's container not removed")
	}
	if _, err := e.store.Sandbox(expiring.ID); !errors.Is(err, errNoRecord) {
		t.Errorf("expired sandbox's record kept: %v", err)
	}
	for _, k := range []struct{ id, cid string }{{long.ID, longCID}, {manual.ID, manualCID}} {
		if !e.rt.Exists(k.cid) {
			t.Errorf("sandbox %s reaped early", k.id)
		}
	}
	e.clock.Advance(24 * time.Hour)
	e.m.Expiry.Sweep(ctx)
	if e.rt.Exists(longCID) || !e.rt.Exists(manualCID) {
		t.Errorf("after a day: ttl sandbox exists=%v (want false), manual exists=%v (want true)", e.rt.Exists(longCID), e.rt.Exists(manualCID))
	}
}

func TestSweepSkipsCreating(t *testing.T) {
	e := newEnv(t, nil)
	past := e.clock.Now().Add(-time.Hour)
	if err := e.store.PutSandbox(&Record{ID: "c", State: recordCreating, CreatedAt: past, ExpiresAt: &past}); err != nil {
		t.Fatal(err)
	}
	e.m.Expiry.Sweep(context.Background())
	if _, err := e.store.Sandbox("c"); err != nil {
		t.Errorf("Sweep touched a record still being created: %v", err)
	}
}

func TestSweepIdle(t *testing.T) {
	tests := []struct {
		name   string
		agent  http.HandlerFunc
		paused bool
		keep   bool
	}{
		{"work running", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/_sandboxd/activity" {
				http.NotFound(w, r)
				return
			}
			_, _ = io.WriteString(w, `{"running":1}`)
		}, false, true},
		{"nothing running", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"running":0}`) }, false, false},
		{"agent answers garbage", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `nope`) }, false, false},
		{"agent unreachable", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"running":1}`) }, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) { c.Lifecycle.IdleTimeout = config.Duration{Duration: 10 * time.Minute} })
			e.rt.SetAgent(tt.agent)
			sb, cid := e.create(t, validRequest()) // TTL 600 s + idle 600 s: TTL is not what reaps here
			e.clock.Advance(5 * time.Minute)
			e.m.Expiry.Sweep(context.Background())
			if !e.rt.Exists(cid) {
				t.Fatal("reaped before the idle deadline")
			}
			if _, err := e.m.Sandboxes.Renew(context.Background(), sb.ID, e.clock.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if tt.paused {
				e.rt.Set(t, cid, func(c *runtime.Container) { c.State = runtime.StatePaused })
			}
			e.clock.Advance(11 * time.Minute) // idle for at least 11 min, TTL not reached
			e.m.Expiry.Sweep(context.Background())
			if got := e.rt.Exists(cid); got != tt.keep {
				t.Fatalf("container exists = %v, want %v", got, tt.keep)
			}
			if !tt.keep {
				return
			}
			// Busy counts as activity: the idle deadline moved to now+I.
			got, err := e.m.Sandboxes.Get(context.Background(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if want := e.clock.Now().Add(10 * time.Minute); !got.ExpiresAt.Equal(want) {
				t.Errorf("expiresAt after a busy sweep = %v, want %v", got.ExpiresAt, want)
			}
		})
	}
}

func TestActivity(t *testing.T) {
	// Activity is a request through the proxy route (Transport, file
	// transfers), a resume or a renewal; housekeeping reads are not.
	tests := []struct {
		name     string
		act      func(m *Manager, id string) error
		activity bool
	}{
		{"transport", func(m *Manager, id string) error {
			_, err := m.Sandboxes.Transport(context.Background(), id)
			return err
		}, true},
		{"files", func(m *Manager, id string) error {
			_, err := m.Files.FilesTransport(context.Background(), id)
			return err
		}, true},
		{"resume", func(m *Manager, id string) error {
			if err := m.Sandboxes.Pause(context.Background(), id); err != nil {
				return err
			}
			return m.Sandboxes.Resume(context.Background(), id)
		}, true},
		{"renew", func(m *Manager, id string) error {
			_, err := m.Sandboxes.Renew(context.Background(), id, m.d.now().Add(time.Hour))
			return err
		}, true},
		{"get", func(m *Manager, id string) error { _, err := m.Sandboxes.Get(context.Background(), id); return err }, false},
		{"list", func(m *Manager, id string) error {
			_, _, err := m.Sandboxes.List(context.Background(), ListFilter{Page: 1, PageSize: 1})
			return err
		}, false},
		{"endpoint", func(m *Manager, id string) error {
			_, err := m.Sandboxes.Endpoint(context.Background(), id, 44772, "h")
			return err
		}, false},
		{"pause", func(m *Manager, id string) error { return m.Sandboxes.Pause(context.Background(), id) }, false},
		{"patch metadata", func(m *Manager, id string) error {
			_, err := m.Sandboxes.PatchMetadata(context.Background(), id, map[string]*string{"a": ptr("b")})
			return err
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) { c.Lifecycle.IdleTimeout = config.Duration{Duration: 10 * time.Minute} })
			req := validRequest()
			req.Timeout = ptr(3600)
			sb, cid := e.create(t, req)
			e.clock.Advance(5 * time.Minute)
			if err := tt.act(e.m, sb.ID); err != nil {
				t.Fatalf("action: %v", err)
			}
			idle := sb.CreatedAt.Add(10 * time.Minute)
			if tt.activity {
				idle = e.clock.Now().Add(10 * time.Minute)
			}
			rec, _ := e.store.Sandbox(sb.ID)
			if got := e.m.Expiry.deadline(rec); got == nil || !got.Equal(idle) {
				t.Errorf("deadline = %v, want %v (activity: %v)", got, idle, tt.activity)
			}
			// The sweep agrees: 6 more minutes reap an idle sandbox only.
			e.clock.Advance(6 * time.Minute)
			e.m.Expiry.Sweep(context.Background())
			if got := e.rt.Exists(cid); got != tt.activity {
				t.Errorf("container exists after the sweep = %v, want %v", got, tt.activity)
			}
		})
	}
}

func TestPersistActivity(t *testing.T) {
	e := newEnv(t, nil)
	sb, _ := e.create(t, validRequest())
	created := e.clock.Now()

	e.clock.Advance(time.Minute)
	e.m.Expiry.Touch(sb.ID)
	e.m.Expiry.Touch("unknown-sandbox")
	e.m.Expiry.persistActivity()
	rec, err := e.store.Sandbox(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := created.Add(time.Minute); !rec.LastActivity.Equal(want) {
		t.Errorf("persisted lastActivity = %v, want %v", rec.LastActivity, want)
	}
	// A reader that took the record before that flush must still find the
	// newer time in memory: entries leave a flush later.
	stale := *rec
	stale.LastActivity = created
	if got := e.m.Expiry.lastActivity(&stale); !got.Equal(created.Add(time.Minute)) {
		t.Errorf("lastActivity of a record read before the flush = %v, want %v", got, created.Add(time.Minute))
	}
	e.m.Expiry.persistActivity()
	if n := len(e.m.Expiry.activity); n != 0 {
		t.Errorf("%d activity entries left in memory after a second flush", n)
	}
	if _, err := e.store.Sandbox("unknown-sandbox"); !errors.Is(err, errNoRecord) {
		t.Errorf("persisting activity created a record: %v", err)
	}

	// An older in-memory time never moves the persisted one back.
	e.m.Expiry.mu.Lock()
	e.m.Expiry.activity[sb.ID] = created
	e.m.Expiry.mu.Unlock()
	e.m.Expiry.persistActivity()
	if rec, _ := e.store.Sandbox(sb.ID); !rec.LastActivity.Equal(created.Add(time.Minute)) {
		t.Errorf("lastActivity moved back to %v", rec.LastActivity)
	}

	// Sweep persists too, so activity survives a restart.
	e.clock.Advance(time.Minute)
	e.m.Expiry.Touch(sb.ID)
	e.m.Expiry.Sweep(context.Background())
	if rec, _ := e.store.Sandbox(sb.ID); !rec.LastActivity.Equal(e.clock.Now()) {
		t.Errorf("Sweep did not persist activity: %v", rec.LastActivity)
	}
}

func TestRunReaperStops(t *testing.T) {
	e := newEnv(t, nil)
	sb, _ := e.create(t, validRequest())
	e.clock.Advance(time.Minute)
	e.m.Expiry.Touch(sb.ID)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.m.Expiry.RunReaper(ctx) // returns at once, persisting activity on the way out
	if rec, _ := e.store.Sandbox(sb.ID); !rec.LastActivity.Equal(e.clock.Now()) {
		t.Errorf("RunReaper did not persist activity on exit: %v", rec.LastActivity)
	}
}
