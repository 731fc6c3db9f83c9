//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
)

// Labels of egress helpers: the sandbox they serve (upstream's sidecar
// label) and the sandboxd instance that made them.
const (
	labelEgressFor      = "opensandbox.io/egress-sidecar-for"
	labelEgressInstance = "opensandbox.io/sandboxd-egress-instance"
)

// egressWorld is the egress tests' "internet": a Docker network of the
// test's own in 198.18.0.0/15 (the benchmarking range, outside what a
// policy guards) with egressworld servers (authoritative DNS for
// allowed.test and denied.test, HTTP on 80, a listener on 853).
type egressWorld struct {
	net                     string
	dns, allowed, denied    string // server addresses; dns is also allowed.test's
	allowedName, deniedName string
}

func newEgressWorld(t *testing.T) *egressWorld {
	t.Helper()
	w := &egressWorld{allowedName: "allowed.test", deniedName: "denied.test"}
	var prefix string
	w.net = worldNetwork(t, func() string {
		n, _ := rand.Int(rand.Reader, big.NewInt(510))
		prefix = fmt.Sprintf("198.%d.%d.", 18+n.Int64()/255, n.Int64()%255)
		return prefix + "0/24"
	})
	w.dns, w.allowed, w.denied = prefix+"10", prefix+"10", prefix+"11"
	worldServers(t, w.net, "allowed.test="+w.allowed+",denied.test="+w.denied, w.allowed, w.denied)
	return w
}

// worldNetwork creates a bridge network on the subnets from next (an IPv4
// one, and an IPv6 one after a space if any; tried a few times against
// collisions) and removes it when the test ends.
func worldNetwork(t *testing.T, next func() string) string {
	t.Helper()
	name := "sandboxd-e2e-egress-" + randomHex(t, 4)
	for attempt := 0; ; attempt++ {
		var ipam []network.IPAMConfig
		for _, subnet := range strings.Fields(next()) {
			ipam = append(ipam, network.IPAMConfig{Subnet: subnet})
		}
		v6 := len(ipam) > 1
		_, err := dockerClient(t).NetworkCreate(context.Background(), name, network.CreateOptions{
			Driver: "bridge", EnableIPv6: &v6, IPAM: &network.IPAM{Config: ipam},
		})
		if err == nil {
			break
		}
		if attempt == 5 {
			t.Fatalf("create the test network: %v", err)
		}
	}
	t.Cleanup(func() { _ = dockerClient(t).NetworkRemove(context.Background(), name) })
	return name
}

// worldServers runs an egressworld server at each ip of net ("v4", or
// "v4 v6" for one with an IPv6 address too) and returns their container
// names (which Docker's resolver answers on net).
func worldServers(t *testing.T, net, zone string, ips ...string) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "egressworld")
	build := exec.Command("go", "build", "-o", bin, "./e2e/egressworld")
	build.Dir = repoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build egressworld: %v\n%s", err, out)
	}
	c := dockerClient(t)
	ctx := context.Background()
	var names []string
	for _, ip := range ips {
		name := "sandboxd-e2e-egressworld-" + randomHex(t, 4)
		names = append(names, name)
		resp, err := c.ContainerCreate(ctx, &container.Config{
			Image: imageBusybox, Entrypoint: []string{"/egressworld", "-zone", zone, "-tag", strings.Fields(ip)[0]},
		}, &container.HostConfig{Binds: []string{bin + ":/egressworld:ro"}}, &network.NetworkingConfig{
			EndpointsConfig: map[string]*network.EndpointSettings{net: {IPAMConfig: ipamOf(ip)}},
		}, nil, name)
		if err != nil {
			t.Fatalf("create world server %s: %v", ip, err)
		}
		t.Cleanup(func() {
			_ = dockerClient(t).ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true})
		})
		if err := c.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
			t.Fatalf("start world server %s: %v", ip, err)
		}
	}
	return names
}

func ipamOf(ips string) *network.EndpointIPAMConfig {
	f := strings.Fields(ips)
	c := &network.EndpointIPAMConfig{IPv4Address: f[0]}
	if len(f) > 1 {
		c.IPv6Address = f[1]
	}
	return c
}

// reach reports whether the sandbox gets the HTTP answer of host's server.
func reach(t *testing.T, b *execdBox, host string) bool {
	t.Helper()
	out, _ := b.secShell(t, `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 `+host+` 80 2>&1`)
	return strings.Contains(out, "hello from")
}

// lookup runs nslookup of name (at server, if not empty) in the sandbox.
func lookup(t *testing.T, b *execdBox, name, server string) string {
	t.Helper()
	out, _ := b.secShell(t, "nslookup "+name+" "+server+" 2>&1")
	return out
}

// policedBox is newExecdBox with a networkPolicy.
func policedBox(t *testing.T, s *Server, policy map[string]any) *execdBox {
	t.Helper()
	return newExecdBox(t, s, busyboxWith(map[string]any{"networkPolicy": policy}))
}

// removeInstanceHelpersAtEnd removes the egress helpers of a server's
// instance when the test ends, should sandboxd not have.
func removeInstanceHelpersAtEnd(t *testing.T, s *Server) {
	t.Cleanup(func() {
		for _, h := range containersByLabel(t, labelEgressInstance, s.InstanceID) {
			_ = dockerClient(t).ContainerRemove(context.Background(), h.ID, container.RemoveOptions{Force: true})
		}
	})
}

// clientHello is the first flight of a TLS client asking for name.
func clientHello(t *testing.T, name string) []byte {
	t.Helper()
	var rec helloRecorder
	// The handshake fails at the first read: the hello is written by then.
	_ = tls.Client(&rec, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
	if rec.Len() == 0 {
		t.Fatal("no ClientHello written")
	}
	return rec.Bytes()
}

// helloRecorder is a connection that keeps what is written and reads EOF.
type helloRecorder struct {
	net.Conn
	bytes.Buffer
}

func (r *helloRecorder) Write(b []byte) (int, error)      { return r.Buffer.Write(b) }
func (r *helloRecorder) Read([]byte) (int, error)         { return 0, io.EOF }
func (r *helloRecorder) Close() error                     { return nil }
func (r *helloRecorder) SetDeadline(time.Time) error      { return nil }
func (r *helloRecorder) SetWriteDeadline(time.Time) error { return nil }

func egressPath(id, rest string) string { return "/sandboxes/" + id + "/proxy/18080" + rest }

// egressDaemonPID returns the host pid of the egress daemon of a sandbox.
func egressDaemonPID(t *testing.T, id string) int {
	t.Helper()
	helpers := containersByLabel(t, labelEgressFor, id)
	if len(helpers) != 1 {
		t.Fatalf("sandbox %s: %d egress helpers, want 1", id, len(helpers))
	}
	top, err := dockerClient(t).ContainerTop(context.Background(), helpers[0].ID, []string{"-eo", "pid,args"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range top.Processes {
		if strings.Contains(p[1], "egress serve") {
			pid, _ := strconv.Atoi(p[0])
			return pid
		}
	}
	t.Fatalf("no egress daemon in the helper of %s: %v", id, top.Processes)
	return 0
}

// TestEgressPolicy: names, addresses, other resolvers, DoT and the metadata
// address under a policy, changes at run time, and what happens when the
// daemon, sandboxd or the helper is killed.
func TestEgressPolicy(t *testing.T) {
	w := newEgressWorld(t)
	s := startServer(t, withTOML(fmt.Sprintf("[docker]\nnetwork_mode = %q\n[egress]\ndns_upstream = [%q]\n", w.net, w.dns)))
	removeInstanceHelpersAtEnd(t, s)
	control := newExecdBox(t, s, busyboxRequest())
	policy := map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "allowed.test"}}}
	pol := policedBox(t, s, policy)
	open := policedBox(t, s, map[string]any{"defaultAction": "allow"})

	// Controls: without a policy every server and resolver answers.
	for _, host := range []string{w.allowed, w.denied} {
		if !reach(t, control, host) {
			t.Fatalf("control: the unpoliced sandbox cannot reach %s", host)
		}
	}
	if out := lookup(t, control, w.deniedName, w.denied); !strings.Contains(out, w.denied) {
		t.Fatalf("control: the other resolver does not answer: %s", out)
	}
	if out, _ := control.secShell(t, "nc -w 5 "+w.dns+" 853 </dev/null"); !strings.Contains(out, "hello from") {
		t.Fatalf("control: port 853 does not answer: %q", out)
	}

	if out := lookup(t, pol, w.allowedName, ""); !strings.Contains(out, w.allowed) {
		t.Errorf("allowed name does not resolve: %s", out)
	}
	if !reach(t, pol, w.allowedName) {
		t.Errorf("allowed name is unreachable")
	}
	deniedDNS := `sandboxd_egress_dns_total{sandbox_id="` + pol.ID + `",verdict="denied"}`
	before, ok := scrapeMetrics(t, s)[deniedDNS]
	if !ok {
		t.Errorf("/metrics has no %s", deniedDNS)
	}
	if out := lookup(t, pol, w.deniedName, ""); !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("denied name is not NXDOMAIN: %s", out)
	}
	if after := scrapeMetrics(t, s)[deniedDNS]; after <= before {
		t.Errorf("%s went from %v to %v after a denied lookup", deniedDNS, before, after)
	}
	waitUntil(t, secWait, "the denied lookup in sandboxd's log, with the sandbox id", func() bool {
		log, _ := os.ReadFile(s.LogPath)
		return slices.ContainsFunc(strings.Split(string(log), "\n"), func(l string) bool {
			return strings.Contains(l, "denied lookup") && strings.Contains(l, pol.ID) && strings.Contains(l, w.deniedName)
		})
	})
	if reach(t, pol, w.denied) {
		t.Errorf("the denied name's address is reachable by IP")
	}
	if out := lookup(t, pol, w.deniedName, w.denied); strings.Contains(out, "Address: "+w.denied) {
		t.Errorf("DNS to another resolver got through: %s", out)
	}
	if out, _ := pol.secShell(t, "nc -w 5 "+w.dns+" 853 </dev/null"); strings.Contains(out, "hello from") {
		t.Errorf("DoT port 853 is reachable")
	}
	if !reach(t, open, w.denied) {
		t.Errorf("defaultAction allow: an address is unreachable")
	}
	// A denied name is refused on an address that is open: the Host of
	// port 80 (and the SNI of 443) is read before connecting.
	s.doJSON(t, http.MethodPatch, egressPath(open.ID, "/policy"), []map[string]string{{"action": "deny", "target": w.deniedName}}, http.StatusOK, nil)
	askFor := func(name string) bool {
		out, _ := open.secShell(t, `printf 'GET / HTTP/1.0\r\nHost: `+name+`\r\n\r\n' | nc -w 5 `+w.denied+` 80 2>&1`)
		return strings.Contains(out, "hello from")
	}
	if !askFor("other.test") {
		t.Errorf("defaultAction allow: a request for an unlisted name is refused")
	}
	if askFor(w.deniedName) {
		t.Errorf("a request for the denied name got through on an open address")
	}
	// The same for the SNI of a TLS ClientHello on 443: the server's
	// handshake record (16 03) comes back only for the unlisted name.
	helloFor := func(name string) bool {
		out, _ := open.secShell(t, "echo "+base64.StdEncoding.EncodeToString(clientHello(t, name))+
			" | base64 -d >/tmp/hello && nc -w 5 "+w.denied+" 443 </tmp/hello | od -An -tx1 | head -1")
		return strings.HasPrefix(strings.TrimSpace(out), "16 03")
	}
	if !helloFor("other.test") {
		t.Errorf("defaultAction allow: a TLS handshake for an unlisted name is refused")
	}
	if helloFor(w.deniedName) {
		t.Errorf("a TLS handshake naming the denied name got through on an open address")
	}

	var got struct {
		Status, Mode, EnforcementMode string
		Policy                        struct {
			DefaultAction string
			Egress        []struct{ Action, Target string }
		}
	}
	s.doJSON(t, http.MethodGet, egressPath(pol.ID, "/policy"), nil, http.StatusOK, &got)
	if got.Status != "ok" || got.Mode != "enforcing" || got.EnforcementMode != "dns+nft" || got.Policy.DefaultAction != "deny" ||
		len(got.Policy.Egress) != 1 || got.Policy.Egress[0].Target != "allowed.test" {
		t.Errorf("GET /policy = %+v", got)
	}

	// PATCH takes effect when it returns: no retry below.
	s.doJSON(t, http.MethodPatch, egressPath(pol.ID, "/policy"),
		[]map[string]string{{"action": "allow", "target": "denied.test"}, {"action": "deny", "target": "allowed.test"}}, http.StatusOK, nil)
	if !reach(t, pol, w.deniedName) {
		t.Errorf("after PATCH: the newly allowed name is unreachable")
	}
	if reach(t, pol, w.allowed) {
		t.Errorf("after PATCH: the newly denied name's address is still reachable")
	}
	if out := lookup(t, pol, w.allowedName, ""); !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("after PATCH: the newly denied name resolves: %s", out)
	}
	s.doJSON(t, http.MethodPut, egressPath(pol.ID, "/policy"), policy, http.StatusOK, nil)

	// kill -9 of the daemon: the firewall stays, sandboxd restarts it.
	old := egressDaemonPID(t, pol.ID)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, secWait, "the egress daemon to be restarted", func() bool {
		if reach(t, pol, w.denied) {
			t.Fatalf("the denied address became reachable after the daemon was killed")
		}
		return strings.Contains(lookup(t, pol, w.allowedName, ""), w.allowed)
	})

	// kill -9 of sandboxd: the policy is re-applied by the next one.
	s.Kill9()
	s.start()
	waitUntil(t, secWait, "the policy after a restart of sandboxd", func() bool {
		if reach(t, pol, w.denied) {
			t.Fatalf("the denied address became reachable after sandboxd was killed")
		}
		return reach(t, pol, w.allowedName)
	})
	s.doJSON(t, http.MethodGet, egressPath(pol.ID, "/policy"), nil, http.StatusOK, &got)
	if len(got.Policy.Egress) != 1 || got.Policy.Egress[0].Target != "allowed.test" {
		t.Errorf("policy after a restart of sandboxd = %+v", got.Policy)
	}

	// The helper dies, twice: killed while sandboxd is down, then removed
	// while it runs. The sandbox keeps its namespace and firewall: nothing
	// denied is reachable, nor anything needing the daemon (names, the
	// Host check of port 80), until sandboxd puts a new helper in the same
	// namespace; the sandbox's processes live on.
	pol.run(t, map[string]any{"command": "sleep 100000", "background": true})
	var survivor string
	waitUntil(t, secWait, "the background process to start", func() bool {
		survivor, _ = pol.secShell(t, "pidof sleep")
		return strings.TrimSpace(survivor) != ""
	})
	alive := func() bool {
		out, _ := pol.secShell(t, "kill -0 "+strings.TrimSpace(survivor)+" && echo alive")
		return strings.Contains(out, "alive")
	}
	sandboxStart := sandboxContainer(t, pol.ID).State.StartedAt
	helper := containersByLabel(t, labelEgressFor, pol.ID)[0].ID
	s.Kill9()
	if err := syscall.Kill(inspectContainer(t, helper).State.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, secWait, "the helper to exit", func() bool { return !inspectContainer(t, helper).State.Running })
	// With sandboxd down, the sandbox is reached through Docker.
	sh := func(cmd string) string {
		return dockerExec(t, sandboxContainer(t, pol.ID).ID, "", "sh", "-c", cmd+" 2>&1")
	}
	for _, host := range []string{w.denied, w.allowedName, w.allowed} {
		if out := sh(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 ` + host + ` 80`); strings.Contains(out, "hello from") {
			t.Errorf("the sandbox reaches %s with its helper dead", host)
		}
	}
	if out := sh("nslookup " + w.allowedName); strings.Contains(out, w.allowed) {
		t.Errorf("a name resolves with the helper dead: %s", out)
	}
	if out := sh("ip -o link"); !strings.Contains(out, "eth0") {
		t.Errorf("the sandbox lost its interface with its helper: %s", out)
	}
	s.start()
	recovered := func(what string) {
		t.Helper()
		waitUntil(t, secWait, what, func() bool {
			if reach(t, pol, w.denied) {
				t.Fatalf("%s: the denied address became reachable", what)
			}
			return reach(t, pol, w.allowedName)
		})
	}
	recovered("a new helper after the helper was killed with sandboxd down")
	helpers := containersByLabel(t, labelEgressFor, pol.ID)
	if len(helpers) != 1 || helpers[0].ID == helper {
		t.Fatalf("helpers after recovery: %v", helpers)
	}
	if err := dockerClient(t).ContainerRemove(context.Background(), helpers[0].ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	recovered("a new helper after the helper was removed")
	if out := lookup(t, pol, w.deniedName, ""); !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("after recovery: the denied name is not NXDOMAIN: %s", out)
	}
	if !alive() {
		t.Errorf("the sandbox's background process died with its helper")
	}
	if now := sandboxContainer(t, pol.ID).State.StartedAt; now != sandboxStart {
		t.Errorf("the sandbox container was restarted (started %s, then %s)", sandboxStart, now)
	}
}

// TestEgressMetadataBlocked: the cloud metadata address stays closed even
// under defaultAction allow. The test network is 169.254.169.0/24 itself,
// with a server at 169.254.169.254, as the bridge driver cannot route a
// second subnet. Without [egress] dns_upstream the daemon forwards to
// Docker's embedded resolver, which the sandbox cannot use directly.
func TestEgressMetadataBlocked(t *testing.T) {
	const md = "169.254.169.254"
	nw := worldNetwork(t, func() string { return "169.254.169.0/24" })
	server := worldServers(t, nw, "", md)[0]
	s := startServer(t, withTOML(fmt.Sprintf("[docker]\nnetwork_mode = %q\n", nw)))
	removeInstanceHelpersAtEnd(t, s)
	control := newExecdBox(t, s, busyboxRequest())
	if !reach(t, control, md) {
		t.Fatalf("control: the unpoliced sandbox cannot reach %s", md)
	}
	open := policedBox(t, s, map[string]any{"defaultAction": "allow"})
	if reach(t, open, md) {
		t.Errorf("defaultAction allow: the metadata address is reachable")
	}
	if out := lookup(t, control, server, "127.0.0.11"); !strings.Contains(out, md) {
		t.Fatalf("control: Docker's resolver does not answer: %s", out)
	}
	if out := lookup(t, open, server, ""); !strings.Contains(out, md) {
		t.Errorf("the daemon does not forward to Docker's resolver: %s", out)
	}
	if out := lookup(t, open, server, "127.0.0.11"); strings.Contains(out, md) {
		t.Errorf("the sandbox uses Docker's resolver directly: %s", out)
	}
	// An IP rule opens it: the guard is a default, not a wall.
	s.doJSON(t, http.MethodPatch, egressPath(open.ID, "/policy"), []map[string]string{{"action": "allow", "target": md}}, http.StatusOK, nil)
	if !reach(t, open, md) {
		t.Errorf("an allow rule for %s does not open it", md)
	}
}

// TestEgressPolicyValidation: networkPolicy on create is checked with
// upstream's codes, and the egress API answers upstream's bodies.
func TestEgressPolicyValidation(t *testing.T) {
	// Even when the config grants them, a policed sandbox gets neither
	// NET_ADMIN nor NET_RAW (which could set the daemon's socket marks).
	s := startServer(t, withTOML("[docker]\nadd_capabilities = [\"NET_ADMIN\", \"NET_RAW\"]\n"))
	removeInstanceHelpersAtEnd(t, s)
	for _, c := range []struct {
		policy     string
		wantStatus int
		code       string
	}{
		{`{"egress":[{"target":"a.com"}]}`, http.StatusUnprocessableEntity, ""},
		{`{"egress":[{"action":"allow","target":""}]}`, http.StatusUnprocessableEntity, ""},
		{`{"egress":[{"action":"block","target":"a.com"}]}`, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER"},
		{`{"defaultAction":"block"}`, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER"},
		{`{"egress":[{"action":"allow","target":"http://a.com"}]}`, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER"},
	} {
		req := busyboxRequest()
		req["networkPolicy"] = json.RawMessage(c.policy)
		status, _, body := s.do(t, http.MethodPost, "/v1/sandboxes", req, nil)
		if status != c.wantStatus || !strings.Contains(string(body), c.code) {
			t.Errorf("networkPolicy %s: %d %s, want %d %s", c.policy, status, body, c.wantStatus, c.code)
		}
	}
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny"}}))
	var ep struct {
		Endpoint string
		Headers  map[string]string
	}
	s.doJSON(t, http.MethodGet, sandboxPath(sb.ID, "/endpoints/18080"), nil, http.StatusOK, &ep)
	if !strings.HasSuffix(ep.Endpoint, egressPath(sb.ID, "")) {
		t.Errorf("egress endpoint %q", ep.Endpoint)
	}
	var execd lcEndpoint
	s.doJSON(t, http.MethodGet, sandboxPath(sb.ID, "/endpoints/44772"), nil, http.StatusOK, &execd)
	b := &execdBox{s: s, ID: sb.ID, Headers: execd.Headers}
	p := egressPath(b.ID, "/policy")
	for _, c := range []struct {
		method, body string
		wantStatus   int
		want         string
	}{
		{http.MethodPatch, ``, http.StatusBadRequest, "empty body\n"},
		{http.MethodPatch, `[]`, http.StatusBadRequest, "invalid patch rules: empty array\n"},
		{http.MethodPatch, `{}`, http.StatusBadRequest, "invalid patch rules: "},
		{http.MethodDelete, `["x.com"]`, http.StatusOK, `"reason":"no matching targets found"`},
		{http.MethodPost, ``, http.StatusOK, `"reason":"policy reset to default deny-all"`},
		{http.MethodPatch, `[{"action":"allow","target":"pypi.org"}]`, http.StatusOK, `"mode":"enforcing"`},
		{http.MethodGet, ``, http.StatusOK, `"policy":{"egress":[{"action":"allow","target":"pypi.org"}],"defaultAction":"deny"}`},
		{http.MethodDelete, `["PYPI.org"]`, http.StatusOK, `"mode":"deny_all"`},
		{http.MethodOptions, ``, http.StatusMethodNotAllowed, "method not allowed\n"},
	} {
		status, _, body := s.do(t, c.method, p, c.body, nil)
		if status != c.wantStatus || !strings.Contains(string(body), c.want) {
			t.Errorf("%s /policy %s: %d %q, want %d %q", c.method, c.body, status, body, c.wantStatus, c.want)
		}
	}
	capEff := func(box *execdBox) uint64 {
		out, _ := box.secShell(t, "grep CapEff /proc/self/status")
		v, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(out, "CapEff:")), 16, 64)
		if err != nil {
			t.Fatalf("CapEff %q: %v", out, err)
		}
		return v
	}
	const netAdminRaw = 1<<12 | 1<<13
	if c := capEff(newExecdBox(t, s, busyboxRequest())); c&netAdminRaw != netAdminRaw {
		t.Fatalf("control: an unpoliced sandbox lacks the configured NET_ADMIN and NET_RAW (CapEff %x)", c)
	}
	if c := capEff(b); c&netAdminRaw != 0 {
		t.Errorf("a policed sandbox has NET_ADMIN or NET_RAW (CapEff %x)", c)
	}
	// The 18080 endpoint's headers (the egress token) open the egress API
	// (the execd token does not: TestSecurityEgressCredential).
	status, _, _ := s.do(t, http.MethodGet, p, nil, map[string]string{apiKeyHeader: "", egressAuthHeader: ep.Headers[egressAuthHeader]})
	if status != http.StatusOK {
		t.Errorf("GET /policy with the egress token: %d", status)
	}
	status, _, _ = s.do(t, http.MethodGet, p, nil, map[string]string{apiKeyHeader: ""})
	if status != http.StatusUnauthorized {
		t.Errorf("GET /policy without credentials: %d, want 401", status)
	}
	// Delete removes the helper, labelled as upstream labels its sidecar.
	if n := len(containersByLabel(t, labelEgressFor, b.ID)); n != 1 {
		t.Fatalf("%d egress helpers for a policed sandbox, want 1", n)
	}
	s.doJSON(t, http.MethodDelete, sandboxPath(b.ID), nil, http.StatusNoContent, nil)
	if n := len(containersByLabel(t, labelEgressFor, b.ID)); n != 0 {
		t.Errorf("%d egress helper(s) left after delete", n)
	}
}

// TestEgressTypeScriptSDK runs e2e/ts/egress_sdk.test.mjs: create with a
// networkPolicy, getEgressPolicy, patchEgressRules and deleteEgressRules
// through the official SDK, with and without the server proxy.
func TestEgressTypeScriptSDK(t *testing.T) {
	w := newEgressWorld(t)
	s := startServer(t, withTOML(fmt.Sprintf("[docker]\nnetwork_mode = %q\n[egress]\ndns_upstream = [%q]\n", w.net, w.dns)))
	removeInstanceHelpersAtEnd(t, s)
	s.runNode(t, "egress_sdk.test.mjs", map[string]string{"SANDBOXD_EGRESS_ALLOWED": w.allowedName, "SANDBOXD_EGRESS_DENIED": w.deniedName})
	if left := containersByLabel(t, labelEgressInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("the SDK's kill left %d egress helper(s)", len(left))
	}

}

// TestEgressIPv6: under a policy IPv6 is closed beyond loopback, even to an
// address an IP rule allows and under defaultAction allow, and the
// resolver answers no AAAA: the Host/SNI check reads IPv4 destinations
// only, so IPv6 would get past it.
func TestEgressIPv6(t *testing.T) {
	var prefix, prefix6 string
	nw := worldNetwork(t, func() string {
		n, _ := rand.Int(rand.Reader, big.NewInt(510))
		prefix = fmt.Sprintf("198.%d.%d.", 18+n.Int64()/255, n.Int64()%255)
		prefix6 = fmt.Sprintf("2001:db8:%x::", n.Int64()+1)
		return prefix + "0/24 " + prefix6 + "/64"
	})
	ip4, ip6 := prefix+"10", prefix6+"10"
	worldServers(t, nw, "allowed.test="+ip4+",allowed.test="+ip6, ip4+" "+ip6)
	s := startServer(t, withTOML(fmt.Sprintf("[docker]\nnetwork_mode = %q\n[egress]\ndns_upstream = [%q]\n", nw, ip4)))
	removeInstanceHelpersAtEnd(t, s)
	reach6 := func(b *execdBox) bool {
		out, _ := b.secShell(t, `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 `+ip6+` 80 2>&1`)
		return strings.Contains(out, "hello from")
	}
	control := newExecdBox(t, s, busyboxRequest())
	if !reach6(control) {
		t.Fatalf("control: the unpoliced sandbox cannot reach %s", ip6)
	}
	if out := lookup(t, control, "-type=aaaa allowed.test", ip4); !strings.Contains(out, ip6) {
		t.Fatalf("control: no AAAA answer from the world's server: %s", out)
	}
	pol := policedBox(t, s, map[string]any{"defaultAction": "allow", "egress": []map[string]string{
		{"action": "allow", "target": ip6}, {"action": "allow", "target": "allowed.test"},
	}})
	if reach6(pol) {
		t.Errorf("an IPv6 address is reachable under a policy allowing it")
	}
	if out := lookup(t, pol, "-type=aaaa allowed.test", ""); strings.Contains(out, prefix6) {
		t.Errorf("the resolver gave an AAAA answer: %s", out)
	}
	if !reach(t, pol, "allowed.test") {
		t.Errorf("the allowed name is unreachable over IPv4")
	}
}

// TestEgressIsolation: without [docker] network_mode and [egress]
// dns_upstream, policed sandboxes are on sandboxd's network, where
// inter-container traffic is off: with rules opening every private range,
// one still cannot reach another's server.
func TestEgressIsolation(t *testing.T) {
	s := startServer(t)
	removeInstanceHelpersAtEnd(t, s)
	policy := map[string]any{"defaultAction": "deny", "egress": []map[string]string{
		{"action": "allow", "target": "10.0.0.0/8"}, {"action": "allow", "target": "172.16.0.0/12"}, {"action": "allow", "target": "192.168.0.0/16"},
	}}
	a, b := policedBox(t, s, policy), policedBox(t, s, policy)
	for _, box := range []*execdBox{a, b} {
		if nw := sandboxContainer(t, box.ID).HostConfig.NetworkMode; nw != "sandboxd" {
			t.Errorf("policed sandbox %s on network %q, want sandboxd", box.ID, nw)
		}
	}
	a.secShell(t, "mkdir -p /tmp/www && echo hello from a >/tmp/www/index.html")
	a.run(t, map[string]any{"command": "httpd -f -p 8000 -h /tmp/www", "background": true})
	out, _ := a.secShell(t, "ip -o -4 addr show eth0")
	f := strings.Fields(out)
	if len(f) < 4 {
		t.Fatalf("no IPv4 address on eth0: %q", out)
	}
	ip, _, _ := strings.Cut(f[3], "/")
	fetch := func(from *execdBox) bool {
		out, _ := from.secShell(t, `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 `+ip+` 8000 2>&1`)
		return strings.Contains(out, "hello from a")
	}
	waitUntil(t, secWait, "control: a's server to answer a itself on "+ip, func() bool { return fetch(a) })
	if fetch(b) {
		t.Errorf("a policed sandbox reaches another's server")
	}
}
