// Command release builds sandboxd's release archives, reproducibly: the same
// commit and Go version give byte-identical files on any machine.
//
//	go run ./cmd/release [-version v1.2.3] [-out dist] [-platforms linux/amd64,...] [-image]
//
// It cross-compiles the two Linux agents (cmd/sandboxd-agent), then sandboxd for every platform
// with both agents embedded (-tags embedagents; the agents reach
// cmd/sandboxd/agents/ through an -overlay, so the tree stays clean), and
// writes one archive per platform (tar.gz, zip for Windows) holding the
// binary, README.md and SECURITY.md, plus SHA256SUMS. -image also builds
// the container image sandboxd:VERSION from images/sandboxd/Dockerfile with
// the Linux binary of this machine's architecture.
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// platforms are the release targets; agentArchs the sandbox platforms whose
// agents every release binary embeds.
var (
	platforms  = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}
	agentArchs = []string{"amd64", "arm64"}
)

// docs go into every archive next to the binary.
var docs = []string{"README.md", "SECURITY.md"}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	flags := flag.NewFlagSet("release", flag.ContinueOnError)
	version := flags.String("version", "", "version to stamp (default: git describe --tags --always --dirty)")
	out := flags.String("out", "dist", "output directory")
	only := flags.String("platforms", strings.Join(platforms, ","), "comma-separated GOOS/GOARCH list")
	image := flags.Bool("image", false, "also build the container image sandboxd:VERSION (needs docker)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	root, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	commit, err := git("rev-parse", "HEAD")
	if err != nil {
		return err
	}
	if dirty, _ := git("status", "--porcelain", "--untracked-files=no"); dirty != "" {
		commit += "-dirty"
	}
	if *version == "" {
		if *version, err = git("describe", "--tags", "--always", "--dirty"); err != nil {
			return err
		}
	}
	// Archive entries carry the commit's time, not the build's.
	epoch, err := git("log", "-1", "--format=%ct")
	if err != nil {
		return err
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("commit time %q: %w", epoch, err)
	}
	mtime := time.Unix(secs, 0).UTC()

	targets := strings.Split(*only, ",")
	for _, p := range targets {
		if !slices.Contains(platforms, p) {
			return fmt.Errorf("unknown platform %q (have %s)", p, strings.Join(platforms, ", "))
		}
	}
	if *out, err = filepath.Abs(*out); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "sandboxd-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	b := builder{root: root, version: *version, commit: commit}
	overlay := map[string]string{}
	for _, arch := range agentArchs {
		name := "sandboxd-agent-linux-" + arch
		bin := filepath.Join(work, "agents", name)
		fmt.Printf("agent  linux/%s\n", arch)
		if err := b.build("./cmd/sandboxd-agent", "linux", arch, bin, false, ""); err != nil {
			return err
		}
		overlay[filepath.Join(root, "cmd", "sandboxd", "agents", name)] = bin
	}
	overlayFile := filepath.Join(work, "overlay.json")
	data, _ := json.Marshal(map[string]any{"Replace": overlay})
	if err := os.WriteFile(overlayFile, data, 0o644); err != nil {
		return err
	}

	var sums []string
	for _, p := range targets {
		goos, goarch, _ := strings.Cut(p, "/")
		name := fmt.Sprintf("sandboxd-%s-%s-%s", *version, goos, goarch)
		exe := "sandboxd"
		if goos == "windows" {
			exe += ".exe"
		}
		stage := filepath.Join(work, name)
		fmt.Printf("build  %s\n", p)
		if err := b.build("./cmd/sandboxd", goos, goarch, filepath.Join(stage, exe), true, overlayFile); err != nil {
			return err
		}
		files := []archiveFile{{name + "/" + exe, filepath.Join(stage, exe), 0o755}}
		for _, d := range docs {
			files = append(files, archiveFile{name + "/" + d, filepath.Join(root, d), 0o644})
		}
		archive := name + ".tar.gz"
		write := writeTarGz
		if goos == "windows" {
			archive, write = name+".zip", writeZip
		}
		sum, err := writeArchive(filepath.Join(*out, archive), files, mtime, write)
		if err != nil {
			return err
		}
		sums = append(sums, sum+"  "+archive)
		if *image && goos == "linux" && goarch == runtime.GOARCH {
			if err := buildImage(root, stage, *version); err != nil {
				return err
			}
		}
	}
	// By archive name, as sha256sum writes them.
	slices.SortFunc(sums, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	if err := os.WriteFile(filepath.Join(*out, "SHA256SUMS"), []byte(strings.Join(sums, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %d archives and SHA256SUMS to %s (version %s, commit %s)\n", len(sums), *out, *version, commit)
	return nil
}

// builder runs reproducible builds of cmd/sandboxd.
type builder struct {
	root, version, commit string
}

// build compiles sandboxd for goos/goarch to out, with the embedded agents
// (through overlay) if embed.
func (b builder) build(pkg, goos, goarch, out string, embed bool, overlay string) error {
	args := []string{"build", "-trimpath", "-buildvcs=false",
		"-ldflags", fmt.Sprintf("-s -w -buildid= -X main.version=%s -X main.commit=%s", b.version, b.commit),
		"-o", out}
	if embed {
		args = append(args, "-tags", "embedagents", "-overlay", overlay)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = b.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s/%s: %w", goos, goarch, err)
	}
	return nil
}

// archiveFile is one entry of an archive: its name inside, its source and mode.
type archiveFile struct {
	name, src string
	mode      int64
}

// writeArchive writes an archive with write and returns its SHA-256.
func writeArchive(path string, files []archiveFile, mtime time.Time, write func(io.Writer, []archiveFile, time.Time) error) (string, error) {
	var buf bytes.Buffer
	if err := write(&buf, files, mtime); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// writeTarGz writes a gzipped tar whose bytes depend only on the files'
// contents, names, modes and mtime: no owner names, no gzip timestamp.
func writeTarGz(w io.Writer, files []archiveFile, mtime time.Time) error {
	gz, _ := gzip.NewWriterLevel(w, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(data)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return errors.Join(tw.Close(), gz.Close())
}

// writeZip writes a zip as writeTarGz writes a tar.
func writeZip(w io.Writer, files []archiveFile, mtime time.Time) error {
	zw := zip.NewWriter(w)
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		hdr := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: mtime}
		hdr.SetMode(os.FileMode(f.mode))
		fw, err := zw.CreateHeader(hdr)
		if err != nil {
			return err
		}
		if _, err := fw.Write(data); err != nil {
			return err
		}
	}
	return zw.Close()
}

// buildImage builds sandboxd:VERSION and sandboxd:latest from the staged
// Linux binary.
func buildImage(root, stage, version string) error {
	fmt.Printf("image  sandboxd:%s\n", version)
	cmd := exec.Command("docker", "build", "-q", "-f", filepath.Join(root, "images", "sandboxd", "Dockerfile"),
		"-t", "sandboxd:"+version, "-t", "sandboxd:latest", stage)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker build: %w", err)
	}
	return nil
}

// git runs a git command in the current directory and returns its output.
func git(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
