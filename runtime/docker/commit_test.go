package docker

import (
	"maps"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/container"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestBlankedConfig: what a commit is given keeps the source image's
// values and blanks every value the sandbox's create added, so that the
// engine's merge of the container's configuration adds none.
func TestBlankedConfig(t *testing.T) {
	base := dockerspec.DockerOCIImageConfig{ImageConfig: ocispec.ImageConfig{
		Env:    []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Labels: map[string]string{"org.image": "yes"},
		Cmd:    []string{"sh"},
	}}
	c := &container.Config{
		Env:        []string{"PATH=/custom", "LANG=C.UTF-8", "SECRET=hunter2", "TOKEN=a=b"},
		Labels:     map[string]string{"org.image": "yes", "opensandbox.io/id": "x", "opensandbox.io/pool": "p"},
		Entrypoint: []string{"python", "app.py"},
		User:       "1000",
	}
	got := blankedConfig(base, c)
	if want := []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "SECRET=", "TOKEN="}; !slices.Equal(got.Env, want) {
		t.Errorf("env %q, want %q", got.Env, want)
	}
	if want := map[string]string{"org.image": "yes", "opensandbox.io/id": "", "opensandbox.io/pool": ""}; !maps.Equal(got.Labels, want) {
		t.Errorf("labels %v, want %v", got.Labels, want)
	}
	if len(got.Entrypoint) != 0 || !slices.Equal(got.Cmd, []string{"sh"}) || got.User != "" {
		t.Errorf("entrypoint %q cmd %q user %q, want the image's (none, [sh], none)", got.Entrypoint, got.Cmd, got.User)
	}
	if base.Env[0] != "PATH=/usr/bin:/bin" || len(base.Labels) != 1 {
		t.Errorf("the source image's configuration was changed: %+v", base)
	}
}
