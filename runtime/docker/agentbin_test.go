package docker

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"
)

// fakeELF returns the smallest ELF executable header for machine, with a
// program interpreter (a dynamically linked binary) if dynamic. payload
// follows, so that binaries of one machine differ.
func fakeELF(machine elf.Machine, dynamic bool, payload string) []byte {
	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Ehsize: 64, Phentsize: 56,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	if dynamic {
		hdr.Phoff, hdr.Phnum = 64, 1
	}
	binary.Write(&b, binary.LittleEndian, hdr)
	if dynamic {
		binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_INTERP)})
	}
	b.WriteString(payload)
	return b.Bytes()
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandboxd")
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckELF(t *testing.T) {
	tests := []struct {
		name       string
		data       []byte
		platform   string
		wantStatic bool
		wantErr    string
	}{
		{"static amd64", fakeELF(elf.EM_X86_64, false, ""), "linux/amd64", true, ""},
		{"static arm64", fakeELF(elf.EM_AARCH64, false, ""), "linux/arm64", true, ""},
		{"dynamic amd64", fakeELF(elf.EM_X86_64, true, ""), "linux/amd64", false, ""},
		{"arm64 binary named for amd64", fakeELF(elf.EM_AARCH64, false, ""), "linux/amd64", false, "built for EM_AARCH64, not linux/amd64"},
		{"not an ELF file (a Mach-O or a script)", []byte("#!/bin/sh\necho hi\n"), "linux/amd64", false, "not a Linux executable"},
		{"unknown architecture", fakeELF(elf.EM_X86_64, false, ""), "linux/sparc", false, "no known ELF machine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			static, err := checkELF(bytes.NewReader(tt.data), tt.platform)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || static != tt.wantStatic {
				t.Fatalf("static, err = %v, %v; want %v, nil", static, err, tt.wantStatic)
			}
		})
	}
}

// readAgent returns what an agent volume would be filled with.
func readAgent(t *testing.T, v *agentVolume) []byte {
	t.Helper()
	rc, err := v.open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != v.size {
		t.Errorf("%s agent: size %d, read %d bytes", v.platform, v.size, len(data))
	}
	return data
}

func TestAgentSetPicksThePlatformsAgent(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	configuredARM := fakeELF(elf.EM_AARCH64, false, "configured")
	embeddedARM := fakeELF(elf.EM_AARCH64, false, "embedded")
	embeddedAMD := fakeELF(elf.EM_X86_64, false, "embedded")

	// A release build with an arm64 agent configured over the embedded one.
	set, err := newAgentSet(map[string]string{"linux/arm64": writeFile(t, configuredARM)},
		map[string][]byte{"linux/amd64": embeddedAMD, "linux/arm64": embeddedARM}, "", log)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		platform string
		want     []byte
	}{
		{"linux/arm64", configuredARM},
		{"linux/amd64", embeddedAMD},
	} {
		v, err := set.pick(tt.platform)
		if err != nil {
			t.Fatalf("pick(%s): %v", tt.platform, err)
		}
		if got := readAgent(t, v); !bytes.Equal(got, tt.want) {
			t.Errorf("pick(%s) gave the wrong binary", tt.platform)
		}
		if want := "sandboxd-agent-" + strings.ReplaceAll(tt.platform, "/", "-") + "-" + v.hash; v.name() != want {
			t.Errorf("pick(%s): volume %s, want %s", tt.platform, v.name(), want)
		}
	}
	a, _ := set.pick("linux/amd64")
	b, _ := set.pick("linux/arm64")
	if a.name() == b.name() {
		t.Errorf("both platforms share volume %s", a.name())
	}

	for _, tt := range []struct{ platform, want string }{
		{"linux/riscv64", `[runtime] agent_binaries = { "linux/riscv64" = "/path/to/sandboxd-linux-riscv64" }`},
		{"linux/riscv64", "GOOS=linux GOARCH=riscv64 go build"},
		{"linux/riscv64", "carries agents for linux/amd64, linux/arm64 only"},
		{"windows/amd64", "sandboxd runs Linux images only"},
	} {
		if _, err := set.pick(tt.platform); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("pick(%s) = %v, want an error containing %q", tt.platform, err, tt.want)
		}
	}
}

// TestAgentSetPlainBuild: without configured or embedded agents, sandboxd
// on Linux serves its own platform with the local agent (here its own
// binary) and no other.
func TestAgentSetPlainBuild(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("sandboxd's own binary is an agent only on Linux")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	set, err := newAgentSet(nil, nil, exe, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	own := "linux/" + goruntime.GOARCH
	want, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	v, err := set.pick(own)
	if err != nil {
		t.Fatalf("pick(%s): %v", own, err)
	}
	if !bytes.Equal(readAgent(t, v), want) {
		t.Errorf("pick(%s) is not sandboxd's own binary", own)
	}
	other := "linux/arm64"
	if goruntime.GOARCH == "arm64" {
		other = "linux/amd64"
	}
	_, err = set.pick(other)
	if err == nil || !strings.Contains(err.Error(), "carries agents for "+own+" only") || !strings.Contains(err.Error(), "agent_binaries") {
		t.Errorf("pick(%s) = %v, want the missing agent explained", other, err)
	}
}

func TestAgentSetRefusesWrongFiles(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		name string
		path string
		want string
	}{
		{"wrong architecture", writeFile(t, fakeELF(elf.EM_X86_64, false, "")), "runtime.agent_binaries.linux/arm64: "},
		{"dynamically linked", writeFile(t, fakeELF(elf.EM_AARCH64, true, "")), "dynamically linked; build it with CGO_ENABLED=0"},
		{"missing", filepath.Join(t.TempDir(), "nope"), "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newAgentSet(map[string]string{"linux/arm64": tt.path}, nil, "", log)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestNormalizePlatform(t *testing.T) {
	for _, tt := range []struct{ os, arch, want string }{
		{"linux", "amd64", "linux/amd64"},
		{"linux", "arm64", "linux/arm64"},
		{"linux", "aarch64", "linux/arm64"},
		{"Linux", "x86_64", "linux/amd64"},
		{"", "amd64", "linux/amd64"},
		{"windows", "amd64", "windows/amd64"},
	} {
		if got := normalizePlatform(tt.os, tt.arch); got != tt.want {
			t.Errorf("normalizePlatform(%q, %q) = %q, want %q", tt.os, tt.arch, got, tt.want)
		}
	}
}

// TestAgentVolumeRefilled: the agent volume is checked at each create; one
// removed behind sandboxd's back, or replaced by an empty volume of the same
// name (as the engine makes when it mounts a missing one), is filled again.
func TestAgentVolumeRefilled(t *testing.T) {
	data := []byte("agent binary")
	a := &agentVolume{platform: "linux/amd64", size: int64(len(data)), hash: "0123456789abcdef",
		open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
	var mu sync.Mutex
	var exists, labelled bool
	var size int64 // of the binary in the volume; 0 = absent
	fills := 0
	d := fakeEngine(t, time.Minute, false, map[string]http.HandlerFunc{
		"GET /volumes/" + a.name(): func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if !exists {
				http.Error(w, `{"message":"no such volume"}`, http.StatusNotFound)
				return
			}
			v := volume.Volume{Name: a.name()}
			if labelled {
				v.Labels = map[string]string{LabelAgentVolume: a.hash}
			}
			json.NewEncoder(w).Encode(v)
		},
		"POST /volumes/create": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			exists, labelled, size = true, true, 0
			json.NewEncoder(w).Encode(volume.Volume{Name: a.name()})
		},
		"POST /containers/create": func(w http.ResponseWriter, r *http.Request) {
			json.NewEncoder(w).Encode(container.CreateResponse{ID: "helper"})
		},
		"HEAD /containers/helper/archive": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if size == 0 {
				http.Error(w, "", http.StatusNotFound)
				return
			}
			st, _ := json.Marshal(container.PathStat{Name: "sandboxd", Size: size, Mode: 0o755})
			w.Header().Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(st))
		},
		"PUT /containers/helper/archive": func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			defer mu.Unlock()
			size, fills = a.size, fills+1
		},
		"DELETE /containers/helper": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
	})
	ensure := func(what string, wantFills int) {
		t.Helper()
		if _, err := a.ensure(context.Background(), d, "busybox"); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if fills != wantFills {
			t.Errorf("%s: %d fills, want %d", what, fills, wantFills)
		}
	}
	ensure("first create", 1)
	ensure("volume still there", 1)
	mu.Lock()
	exists = false
	mu.Unlock()
	ensure("volume removed", 2)
	mu.Lock()
	labelled, size = false, 0
	mu.Unlock()
	ensure("volume replaced by an empty one", 3)
}

// Another build's agent volume goes once no container uses it; this
// build's, a young one and volumes that are not agent volumes stay.
func TestPruneStaleAgentVolumes(t *testing.T) {
	old := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	young := time.Now().UTC().Format(time.RFC3339)
	var removed []string
	var mu sync.Mutex
	del := func(name string, inUse bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if inUse {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				io.WriteString(w, `{"message":"remove `+name+`: volume is in use"}`)
				return
			}
			removed = append(removed, name)
			w.WriteHeader(http.StatusNoContent)
		}
	}
	set := &agentSet{volumes: map[string]*agentVolume{"linux/amd64": {platform: "linux/amd64", hash: "0123456789abcdef"}}}
	ours := set.volumes["linux/amd64"].name()
	routes := map[string]http.HandlerFunc{
		"GET /volumes": func(w http.ResponseWriter, r *http.Request) {
			if !strings.Contains(r.URL.Query().Get("filters"), LabelAgentVolume) {
				t.Errorf("volumes listed without the agent label filter: %s", r.URL.RawQuery)
			}
			io.WriteString(w, `{"Volumes":[`+
				`{"Name":"`+ours+`","CreatedAt":"`+old+`"},`+
				`{"Name":"sandboxd-agent-linux-amd64-aaaaaaaaaaaaaaaa","CreatedAt":"`+old+`"},`+
				`{"Name":"sandboxd-agent-linux-amd64-bbbbbbbbbbbbbbbb","CreatedAt":"`+old+`"},`+
				`{"Name":"sandboxd-agent-linux-amd64-cccccccccccccccc","CreatedAt":"`+young+`"},`+
				`{"Name":"someone-elses","CreatedAt":"`+old+`"}]}`)
		},
		"DELETE /volumes/sandboxd-agent-linux-amd64-aaaaaaaaaaaaaaaa": del("sandboxd-agent-linux-amd64-aaaaaaaaaaaaaaaa", false),
		"DELETE /volumes/sandboxd-agent-linux-amd64-bbbbbbbbbbbbbbbb": del("sandboxd-agent-linux-amd64-bbbbbbbbbbbbbbbb", true),
	}
	for _, keep := range []string{ours, "sandboxd-agent-linux-amd64-cccccccccccccccc", "someone-elses"} {
		routes["DELETE /volumes/"+keep] = del(keep, false)
	}
	d := fakeEngine(t, 0, false, routes)
	set.pruneStale(context.Background(), d)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(removed, []string{"sandboxd-agent-linux-amd64-aaaaaaaaaaaaaaaa"}) {
		t.Errorf("removed %v, want only the old unused volume of another build", removed)
	}
}
