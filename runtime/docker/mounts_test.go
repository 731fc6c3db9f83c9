package docker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxd/sandboxd/runtime"
)

func TestWritableAbove(t *testing.T) {
	cs := []container.Summary{
		{Mounts: []container.MountPoint{
			{Type: mount.TypeBind, Source: "/srv/work", RW: true},
			{Type: mount.TypeBind, Source: "/srv/ro", RW: false},
			{Type: mount.TypeVolume, Source: "/var/lib/docker/volumes/v/_data", RW: true},
		}},
		{Mounts: []container.MountPoint{{Type: mount.TypeBind, Source: "/data/", RW: true}}},
	}
	tests := []struct{ path, want string }{
		{"/srv/work/sub", "/srv/work"},
		{"/srv/work/a/b", "/srv/work"},
		{"/srv/work", ""}, // the same directory cannot be renamed from inside
		{"/srv/workshop", ""},
		{"/srv/ro/sub", ""},
		{"/srv", ""},
		{"/var/lib/docker/volumes/v/_data/x", ""},
		{"/data/x", "/data"},
	}
	for _, tt := range tests {
		if got := writableAbove(tt.path, cs); got != tt.want {
			t.Errorf("writableAbove(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
	root := []container.Summary{{Mounts: []container.MountPoint{{Type: mount.TypeBind, Source: "/", RW: true}}}}
	if got := writableAbove("/anything", root); got != "/" {
		t.Errorf("below a read-write / : %q", got)
	}
}

// planMounts against a fake engine reached over TCP, where sandboxd cannot
// pin: subPath is the engine's from API 1.45, refused before it; host paths
// below another container's read-write bind are refused.
func TestPlanMountsUnpinned(t *testing.T) {
	dir := t.TempDir()
	work, other := filepath.Join(dir, "work"), filepath.Join(dir, "other")
	tests := []struct {
		name    string
		api     string
		driver  string
		m       runtime.Mount
		want    mount.Mount // when accepted
		subPath bool        // refused for the subPath
		refused bool
	}{
		{name: "engine subPath", api: "1.45", driver: "local",
			m:    runtime.Mount{Kind: runtime.MountVolume, Source: "v", Target: "/d", SubPath: "a/b", ReadOnly: true},
			want: mount.Mount{Type: mount.TypeVolume, Source: "v", Target: "/d", ReadOnly: true, VolumeOptions: &mount.VolumeOptions{Subpath: "a/b"}}},
		{name: "old engine, local volume, cannot pin", api: "1.41", driver: "local",
			m: runtime.Mount{Kind: runtime.MountVolume, Source: "v", Target: "/d", SubPath: "a"}, refused: true, subPath: true},
		{name: "old engine, other driver", api: "1.41", driver: "nfs",
			m: runtime.Mount{Kind: runtime.MountVolume, Source: "v", Target: "/d", SubPath: "a"}, refused: true, subPath: true},
		{name: "volume without subPath", api: "1.41",
			m:    runtime.Mount{Kind: runtime.MountVolume, Source: "v", Target: "/d"},
			want: mount.Mount{Type: mount.TypeVolume, Source: "v", Target: "/d"}},
		{name: "host path below a read-write bind", api: "1.41",
			m: runtime.Mount{Kind: runtime.MountHost, Source: filepath.Join(work, "sub"), Beneath: dir, Target: "/h"}, refused: true},
		{name: "host path beside it", api: "1.41",
			m:    runtime.Mount{Kind: runtime.MountHost, Source: other, Beneath: dir, Target: "/h", ReadOnly: true},
			want: mount.Mount{Type: mount.TypeBind, Source: other, Target: "/h", ReadOnly: true, BindOptions: &mount.BindOptions{}}},
		{name: "host path outside its prefix", api: "1.41",
			m: runtime.Mount{Kind: runtime.MountHost, Source: "/etc", Beneath: dir, Target: "/h"}, refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("API-Version", tt.api)
				w.Header().Set("Content-Type", "application/json")
				switch {
				case strings.HasSuffix(r.URL.Path, "/_ping"):
				case strings.HasSuffix(r.URL.Path, "/volumes/v"):
					json.NewEncoder(w).Encode(volume.Volume{Name: "v", Driver: tt.driver, Mountpoint: "/var/lib/docker/volumes/v/_data"})
				case strings.HasSuffix(r.URL.Path, "/containers/json"):
					json.NewEncoder(w).Encode([]container.Summary{{Mounts: []container.MountPoint{{Type: mount.TypeBind, Source: work, RW: true}}}})
				default:
					http.Error(w, `{"message":"unexpected"}`, http.StatusBadRequest)
				}
			}))
			defer engine.Close()
			d, err := New(context.Background(), Options{Host: "tcp://" + engine.Listener.Addr().String(), Logger: slog.New(slog.DiscardHandler), MountDir: filepath.Join(dir, "pins"), AllowedHostPaths: []string{dir}})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			d.cli.NegotiateAPIVersion(context.Background())
			got, pinDir, err := d.planMounts(context.Background(), "c", []runtime.Mount{tt.m})
			if pinDir != "" {
				t.Errorf("pinned at %s with a remote engine", pinDir)
			}
			var me *runtime.MountError
			if tt.refused {
				if !errors.As(err, &me) || me.SubPath != tt.subPath || me.Target != tt.m.Target {
					t.Fatalf("planMounts: %v, want a MountError (subPath %v)", err, tt.subPath)
				}
				return
			}
			if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
				t.Fatalf("planMounts = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// An engine behind a local socket that is Docker Desktop's VM is not
// pinned for; one that does not answer is an engine error, not a refusal.
func TestPinnerDockerDesktop(t *testing.T) {
	for _, tt := range []struct {
		name     string
		info     int // status of GET /info
		wantWhy  string
		wantFail bool
	}{
		{name: "docker desktop", info: http.StatusOK, wantWhy: "Docker Desktop"},
		{name: "info fails", info: http.StatusInternalServerError, wantFail: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "engine.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			engine := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("API-Version", "1.41")
				w.Header().Set("Content-Type", "application/json")
				if strings.HasSuffix(r.URL.Path, "/info") {
					w.WriteHeader(tt.info)
					io.WriteString(w, `{"OperatingSystem":"Docker Desktop","message":"down"}`)
				}
			}))
			engine.Listener = ln
			engine.Start()
			defer engine.Close()
			d, err := New(context.Background(), Options{Host: "unix://" + sock, Logger: slog.New(slog.DiscardHandler), MountDir: filepath.Join(t.TempDir(), "pins")})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			whyNot, err := d.pinner(context.Background())
			if tt.wantFail {
				if err == nil {
					t.Fatalf("pinner with an engine that fails /info: why not %v, no error", whyNot)
				}
				return
			}
			if err != nil || whyNot == nil || !strings.Contains(whyNot.Error(), tt.wantWhy) {
				t.Fatalf("pinner = %v, %v; want a reason naming %q", whyNot, err, tt.wantWhy)
			}
		})
	}
}

// A create waiting for another one's `docker info` (asked once, under a
// lock) still ends with its own context, not when the engine answers.
func TestPinnerWaiterKeepsItsContext(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	asked, answer := make(chan struct{}), make(chan struct{})
	engine := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("API-Version", "1.41")
		if strings.HasSuffix(r.URL.Path, "/info") {
			close(asked)
			<-answer
			io.WriteString(w, `{"OperatingSystem":"Docker Desktop"}`)
		}
	}))
	engine.Listener = ln
	engine.Start()
	defer engine.Close()
	defer close(answer)
	d, err := New(context.Background(), Options{Host: "unix://" + sock, Logger: slog.New(slog.DiscardHandler), MountDir: filepath.Join(t.TempDir(), "pins")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	go d.pinner(context.Background()) // holds the lock until the engine answers
	<-asked
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { _, err := d.pinner(ctx); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("waiting pinner: %v, want its context's error", err)
		}
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("a pinner with a cancelled context waited for another one's engine call")
	}
}
