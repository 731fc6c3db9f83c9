//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// dockerTimeout bounds every Docker call made by the helpers below.
const dockerTimeout = 2 * time.Minute

// dockerClient connects to the same dockerd as sandboxd (DOCKER_HOST or the
// default socket). The client is closed when the test ends.
func dockerClient(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// containersByLabel lists all containers, running or not, whose label key has
// the given value.
func containersByLabel(t testing.TB, key, value string) []container.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	list, err := dockerClient(t).ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", key+"="+value)),
	})
	if err != nil {
		t.Fatalf("list containers with label %s=%s: %v", key, value, err)
	}
	return list
}

// sandboxContainer inspects the one container of a sandbox; the test fails if
// there is none or more than one.
func sandboxContainer(t testing.TB, sandboxID string) container.InspectResponse {
	t.Helper()
	list := containersByLabel(t, labelID, sandboxID)
	if len(list) != 1 {
		t.Fatalf("sandbox %s: want 1 container labelled %s, found %d", sandboxID, labelID, len(list))
	}
	return inspectContainer(t, list[0].ID)
}

// inspectContainer returns Docker's view of a container.
func inspectContainer(t testing.TB, id string) container.InspectResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	info, err := dockerClient(t).ContainerInspect(ctx, id)
	if err != nil {
		t.Fatalf("inspect container %s: %v", id, err)
	}
	return info
}

// removeInstanceContainers force-removes every container that a sandboxd
// instance created, so that no test leaks containers.
func removeInstanceContainers(t testing.TB, instanceID string) {
	t.Helper()
	c := dockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	list, err := c.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", labelInstance+"="+instanceID)),
	})
	if err != nil {
		t.Errorf("list containers of instance %s: %v", instanceID, err)
		return
	}
	for _, ctr := range list {
		err := c.ContainerRemove(ctx, ctr.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove container %s of instance %s: %v", ctr.ID, instanceID, err)
		}
	}
}
