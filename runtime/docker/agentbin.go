package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxd/sandboxd/runtime"
)

// The agent in a sandbox is always a static Linux binary of the sandbox
// image's platform (cmd/sandboxd-agent, or sandboxd's own binary, which
// serves the same commands), whatever the server runs on. Its sources, the
// first that has the platform winning: [runtime] agent_binaries, the agents
// embedded in a release build, and the local agent of the server's own
// platform when it runs on Linux (Options.LocalAgent).

// elfMachines maps a Go architecture to its ELF machine, to check that a
// binary fits the platform it is named for.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390,
}

// agentSet holds one agent volume per platform it has a binary for.
type agentSet struct {
	volumes map[string]*agentVolume // by platform
	pruned  sync.Once
}

// newAgentSet collects the agent binaries: files named by platform (each
// checked to be a static Linux binary of it), embedded ones, and local,
// the agent of this machine's own platform, if it runs Linux.
func newAgentSet(files map[string]string, embedded map[string][]byte, local string, log *slog.Logger) (*agentSet, error) {
	s := &agentSet{volumes: map[string]*agentVolume{}}
	for _, plat := range slices.Sorted(maps.Keys(files)) {
		v, err := fileAgent(plat, files[plat])
		if err != nil {
			return nil, fmt.Errorf("runtime.agent_binaries.%s: %w", plat, err)
		}
		if !v.static {
			return nil, fmt.Errorf("runtime.agent_binaries.%s: %s is dynamically linked; build it with CGO_ENABLED=0", plat, files[plat])
		}
		s.volumes[plat] = v.agentVolume
	}
	for plat, data := range embedded {
		if _, err := checkELF(bytes.NewReader(data), plat); err != nil {
			return nil, fmt.Errorf("embedded agent for %s: %w", plat, err)
		}
		if s.volumes[plat] == nil {
			sum := sha256.Sum256(data)
			s.volumes[plat] = &agentVolume{platform: plat, size: int64(len(data)), hash: hex.EncodeToString(sum[:])[:16],
				open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
		}
	}
	own := "linux/" + goruntime.GOARCH
	if local != "" && s.volumes[own] == nil {
		v, err := fileAgent(own, local)
		if err != nil {
			return nil, fmt.Errorf("local agent: %w", err)
		}
		if !v.static {
			log.Warn("the agent is dynamically linked: it runs only in images with a matching C library; build it with CGO_ENABLED=0", "binary", local)
		}
		s.volumes[own] = v.agentVolume
	}
	return s, nil
}

// checkedAgent is an agent binary read from a file.
type checkedAgent struct {
	*agentVolume
	static bool
}

// fileAgent hashes the binary at path after checking that it is a Linux
// executable for platform.
func fileAgent(platform, path string) (checkedAgent, error) {
	f, err := os.Open(path)
	if err != nil {
		return checkedAgent{}, err
	}
	defer f.Close()
	static, err := checkELF(f, platform)
	if err != nil {
		return checkedAgent{}, fmt.Errorf("%s: %w", path, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return checkedAgent{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return checkedAgent{
		agentVolume: &agentVolume{platform: platform, size: n, hash: hex.EncodeToString(h.Sum(nil))[:16],
			open: func() (io.ReadCloser, error) { return os.Open(path) }},
		static: static,
	}, nil
}

// checkELF reports whether r holds a Linux executable for platform, and
// whether it is statically linked (no program interpreter).
func checkELF(r io.ReaderAt, platform string) (static bool, err error) {
	arch, _ := strings.CutPrefix(platform, "linux/")
	want, known := elfMachines[arch]
	if !known {
		return false, fmt.Errorf("no known ELF machine for platform %s", platform)
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return false, fmt.Errorf("not a Linux executable: %w", err)
	}
	if f.Machine != want || (f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX) {
		return false, fmt.Errorf("built for %s, not %s", f.Machine, platform)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// pick returns the agent volume for a sandbox platform, or an error that
// says what binary is missing and how to provide it.
func (s *agentSet) pick(platform string) (*agentVolume, error) {
	if v := s.volumes[platform]; v != nil {
		return v, nil
	}
	have := slices.Sorted(maps.Keys(s.volumes))
	arch, isLinux := strings.CutPrefix(platform, "linux/")
	if !isLinux {
		return nil, fmt.Errorf("image platform %s: sandboxd runs Linux images only", platform)
	}
	carried := "no agent"
	if len(have) > 0 {
		carried = "agents for " + strings.Join(have, ", ") + " only"
	}
	return nil, fmt.Errorf("image platform %s: no sandboxd agent for it (this sandboxd carries %s); "+
		"use a release build, which embeds the linux/amd64 and linux/arm64 agents, or build one with "+
		"`CGO_ENABLED=0 GOOS=linux GOARCH=%s go build -ldflags=\"-s -w\" -o sandboxd-linux-%s ./cmd/sandboxd-agent` "+
		"and name it in the config: [runtime] agent_binaries = { %q = \"/path/to/sandboxd-linux-%s\" }",
		platform, carried, arch, arch, platform, arch)
}

// volume returns the agent volume for a sandbox of spec, filled.
func (s *agentSet) volume(ctx context.Context, d *Docker, spec runtime.Spec) (string, error) {
	platform, err := d.imagePlatform(ctx, spec)
	if err != nil {
		return "", err
	}
	v, err := s.pick(platform)
	if err != nil {
		return "", err
	}
	name, err := v.ensure(ctx, d, spec.Image)
	if err == nil {
		s.pruned.Do(func() { go s.pruneStale(context.WithoutCancel(ctx), d) })
	}
	return name, err
}

// pruneStale removes the agent volumes of other sandboxd builds that no
// container uses: every upgrade (or build) leaves one of up to the
// binary's size on the engine. The engine refuses to remove a volume that
// any container, running or not, still mounts; one made in the last
// staleAgentAge may be another sandboxd's, about to be filled.
func (s *agentSet) pruneStale(ctx context.Context, d *Docker) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	list, err := d.cli.VolumeList(cctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelAgentVolume))})
	if err != nil {
		d.log.Debug("list agent volumes", "err", err)
		return
	}
	ours := map[string]bool{}
	for _, v := range s.volumes {
		ours[v.name()] = true
	}
	removed := 0
	for _, v := range list.Volumes {
		created, err := time.Parse(time.RFC3339, v.CreatedAt)
		if ours[v.Name] || !strings.HasPrefix(v.Name, agentVolumePrefix) || err != nil || time.Since(created) < staleAgentAge {
			continue
		}
		if err := d.cli.VolumeRemove(cctx, v.Name, false); err == nil {
			removed++
		}
	}
	if removed > 0 {
		d.log.Info("removed the agent volumes of other sandboxd builds that no container uses", "volumes", removed)
	}
}

// staleAgentAge is how old another build's agent volume must be to go.
const staleAgentAge = 10 * time.Minute

// imagePlatform is the platform a container of spec runs as: the one the
// request asked for, else the image's own.
func (d *Docker) imagePlatform(ctx context.Context, spec runtime.Spec) (string, error) {
	if spec.Platform != "" {
		return spec.Platform, nil
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	img, err := d.cli.ImageInspect(cctx, spec.Image)
	if err != nil {
		return "", wrap(err, "inspect image %s", spec.Image)
	}
	return normalizePlatform(img.Os, img.Architecture), nil
}

// normalizePlatform spells an image's platform as Go does: some images
// carry the kernel's architecture names.
func normalizePlatform(goos, arch string) string {
	switch strings.ToLower(arch) {
	case "x86_64", "x86-64":
		arch = "amd64"
	case "aarch64":
		arch = "arm64"
	}
	if goos == "" {
		goos = "linux"
	}
	return strings.ToLower(goos) + "/" + strings.ToLower(arch)
}
