package docker

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/hostpath"
)

// TestCreateSecurityMapping checks, at the Engine API, what a neutral spec
// becomes: every security default of a sandbox rests on this mapping, not
// on the e2e tests alone.
func TestCreateSecurityMapping(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	var got struct {
		container.Config
		HostConfig container.HostConfig
	}
	plat := "linux/" + goruntime.GOARCH
	exe, _ := os.Executable()
	set, err := newAgentSet(nil, nil, exe, slog.New(slog.DiscardHandler))
	if err != nil || set.volumes[plat] == nil {
		t.Skipf("no agent for %s: %v", plat, err)
	}
	agentVol := set.volumes[plat] // the same binary, so the same volume as d's
	d := fakeEngine(t, time.Minute, false, map[string]http.HandlerFunc{
		"GET /volumes/" + agentVol.name(): func(w http.ResponseWriter, _ *http.Request) {
			json.NewEncoder(w).Encode(volume.Volume{Name: agentVol.name(), Labels: map[string]string{LabelAgentVolume: agentVol.hash}})
		},
		"GET /containers/json": func(w http.ResponseWriter, _ *http.Request) {
			json.NewEncoder(w).Encode([]container.Summary{})
		},
		"POST /containers/create": func(w http.ResponseWriter, r *http.Request) {
			if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
				t.Errorf("create body: %v", err)
			}
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(container.CreateResponse{ID: "0123456789abcdef"})
		},
	})
	d.agents.volumes[plat].ready = true // filled earlier: Create only checks it is intact
	if d.prefixes, err = hostpath.Open([]string{dir}); err != nil {
		t.Fatal(err)
	}

	spec := runtime.Spec{
		Name: "sandbox-x", Image: "img", Cmd: []string{"/bin/app", "-v"}, Env: []string{"A=1"},
		Labels: map[string]string{"k": "v"}, Platform: plat,
		Resources: runtime.Resources{NanoCPUs: 5e8, MemoryBytes: 512 << 20, Pids: 4096, GPUs: -1,
			CPURequest: 25e7, MemoryRequestBytes: 128 << 20},
		User: "1000:1000", ReadOnlyRoot: true,
		Capabilities:    runtime.Capabilities{DropAll: true, Drop: []string{"NET_RAW"}, Add: []string{"CHOWN"}},
		NoNewPrivileges: true, SeccompProfile: "/s.json", AppArmorProfile: "prof", RuntimeClass: "runsc",
		Network: runtime.Network{Mode: runtime.NetworkJoin, Name: "helper"},
		Mounts: []runtime.Mount{
			{Kind: runtime.MountHost, Source: filepath.Join(dir, "data"), Beneath: dir, Target: "/data", ReadOnly: true},
		},
		Tmpfs: []runtime.Tmpfs{{Path: "/tmp", SizeBytes: 256 << 20, Exec: true}, {Path: "/run", Mode: 0o700}},
	}
	id, err := d.Create(t.Context(), spec)
	if err != nil || id != "0123456789abcdef" {
		t.Fatalf("Create = %q, %v", id, err)
	}
	hc := got.HostConfig
	checks := []struct {
		what      string
		got, want any
	}{
		{"entrypoint", []string(got.Entrypoint), []string{"/bin/app"}},
		{"cmd", []string(got.Cmd), []string{"-v"}},
		{"user", got.User, "1000:1000"},
		{"env", got.Env, []string{"A=1"}},
		{"labels", got.Labels, map[string]string{"k": "v"}},
		{"init", hc.Init != nil && *hc.Init, true},
		{"cgroupns", hc.CgroupnsMode, container.CgroupnsModePrivate},
		{"privileged", hc.Privileged, false},
		{"read-only root", hc.ReadonlyRootfs, true},
		{"cap drop", []string(hc.CapDrop), []string{"ALL", "CAP_NET_RAW"}}, // the client adds CAP_
		{"cap add", []string(hc.CapAdd), []string{"CAP_CHOWN"}},
		{"security opts", hc.SecurityOpt, []string{"no-new-privileges:true", "seccomp=/s.json", "apparmor=prof"}},
		{"oci runtime", hc.Runtime, "runsc"},
		{"network", hc.NetworkMode, container.NetworkMode("container:helper")},
		{"pids", hc.PidsLimit != nil && *hc.PidsLimit == 4096, true},
		{"memory", hc.Memory, int64(512 << 20)},
		{"no swap", hc.MemorySwap, int64(512 << 20)},
		{"cpus", hc.NanoCPUs, int64(5e8)},
		{"cpu weight", hc.CPUShares, int64(256)},
		{"memory reservation", hc.MemoryReservation, int64(128 << 20)},
		{"gpus", hc.DeviceRequests, []container.DeviceRequest{{Count: -1, Capabilities: [][]string{{"gpu"}}}}},
		{"tmpfs", hc.Tmpfs, map[string]string{"/tmp": "rw,exec,nosuid,nodev,size=256m", "/run": "rw,noexec,nosuid,nodev,mode=700"}},
		{"published ports", len(hc.PortBindings), 0},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.what, c.got, c.want)
		}
	}
	wantMounts := []mount.Mount{
		{Type: mount.TypeVolume, Source: agentVol.name(), Target: AgentDir, ReadOnly: true, VolumeOptions: &mount.VolumeOptions{NoCopy: true}},
		{Type: mount.TypeBind, Source: filepath.Join(dir, "data"), Target: "/data", ReadOnly: true, BindOptions: &mount.BindOptions{}},
	}
	if !reflect.DeepEqual(hc.Mounts, wantMounts) {
		t.Errorf("mounts = %+v\nwant %+v", hc.Mounts, wantMounts)
	}
	if slices.ContainsFunc(hc.Mounts, func(m mount.Mount) bool { return m.Target == AgentDir && !m.ReadOnly }) {
		t.Error("the agent volume is writable")
	}
}

// TestNetworkModes: each network intent's Docker spelling.
func TestNetworkModes(t *testing.T) {
	for _, c := range []struct {
		n    runtime.Network
		want container.NetworkMode
	}{
		{runtime.Network{}, "bridge"},
		{runtime.Network{Mode: runtime.NetworkNone}, "none"},
		{runtime.Network{Mode: runtime.NetworkIsolated, Name: "sandboxd"}, "sandboxd"},
		{runtime.Network{Mode: runtime.NetworkNamed, Name: "mynet"}, "mynet"},
		{runtime.Network{Mode: runtime.NetworkJoin, Name: "abc"}, "container:abc"},
	} {
		if got := networkMode(c.n); got != c.want {
			t.Errorf("networkMode(%+v) = %q, want %q", c.n, got, c.want)
		}
	}
}

// TestCheckHostPathRemoteEngine: an engine reached over the network gets
// no host path, whatever the allow-list: its host's paths are not ours.
func TestCheckHostPathRemoteEngine(t *testing.T) {
	d := fakeEngine(t, time.Minute, false, nil)
	var err error
	if d.prefixes, err = hostpath.Open([]string{"/"}); err != nil {
		t.Fatal(err)
	}
	_, err = d.CheckHostPath(t.Context(), t.TempDir(), nil)
	var he *runtime.HostPathError
	if !errors.As(err, &he) || !he.NotAllowed {
		t.Fatalf("CheckHostPath on a tcp engine = %v, want a refusal", err)
	}
}
