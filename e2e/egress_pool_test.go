//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestEgressPool: a sandbox taken from a pool with a networkPolicy is
// policed from its first command (no retry below): the denied name is
// NXDOMAIN and its address unreachable, the allowed name answers. Its
// policy is read and changed on port 18080 like any sandbox's, and a new
// policy for the pool replaces its idle members.
func TestEgressPool(t *testing.T) {
	w := newEgressWorld(t)
	s := startServer(t, withTOML(fmt.Sprintf("[docker]\nnetwork_mode = %q\n[egress]\ndns_upstream = [%q]\n", w.net, w.dns)))
	removeInstanceHelpersAtEnd(t, s)
	allowOnly := func(name string) map[string]any {
		return map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": name}}}
	}
	type policy struct {
		DefaultAction string
		Egress        []struct{ Action, Target string }
	}
	var created struct{ NetworkPolicy *policy }
	s.doJSON(t, http.MethodPost, "/v1/pools", map[string]any{
		"name":          "policed",
		"template":      map[string]any{"image": map[string]any{"uri": imageBusybox}, "entrypoint": []string{"tail", "-f", "/dev/null"}},
		"capacitySpec":  map[string]int{"bufferMax": 1, "bufferMin": 1, "poolMax": 1, "poolMin": 0},
		"networkPolicy": allowOnly(w.allowedName),
	}, http.StatusCreated, &created)
	if p := created.NetworkPolicy; p == nil || p.DefaultAction != "deny" || len(p.Egress) != 1 || p.Egress[0].Target != w.allowedName {
		t.Errorf("created pool shows policy %+v", p)
	}
	waitPool(t, s, "policed", 1)
	members := idleMembers(t, s, "policed")
	for _, id := range members {
		if n := len(containersByLabel(t, labelEgressFor, id)); n != 1 {
			t.Fatalf("idle member %s has %d egress helpers, want 1", id, n)
		}
	}

	take := func() *execdBox {
		t.Helper()
		b := newExecdBox(t, s, map[string]any{"extensions": map[string]string{"poolRef": "policed"}, "timeout": 600})
		if !slices.Contains(members, b.ID) {
			t.Fatalf("the poolRef create got %s, not the idle %v", b.ID, members)
		}
		return b
	}
	b := take()
	if out := lookup(t, b, w.deniedName, ""); !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("taken from the pool: the denied name is not NXDOMAIN: %s", out)
	}
	if reach(t, b, w.denied) {
		t.Errorf("taken from the pool: the denied name's address is reachable")
	}
	if !reach(t, b, w.allowedName) {
		t.Errorf("taken from the pool: the allowed name is unreachable")
	}

	var got struct {
		Mode   string
		Policy policy
	}
	s.doJSON(t, http.MethodGet, egressPath(b.ID, "/policy"), nil, http.StatusOK, &got)
	if got.Mode != "enforcing" || len(got.Policy.Egress) != 1 || got.Policy.Egress[0].Target != w.allowedName {
		t.Errorf("GET /policy of a sandbox taken from the pool = %+v", got)
	}
	s.doJSON(t, http.MethodPatch, egressPath(b.ID, "/policy"), []map[string]string{{"action": "allow", "target": w.deniedName}}, http.StatusOK, nil)
	if !reach(t, b, w.deniedName) {
		t.Errorf("after PATCH: the newly allowed name is unreachable")
	}

	// A new policy for the pool: the idle member made under the old one
	// goes, helper and all; the next sandbox taken has the new one.
	waitPool(t, s, "policed", 1)
	old := idleMembers(t, s, "policed")
	var updated struct{ NetworkPolicy *policy }
	s.doJSON(t, http.MethodPut, "/v1/pools/policed", map[string]any{
		"capacitySpec":  map[string]int{"bufferMax": 1, "bufferMin": 1, "poolMax": 1, "poolMin": 0},
		"networkPolicy": allowOnly(w.deniedName),
	}, http.StatusOK, &updated)
	if p := updated.NetworkPolicy; p == nil || len(p.Egress) != 1 || p.Egress[0].Target != w.deniedName {
		t.Errorf("updated pool shows policy %+v", p)
	}
	for _, id := range old {
		if n := len(containersByLabel(t, labelEgressFor, id)); n != 0 {
			t.Errorf("idle member %s of the old policy kept %d helper(s)", id, n)
		}
	}
	waitPool(t, s, "policed", 1)
	members = idleMembers(t, s, "policed")
	if slices.ContainsFunc(members, func(id string) bool { return slices.Contains(old, id) }) {
		t.Fatalf("idle members %v still include the old %v", members, old)
	}
	b = take()
	if out := lookup(t, b, w.allowedName, ""); !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("under the pool's new policy: the formerly allowed name is not NXDOMAIN: %s", out)
	}
	if !reach(t, b, w.deniedName) {
		t.Errorf("under the pool's new policy: the newly allowed name is unreachable")
	}
}

// TestEgressPoolRestart: the idle member of a [[pool]] with a
// network_policy survives a kill -9 of sandboxd and is adopted with its
// helper, whose daemon sandboxd starts again: taken after the restart, it
// is policed from its first command.
func TestEgressPoolRestart(t *testing.T) {
	w := newEgressWorld(t)
	s := startServer(t,
		withTOML(fmt.Sprintf("[docker]\nnetwork_mode = %q\n[egress]\ndns_upstream = [%q]\n", w.net, w.dns)),
		withTOML(busyboxPoolTOML("warm", 1)+fmt.Sprintf("network_policy = { default_action = \"deny\", egress = [{ action = \"allow\", target = %q }] }\n", w.allowedName)))
	removeInstanceHelpersAtEnd(t, s)
	waitPool(t, s, "warm", 1)
	before := idleMembers(t, s, "warm")
	helpers := containersByLabel(t, labelEgressFor, before[0])
	if len(helpers) != 1 {
		t.Fatalf("idle member %s has %d egress helpers, want 1", before[0], len(helpers))
	}
	s.Kill9()
	s.Restart()
	waitPool(t, s, "warm", 1)
	if after := idleMembers(t, s, "warm"); !slices.Equal(after, before) {
		t.Fatalf("after a restart the idle members are %v, want the adopted %v", after, before)
	}
	if now := containersByLabel(t, labelEgressFor, before[0]); len(now) != 1 || now[0].ID != helpers[0].ID {
		t.Errorf("the adopted member's helper was not kept: %v", now)
	}
	b := newExecdBox(t, s, busyboxWith(map[string]any{"extensions": map[string]string{"poolRef": "warm"}}))
	if b.ID != before[0] {
		t.Fatalf("the poolRef create got %s, not the adopted %s", b.ID, before[0])
	}
	if out := lookup(t, b, w.deniedName, ""); !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("adopted and taken: the denied name is not NXDOMAIN: %s", out)
	}
	if !reach(t, b, w.allowedName) {
		t.Errorf("adopted and taken: the allowed name is unreachable")
	}
	if reach(t, b, w.denied) {
		t.Errorf("adopted and taken: the denied name's address is reachable")
	}
}
