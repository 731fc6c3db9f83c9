package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Commit implements runtime.Images. Docker pauses the container while it
// commits, so the commit is ordered like a pause; the pause lasts as long
// as the engine takes to write the container's changes into a layer.
//
// docker commit writes the container's configuration into the image (its
// create-time env with every secret, its labels, its command), and a
// commit's own configuration can only add to it. So the commit blanks the
// values the create added, which holds even if sandboxd dies right after;
// then the image is replaced by one of the same layers whose configuration
// is the source image's alone, loaded without re-sending any layer. An
// engine that refuses that load (one that needs every layer's content)
// keeps the blanked image: no value, but the keys of the create's env and
// labels.
func (d *Docker) Commit(ctx context.Context, id, ref string) error {
	cctx, cancel := d.short(ctx)
	info, err := d.cli.ContainerInspect(cctx, id)
	cancel()
	if err != nil {
		return d.wrapContainer(ctx, err, id, "inspect container %s", id)
	}
	cctx, cancel = d.call(ctx)
	base, err := d.cli.ImageInspect(cctx, info.Image)
	cancel()
	if err != nil {
		return wrap(err, "inspect image of container %s", id)
	}
	var baseConf dockerspec.DockerOCIImageConfig
	if base.Config != nil {
		baseConf = *base.Config
	}

	wctx, cancel := d.short(ctx)
	end, err := d.gates.exclusive(wctx, id, d.gates.grace)
	cancel()
	if err != nil {
		return d.wrapContainer(ctx, err, id, "commit container %s", id)
	}
	start := time.Now()
	resp, err := d.cli.ContainerCommit(ctx, id, container.CommitOptions{Reference: ref, Pause: true, Config: blankedConfig(baseConf, info.Config)})
	paused := time.Since(start)
	end()
	if err != nil {
		return wrap(err, "commit container %s", id)
	}
	d.log.Info("container committed", "container", id, "image", ref, "paused_ms", paused.Milliseconds())

	cctx, cancel = d.call(ctx)
	committed, err := d.cli.ImageInspect(cctx, resp.ID)
	cancel()
	if err != nil {
		return wrap(err, "inspect committed image %s", ref)
	}
	if err := d.loadConfig(ctx, ref, cleanImage(base, baseConf, committed.RootFS.Layers)); err != nil {
		d.log.Warn("snapshot image keeps the names (not the values) of its sandbox's create-time env and labels", "image", ref, "err", err)
		return nil
	}
	cctx, cancel = d.call(ctx)
	defer cancel()
	if _, err := d.cli.ImageRemove(cctx, resp.ID, image.RemoveOptions{}); err != nil {
		d.log.Warn("remove the blanked commit", "image", resp.ID, "err", err)
	}
	return nil
}

// blankedConfig is what a commit is given so that the image keeps no
// value the sandbox's create added: the source image's env, labels and
// command, and every other env variable or label of the container
// present with an empty value (the engine adds the container's own for any
// key not given).
func blankedConfig(base dockerspec.DockerOCIImageConfig, c *container.Config) *container.Config {
	out := &container.Config{
		Env: slices.Clone(base.Env), Labels: maps.Clone(base.Labels),
		Entrypoint: base.Entrypoint, Cmd: base.Cmd, User: base.User, WorkingDir: base.WorkingDir,
	}
	if c == nil {
		return out
	}
	has := map[string]bool{}
	for _, kv := range base.Env {
		k, _, _ := strings.Cut(kv, "=")
		has[k] = true
	}
	for _, kv := range c.Env {
		if k, _, _ := strings.Cut(kv, "="); !has[k] {
			has[k] = true
			out.Env = append(out.Env, k+"=")
		}
	}
	for k := range c.Labels {
		if _, ok := base.Labels[k]; !ok {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = ""
		}
	}
	return out
}

// cleanImage is the image configuration of a snapshot: the source image's
// platform and configuration over the committed layers.
func cleanImage(base image.InspectResponse, conf dockerspec.DockerOCIImageConfig, layers []string) dockerspec.DockerOCIImage {
	now := time.Now().UTC()
	img := dockerspec.DockerOCIImage{
		Image: ocispec.Image{
			Created:  &now,
			Platform: ocispec.Platform{Architecture: base.Architecture, OS: base.Os, Variant: base.Variant, OSVersion: base.OsVersion},
			RootFS:   ocispec.RootFS{Type: "layers"},
		},
		Config: conf,
	}
	for _, l := range layers {
		img.RootFS.DiffIDs = append(img.RootFS.DiffIDs, digest.Digest(l))
	}
	return img
}

// loadConfig tags as ref an image of config img, whose layers the engine
// already has: the archive holds the configuration and a manifest that
// names the layers, not their content (the engine reuses a layer it has).
func (d *Docker) loadConfig(ctx context.Context, ref string, img dockerspec.DockerOCIImage) error {
	conf, err := json.Marshal(img)
	if err != nil {
		return err
	}
	layers := make([]string, len(img.RootFS.DiffIDs))
	for i := range layers {
		layers[i] = fmt.Sprintf("%d/layer.tar", i)
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{ref}, "Layers": layers}})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{{"config.json", conf}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	resp, err := d.cli.ImageLoad(cctx, &buf)
	if err != nil {
		return wrap(err, "load configuration of %s", ref)
	}
	defer resp.Body.Close()
	return readLoadResult(resp.Body)
}

// readLoadResult returns the error a load's message stream ends with.
func readLoadResult(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		err := dec.Decode(&msg)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read load result: %w", err)
		}
		if msg.ErrorDetail != nil && msg.ErrorDetail.Message != "" {
			return fmt.Errorf("load: %s", msg.ErrorDetail.Message)
		}
		if msg.Error != "" {
			return fmt.Errorf("load: %s", msg.Error)
		}
	}
}
