package docker

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// fakeEngine serves routes of the Engine API (by "METHOD /path suffix") and
// answers pings unless pingDown.
func fakeEngine(t *testing.T, apiTimeout time.Duration, pingDown bool, routes map[string]http.HandlerFunc) *Docker {
	t.Helper()
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_ping") {
			if pingDown {
				<-r.Context().Done()
				return
			}
			w.Header().Set("API-Version", "1.41")
			return
		}
		for route, h := range routes {
			method, suffix, _ := strings.Cut(route, " ")
			if r.Method == method && strings.HasSuffix(r.URL.Path, suffix) {
				h(w, r)
				return
			}
		}
		http.Error(w, `{"message":"unexpected `+r.Method+` `+r.URL.Path+`"}`, http.StatusBadRequest)
	}))
	t.Cleanup(engine.Close)
	exe, _ := os.Executable() // the local agent, as a plain build's own binary
	d, err := New(context.Background(), Options{Host: "tcp://" + engine.Listener.Addr().String(), APITimeout: apiTimeout, Logger: slog.New(slog.DiscardHandler), LocalAgent: exe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// hang blocks until the client gives up, as dockerd does on a container it
// is stuck on.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func TestContainerTimeoutIsNotEngineDown(t *testing.T) {
	t.Parallel() // waits out its API timeouts
	for _, tc := range []struct {
		name     string
		pingDown bool
		want     error
	}{
		{"engine answers pings", false, runtime.ErrContainerTimeout},
		{"engine hangs on everything", true, runtime.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := fakeEngine(t, 100*time.Millisecond, tc.pingDown, map[string]http.HandlerFunc{
				"GET /containers/c1/json":     hang,
				"POST /containers/c1/pause":   hang,
				"POST /containers/c1/unpause": hang,
			})
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			_, err := d.Inspect(ctx, "c1")
			if !errors.Is(err, tc.want) {
				t.Errorf("Inspect: %v, want %v", err, tc.want)
			}
			if err := d.Pause(ctx, "c1"); !errors.Is(err, tc.want) {
				t.Errorf("Pause: %v, want %v", err, tc.want)
			}
			if err := d.Unpause(ctx, "c1"); !errors.Is(err, tc.want) {
				t.Errorf("Unpause: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestPauseRetriesWhenRuncCannotFreeze(t *testing.T) {
	var hits atomic.Int32
	d := fakeEngine(t, 0, false, map[string]http.HandlerFunc{
		"POST /containers/c1/pause": func(w http.ResponseWriter, r *http.Request) {
			if hits.Add(1) == 1 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				io.WriteString(w, `{"message":"Cannot pause container c1: OCI runtime pause failed: unable to freeze: unknown"}`)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		},
	})
	d.pauseRetryDelay = time.Millisecond
	if err := d.Pause(context.Background(), "c1"); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if hits.Load() != 2 {
		t.Errorf("the engine was asked %d times, want 2", hits.Load())
	}
}

// dockerd holds a container for as long as an archive of it streams: a
// download stalled by its client must neither hang inspect nor pause.
func TestPauseCutsAStalledDownloadShort(t *testing.T) {
	streaming := make(chan struct{})
	released := make(chan struct{})
	var list atomic.Int32
	stat := base64.StdEncoding.EncodeToString([]byte(`{"name":"big","size":1048576,"mode":420}`))
	d := fakeEngine(t, 0, false, map[string]http.HandlerFunc{
		"GET /containers/c1/archive": func(w http.ResponseWriter, r *http.Request) {
			defer close(released)
			w.Header().Set("X-Docker-Container-Path-Stat", stat)
			tw := tar.NewWriter(w)
			tw.WriteHeader(&tar.Header{Name: "big", Mode: 0o644, Size: 1 << 20, Typeflag: tar.TypeReg})
			tw.Write(make([]byte, 4096))
			w.(http.Flusher).Flush()
			close(streaming)
			<-r.Context().Done() // the rest never comes
		},
		// The container's lock is held until the stream is gone.
		"GET /containers/c1/json": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-released:
				io.WriteString(w, `{"Id":"c1","State":{"Status":"running","Running":true}}`)
			case <-r.Context().Done():
			}
		},
		"GET /containers/json": func(w http.ResponseWriter, r *http.Request) {
			list.Add(1)
			io.WriteString(w, `[{"Id":"c1","Names":["/sandbox-x"],"State":"running"}]`)
		},
		"POST /containers/c1/pause": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-released:
				w.WriteHeader(http.StatusNoContent)
			case <-r.Context().Done():
			}
		},
	})
	d.gates.grace = 0
	d.pauseSettle = 0 // this engine never reports the pause
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	rc, _, err := d.GetArchive(ctx, "c1", "/big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	<-streaming

	c, err := d.Inspect(ctx, "c1")
	if err != nil || c.State != runtime.StateRunning || list.Load() != 1 {
		t.Fatalf("Inspect during a transfer = %+v, %v (list asked %d times); want it answered from the list", c, err, list.Load())
	}
	if err := d.Pause(ctx, "c1"); err != nil {
		t.Fatalf("Pause during a stalled transfer: %v", err)
	}
	_, err = io.Copy(io.Discard, rc)
	if !errors.Is(err, errAborted) || !errors.Is(err, runtime.ErrConflict) {
		t.Errorf("reading the cut transfer: %v, want errAborted", err)
	}
	if _, err := d.Inspect(ctx, "c1"); err != nil || list.Load() != 1 {
		t.Errorf("Inspect after the transfer: %v (list asked %d times), want a real inspect", err, list.Load())
	}
}

// While a transfer holds an exited container, inspect still tells how it
// ended, from its last inspect.
func TestInspectDuringTransferKeepsTheExitCode(t *testing.T) {
	locked := make(chan struct{})
	stat := base64.StdEncoding.EncodeToString([]byte(`{"name":"f","size":1,"mode":420}`))
	d := fakeEngine(t, 0, false, map[string]http.HandlerFunc{
		"GET /containers/c1/archive": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Docker-Container-Path-Stat", stat)
			w.(http.Flusher).Flush()
			close(locked)
			<-r.Context().Done()
		},
		"GET /containers/c1/json": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-locked:
				<-r.Context().Done()
			default:
				io.WriteString(w, `{"Id":"c1","State":{"Status":"exited","ExitCode":3,"OOMKilled":true}}`)
			}
		},
		"GET /containers/json": func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `[{"Id":"c1","State":"exited"}]`)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := d.Inspect(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	rc, _, err := d.GetArchive(ctx, "c1", "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	<-locked
	c, err := d.Inspect(ctx, "c1")
	if err != nil || c.ExitCode != 3 || !c.OOMKilled || c.State != runtime.StateExited {
		t.Errorf("Inspect during a transfer = %+v, %v; want exit code 3, OOM killed", c, err)
	}
}

// dockerd's paused flag can lag a pause or unpause (see settlePause): the
// call returns once dockerd reports what it did, and an unpause that finds
// the task already running succeeds once the flag catches up.
func TestUnpauseWaitsForTheEngineToAgree(t *testing.T) {
	for _, tc := range []struct {
		name       string
		unpauseErr string // the engine's answer to the unpause; none for success
		stale      int32  // inspects that still say paused
		wantErr    bool
	}{
		{"flag lags a successful unpause", "", 3, false},
		{"task already running", "Cannot unpause container c1: cannot resume a running process: unknown", 2, false},
		{"really still paused", "Cannot unpause container c1: cannot resume a running process: unknown", 1 << 30, true},
		{"other unpause error", "Cannot unpause container c1: something else: unknown", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inspects atomic.Int32
			d := fakeEngine(t, 0, false, map[string]http.HandlerFunc{
				"POST /containers/c1/unpause": func(w http.ResponseWriter, r *http.Request) {
					if tc.unpauseErr == "" {
						w.WriteHeader(http.StatusNoContent)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusInternalServerError)
					io.WriteString(w, `{"message":"`+tc.unpauseErr+`"}`)
				},
				"GET /containers/c1/json": func(w http.ResponseWriter, r *http.Request) {
					paused := inspects.Add(1) <= tc.stale
					if paused {
						io.WriteString(w, `{"Id":"c1","State":{"Status":"paused","Running":true,"Paused":true}}`)
						return
					}
					io.WriteString(w, `{"Id":"c1","State":{"Status":"running","Running":true}}`)
				},
			})
			d.pauseSettle = 200 * time.Millisecond
			err := d.Unpause(context.Background(), "c1")
			if (err != nil) != tc.wantErr {
				t.Fatalf("Unpause: %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && inspects.Load() <= tc.stale {
				t.Errorf("Unpause returned after %d inspects, while the engine said paused for %d", inspects.Load(), tc.stale)
			}
			if c, err := d.Inspect(context.Background(), "c1"); !tc.wantErr && (err != nil || c.State != runtime.StateRunning) {
				t.Errorf("Inspect after Unpause = %v, %v; want running", c.State, err)
			}
		})
	}
}
