//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"
)

// labelPool marks the containers a pool made (idle or claimed).
const labelPool = "opensandbox.io/sandboxd-pool"

// poolFill bounds waiting for a pool to (re)fill.
const poolFill = 2 * time.Minute

// busyboxPoolTOML is a config pool whose spec is exactly busyboxRequest's.
func busyboxPoolTOML(name string, size int) string {
	return fmt.Sprintf(`[[pool]]
name = %q
image = %q
size = %d
entrypoint = ["tail", "-f", "/dev/null"]
resource_limits = { cpu = "1", memory = "512Mi" }
`, name, imageBusybox, size)
}

// lcPool is upstream's PoolResponse.
type lcPool struct {
	Name         string `json:"name"`
	CapacitySpec struct {
		BufferMax int `json:"bufferMax"`
		BufferMin int `json:"bufferMin"`
		PoolMax   int `json:"poolMax"`
		PoolMin   int `json:"poolMin"`
	} `json:"capacitySpec"`
	Status struct {
		Total     int    `json:"total"`
		Allocated int    `json:"allocated"`
		Available int    `json:"available"`
		Revision  string `json:"revision"`
	} `json:"status"`
	CreatedAt string `json:"createdAt"`
}

func getPool(t testing.TB, s *Server, name string) lcPool {
	t.Helper()
	return decodeJSON[lcPool](t, getBody(t, s, "/v1/pools/"+name))
}

// waitPool waits until the pool has n idle sandboxes.
func waitPool(t testing.TB, s *Server, name string, n int) {
	t.Helper()
	waitUntil(t, poolFill, fmt.Sprintf("pool %s to have %d available", name, n), func() bool {
		return getPool(t, s, name).Status.Available == n
	})
}

// poolContainers maps sandbox id to container id for every container of
// the server's instance that pool made, claimed or not.
func poolContainers(t testing.TB, s *Server, pool string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range containersByLabel(t, labelPool, pool) {
		if c.Labels[labelInstance] == s.InstanceID {
			out[c.Labels[labelID]] = c.ID
		}
	}
	return out
}

// idleMembers is poolContainers minus the sandboxes the API shows.
func idleMembers(t testing.TB, s *Server, pool string) []string {
	t.Helper()
	all := poolContainers(t, s, pool)
	for _, sb := range listSandboxes(t, s, "/v1", "pageSize=200").Items {
		delete(all, sb.ID)
	}
	return slices.Sorted(maps.Keys(all))
}

// TestPoolConfigSDK fills a pool from the config file, claims a sandbox from
// it with the TypeScript SDK (extensions.poolRef), and sees it refill.
func TestPoolConfigSDK(t *testing.T) {
	s := startServer(t, withTOML(busyboxPoolTOML("warm", 2)))
	waitPool(t, s, "warm", 2)
	members := idleMembers(t, s, "warm")
	if len(members) != 2 {
		t.Fatalf("pool of 2 has %d idle containers", len(members))
	}
	if l := listSandboxes(t, s, "/v1", ""); len(l.Items) != 0 {
		t.Fatalf("idle pool members are listed: %v", ids(l.Items))
	}
	for _, id := range members {
		doError(t, s, http.MethodGet, sandboxPath(id), nil, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND")
	}

	suite := "pool-" + randomHex(t, 4)
	s.runNode(t, "pool_sdk.test.mjs", map[string]string{"SANDBOXD_POOL": "warm", "SANDBOXD_SUITE": suite})
	claimed := listSandboxes(t, s, "/v1", "metadata=suite%3D"+suite).Items
	if len(claimed) != 1 || !slices.Contains(members, claimed[0].ID) {
		t.Fatalf("the SDK's sandbox %v is not one of the pool's %v", ids(claimed), members)
	}

	waitPool(t, s, "warm", 2)
	if n := len(poolContainers(t, s, "warm")); n != 3 {
		t.Errorf("after a claim and a refill the pool made %d containers, want 3", n)
	}
	if p := getPool(t, s, "warm"); p.Status.Allocated != 1 || p.Status.Total != 3 {
		t.Errorf("pool status %+v, want 1 allocated of 3", p.Status)
	}
	s.doJSON(t, http.MethodDelete, sandboxPath(claimed[0].ID), nil, http.StatusNoContent, nil)
}

// TestPoolAPI creates, uses, resizes and deletes a pool through /v1/pools.
func TestPoolAPI(t *testing.T) {
	s := startServer(t)
	spec := map[string]any{
		"name": "api",
		"template": map[string]any{
			"image":          map[string]any{"uri": imageBusybox},
			"entrypoint":     []string{"tail", "-f", "/dev/null"},
			"resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"},
		},
		"capacitySpec": map[string]int{"bufferMax": 1, "bufferMin": 1, "poolMax": 1, "poolMin": 0},
	}
	var created lcPool
	s.doJSON(t, http.MethodPost, "/v1/pools", spec, http.StatusCreated, &created)
	if created.Name != "api" || created.CapacitySpec.BufferMax != 1 || created.Status.Revision == "" {
		t.Errorf("created pool = %+v", created)
	}
	doError(t, s, http.MethodPost, "/pools", spec, http.StatusConflict, "POOL::ALREADY_EXISTS")
	waitPool(t, s, "api", 1)

	// A create without poolRef that asks for exactly the pool's spec is
	// served from it.
	members := idleMembers(t, s, "api")
	plain := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	if !slices.Contains(members, plain.ID) {
		t.Errorf("a create matching the pool's spec got %s, not the idle %v", plain.ID, members)
	}
	if got := runCommand(t, s, plain.ID, "echo hi"); got != "hi" {
		t.Errorf("command in a pooled sandbox printed %q", got)
	}

	waitPool(t, s, "api", 1)
	members = idleMembers(t, s, "api")
	byRef := createSandbox(t, s, "/v1/sandboxes", map[string]any{
		"extensions": map[string]string{"poolRef": "api"}, "timeout": 600, "metadata": map[string]string{"via": "ref"},
	})
	if !slices.Contains(members, byRef.ID) {
		t.Errorf("a poolRef create got %s, not the idle %v", byRef.ID, members)
	}
	if got := getSandbox(t, s, "/v1", byRef.ID); got.Metadata["via"] != "ref" || got.ExpiresAt == "" || got.Status.State != "Running" {
		t.Errorf("sandbox from poolRef = %+v", got)
	}
	claimed := []string{plain.ID, byRef.ID}
	slices.Sort(claimed)
	listed := ids(listSandboxes(t, s, "/v1", "").Items)
	slices.Sort(listed)
	if !slices.Equal(listed, claimed) {
		t.Errorf("list = %v, want only the claimed %v", listed, claimed)
	}

	resize := func(n int) {
		t.Helper()
		var p lcPool
		s.doJSON(t, http.MethodPut, "/v1/pools/api", map[string]any{
			"capacitySpec": map[string]int{"bufferMax": n, "bufferMin": 0, "poolMax": n, "poolMin": 0},
		}, http.StatusOK, &p)
		if p.CapacitySpec.BufferMax != n {
			t.Errorf("resized pool = %+v", p)
		}
	}
	resize(3)
	waitPool(t, s, "api", 3)
	resize(1)
	if idle := idleMembers(t, s, "api"); len(idle) != 1 {
		t.Errorf("after shrinking to 1: %d idle containers", len(idle))
	}

	s.doJSON(t, http.MethodDelete, "/v1/pools/api", nil, http.StatusNoContent, nil)
	left := slices.Sorted(maps.Keys(poolContainers(t, s, "api")))
	if !slices.Equal(left, claimed) {
		t.Errorf("after deleting the pool its containers are %v, want only the claimed %v", left, claimed)
	}
	doError(t, s, http.MethodGet, "/v1/pools/api", nil, http.StatusNotFound, "POOL::NOT_FOUND")
	doError(t, s, http.MethodPost, "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "api"}, "timeout": 600},
		http.StatusBadRequest, "SANDBOX::UNSUPPORTED_POOL_REF")
	for _, id := range claimed {
		getSandbox(t, s, "/v1", id) // claimed sandboxes outlive their pool
	}
}

// TestPoolRestart checks that idle members survive a crash of the server
// and are adopted, not recreated.
func TestPoolRestart(t *testing.T) {
	s := startServer(t, withTOML(busyboxPoolTOML("warm", 2)))
	waitPool(t, s, "warm", 2)
	before := poolContainers(t, s, "warm")
	s.Kill9()
	s.Restart()
	waitPool(t, s, "warm", 2)
	if after := poolContainers(t, s, "warm"); !maps.Equal(after, before) {
		t.Errorf("after a restart the pool's containers are %v, want the adopted %v", after, before)
	}
	if l := listSandboxes(t, s, "/v1", ""); len(l.Items) != 0 {
		t.Errorf("adopted members are listed: %v", ids(l.Items))
	}
}
