//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
)

// secDefaultMemory and secDefaultPids are the documented defaults.
const (
	secDefaultMemory = 2 << 30 // [docker] default_memory = "2Gi"
	secDefaultCPU    = 1e9     // [docker] default_cpu = "1"
	secDefaultPids   = 4096    // [docker] pids_limit
)

// secCheckContainerConfig checks Docker's view of a sandbox container
// against the hardening defaults, and that neither the sandbox's token nor
// the API key appear anywhere in it.
func secCheckContainerConfig(t *testing.T, ctr container.InspectResponse, secrets ...string) {
	t.Helper()
	hc := ctr.HostConfig
	if hc.Privileged {
		t.Error("container is privileged")
	}
	for what, mode := range map[string]string{
		"network": string(hc.NetworkMode), "pid": string(hc.PidMode), "ipc": string(hc.IpcMode),
		"uts": string(hc.UTSMode), "userns": string(hc.UsernsMode), "cgroup": string(hc.CgroupnsMode),
	} {
		if mode == "host" {
			t.Errorf("container shares the host's %s namespace", what)
		}
	}
	if !slices.Contains(hc.CapDrop, "ALL") {
		t.Errorf("CapDrop %v does not drop ALL", hc.CapDrop)
	}
	var added []string
	for _, c := range hc.CapAdd {
		added = append(added, strings.TrimPrefix(strings.ToUpper(c), "CAP_"))
	}
	for _, c := range added {
		if _, ok := secCapabilities[c]; !ok {
			t.Errorf("CapAdd has %s, which is not in the documented set", c)
		}
	}
	if len(added) != len(secCapabilities) {
		t.Errorf("CapAdd %v, want exactly the documented set of %d", hc.CapAdd, len(secCapabilities))
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("SecurityOpt %v lacks no-new-privileges:true", hc.SecurityOpt)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != secDefaultPids {
		t.Errorf("PidsLimit %v, want %d", hc.PidsLimit, secDefaultPids)
	}
	if hc.Memory <= 0 || hc.MemorySwap != hc.Memory {
		t.Errorf("Memory %d MemorySwap %d, want a limit with no extra swap", hc.Memory, hc.MemorySwap)
	}
	if hc.NanoCPUs <= 0 {
		t.Errorf("NanoCPUs %d, want a CPU limit", hc.NanoCPUs)
	}
	if hc.PublishAllPorts || len(hc.PortBindings) != 0 {
		t.Errorf("ports published: PublishAllPorts %v PortBindings %v", hc.PublishAllPorts, hc.PortBindings)
	}
	if ns := ctr.NetworkSettings; ns != nil {
		for port, bindings := range ns.Ports {
			if len(bindings) != 0 {
				t.Errorf("port %s is bound on the host: %v", port, bindings)
			}
		}
	}
	for _, m := range ctr.Mounts {
		if m.Type != "volume" || m.RW || m.Destination != "/opt/sandboxd" {
			t.Errorf("unexpected mount %+v (only the read-only agent volume is expected)", m)
		}
	}
	all, err := json.Marshal(ctr)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range secrets {
		if strings.Contains(string(all), secret) {
			t.Errorf("docker inspect shows a secret %q (labels %v, env %v)", secret, ctr.Config.Labels, ctr.Config.Env)
		}
	}
}

// TestSecurityContainerHardening checks a default sandbox from Docker's
// side (capabilities, no-new-privileges, limits, no published port, no
// host namespace, no secret in labels or env) and from inside (the exact
// capability sets, NoNewPrivs, no Docker socket, refused privileged
// operations).
func TestSecurityContainerHardening(t *testing.T) {
	s := startServer(t)
	req := busyboxRequest()
	delete(req, "resourceLimits") // the defaults apply
	box := newExecdBox(t, s, req)
	tok := box.Headers[execdTokenHeader]

	ctr := sandboxContainer(t, box.ID)
	secCheckContainerConfig(t, ctr, tok, s.APIKey)
	if ctr.HostConfig.Memory != secDefaultMemory || ctr.HostConfig.NanoCPUs != secDefaultCPU {
		t.Errorf("default limits: memory %d nanoCPUs %d, want %d and %d", ctr.HostConfig.Memory, ctr.HostConfig.NanoCPUs, int64(secDefaultMemory), int64(secDefaultCPU))
	}
	if ctr.HostConfig.ReadonlyRootfs || ctr.Config.User != "" {
		t.Errorf("default sandbox: read-only %v user %q, want writable and the image's user", ctr.HostConfig.ReadonlyRootfs, ctr.Config.User)
	}

	// The command's own process (started by the agent) and PID 1.
	want := secCapMask()
	for _, pid := range []string{"self", "1"} {
		out, code := box.secShell(t, "cat /proc/"+pid+"/status")
		if code != 0 {
			t.Fatalf("cat /proc/%s/status: exit %d", pid, code)
		}
		st := secStatus(out)
		for field, v := range map[string]string{"CapEff": want, "CapPrm": want, "CapBnd": want, "CapInh": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1"} {
			if st[field] != v {
				t.Errorf("/proc/%s/status %s = %q, want %q", pid, field, st[field], v)
			}
		}
	}

	// In its own cgroup namespace the sandbox sees its cgroup as the root,
	// not the host's path to it (Docker's default on cgroup v1 hosts).
	if out, code := box.secShell(t, "cat /proc/self/cgroup"); code != 0 || strings.Contains(out, "docker") || strings.Contains(out, box.ID) {
		t.Errorf("/proc/self/cgroup (exit %d) shows host cgroup paths:\n%s", code, out)
	}

	attacks := []struct{ name, command string }{
		{"docker socket", "test -e /var/run/docker.sock || test -e /run/docker.sock || grep -q docker.sock /proc/self/mountinfo"},
		{"docker socket anywhere", "find / -xdev -type s 2>/dev/null | grep -q docker"},
		{"docker host in env", "env | grep -q DOCKER_HOST"},
		{"mount a filesystem", "mount -t tmpfs none /mnt"},
		{"make a device node", "mknod /tmp/mem c 1 1"},
		{"chroot", "chroot / true"},
		{"write the agent binary", "echo x > /opt/sandboxd/sandboxd"},
	}
	for _, a := range attacks {
		if _, code := box.secShell(t, a.command); code == 0 {
			t.Errorf("%s: %q succeeded inside the sandbox", a.name, a.command)
		}
	}
	// Control: the shell does report success.
	if _, code := box.secShell(t, "true"); code != 0 {
		t.Fatalf("true: exit %d", code)
	}

	// sandboxd listens on the host's loopback, which the sandbox cannot
	// reach through its gateway; a listener on the gateway address shows
	// the path itself works.
	gw := secEndpoint(t, ctr, "sandboxd").Gateway
	if gw == "" {
		t.Fatal("the sandbox has no gateway on sandboxd's network")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		t.Fatalf("listen on the gateway %s: %v", gw, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, ctl, _ := net.SplitHostPort(ln.Addr().String())
	_, port, _ := net.SplitHostPort(s.Addr)
	if _, code := box.secShell(t, "nc -w 10 "+gw+" "+ctl+" </dev/null"); code != 0 {
		t.Fatalf("control: the sandbox cannot reach a listener on its gateway %s:%s (exit %d)", gw, ctl, code)
	}
	if _, code := box.secShell(t, "nc -w 10 "+gw+" "+port+" </dev/null"); code == 0 {
		t.Errorf("the sandbox reaches sandboxd's port %s on its gateway %s", port, gw)
	}
}

// secBombPids is the pids limit of the fork bomb test: lower than the
// default (checked in TestSecurityContainerHardening) so that a loaded CI
// machine reaches it quickly.
const secBombPids = 512

// TestSecurityForkBomb runs a fork bomb in one sandbox and checks that the
// pids limit stops it (the kernel refused forks; the count never passes
// the limit) while sandboxd and another sandbox keep answering.
func TestSecurityForkBomb(t *testing.T) {
	s := startServer(t, withTOML(fmt.Sprintf("[docker]\npids_limit = %d\n", secBombPids)))
	bomb := newExecdBox(t, s, busyboxRequest())
	witness := newExecdBox(t, s, busyboxRequest())
	ctr := sandboxContainer(t, bomb.ID)
	if ctr.HostConfig.PidsLimit == nil || *ctr.HostConfig.PidsLimit != secBombPids {
		t.Fatalf("PidsLimit %v, want the configured %d", ctr.HostConfig.PidsLimit, secBombPids)
	}
	cid := ctr.ID

	bomb.run(t, map[string]any{"command": "b(){ b | b & }; b", "background": true})
	waitUntil(t, secWait, "the pids limit to refuse a fork", func() bool {
		return secCgroupValue(t, cid, "pids", []string{"pids.events"}, "max") > 0
	})
	if cur := secPidsCurrent(t, cid); cur > secBombPids {
		t.Errorf("the sandbox has %d tasks, above its pids limit %d", cur, secBombPids)
	}

	// While the bomb is still going: sandboxd and the other sandbox answer.
	status, _, body := s.do(t, http.MethodGet, "/health", nil, nil)
	if status != http.StatusOK {
		t.Errorf("GET /health during the fork bomb: %d %s", status, body)
	}
	if got := getSandbox(t, s, "/v1", bomb.ID); got.Status.State != "Running" {
		t.Errorf("the bombed sandbox is %s, want Running", got.Status.State)
	}
	if out, code := witness.secShell(t, "echo alive"); code != 0 || out != "alive" {
		t.Errorf("the other sandbox during the fork bomb: %q exit %d", out, code)
	}
	if secCgroupValue(t, cid, "pids", []string{"pids.events"}, "max") == 0 {
		t.Error("pids.events max went back to 0")
	}
}

// secPidsCurrent reads pids.current of a container's cgroup.
func secPidsCurrent(t *testing.T, cid string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	resp, err := dockerClient(t).ContainerStatsOneShot(ctx, cid)
	if err != nil {
		t.Fatalf("stats of %s: %v", cid, err)
	}
	defer resp.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("decode stats of %s: %v", cid, err)
	}
	if st.PidsStats.Limit != 0 && st.PidsStats.Limit != secBombPids {
		t.Errorf("stats pids limit %d, want %d", st.PidsStats.Limit, secBombPids)
	}
	return int64(st.PidsStats.Current)
}

// TestSecurityMemoryHog allocates far beyond a 64Mi limit in a sandbox
// and checks that the kernel OOM-killed it inside that sandbox's cgroup
// while sandboxd and another sandbox are unharmed.
func TestSecurityMemoryHog(t *testing.T) {
	s := startServer(t)
	hog := newExecdBox(t, s, busyboxWith(map[string]any{"resourceLimits": map[string]string{"cpu": "1", "memory": "64Mi"}}))
	witness := newExecdBox(t, s, busyboxRequest())
	cid := sandboxContainer(t, hog.ID).ID
	if got := sandboxContainer(t, hog.ID).HostConfig.Memory; got != 64<<20 {
		t.Fatalf("memory limit %d, want 64Mi", got)
	}

	// tail -c keeps the last 200 MB in memory: far more than 64Mi.
	_, code := hog.secShell(t, "head -c 300000000 /dev/zero | tail -c 200000000 > /dev/null")
	if code != 128+9 {
		t.Errorf("the memory hog exited %d, want %d (SIGKILL)", code, 128+9)
	}
	if n := secCgroupValue(t, cid, "memory", []string{"memory.oom_control", "memory.events"}, "oom_kill"); n < 1 {
		t.Errorf("the sandbox's cgroup counts %d OOM kills, want at least 1", n)
	}

	if !s.running() {
		t.Fatal("sandboxd is gone after the sandbox's OOM")
	}
	if status, _, body := s.do(t, http.MethodGet, "/health", nil, nil); status != http.StatusOK {
		t.Errorf("GET /health after the OOM: %d %s", status, body)
	}
	if out, code := witness.secShell(t, "echo alive"); code != 0 || out != "alive" {
		t.Errorf("the other sandbox after the OOM: %q exit %d", out, code)
	}
	// The hog's sandbox is either still usable (only the hog died) or
	// reported as failed; it is never silently gone.
	switch got := getSandbox(t, s, "/v1", hog.ID); got.Status.State {
	case "Running":
		if out, code := hog.secShell(t, "echo 42"); code != 0 || out != "42" {
			t.Errorf("the OOM'd sandbox still runs but its commands fail: %q exit %d", out, code)
		}
	case "Failed":
		if got.Status.Reason != "CONTAINER_OOM_KILLED" {
			t.Errorf("the OOM'd sandbox failed with reason %q, want CONTAINER_OOM_KILLED", got.Status.Reason)
		}
	default:
		t.Errorf("the OOM'd sandbox is %s (%s)", got.Status.State, got.Status.Reason)
	}
}

// TestSecurityHardeningExtensions asks for a read-only root and a
// non-root user through extensions and checks both inside the sandbox:
// / is not writable, /tmp is, id -u is 1000, no capability is effective;
// files still move in and out through the proxy.
func TestSecurityHardeningExtensions(t *testing.T) {
	s := startServer(t)
	req := busyboxWith(map[string]any{"extensions": map[string]string{
		"sandboxd.io/read-only-rootfs": "true",
		"sandboxd.io/user":             "1000:1000",
	}})
	box := newExecdBox(t, s, req)

	ctr := sandboxContainer(t, box.ID)
	if !ctr.HostConfig.ReadonlyRootfs || ctr.Config.User != "1000:1000" {
		t.Errorf("Docker shows read-only %v user %q, want true and 1000:1000", ctr.HostConfig.ReadonlyRootfs, ctr.Config.User)
	}
	if _, ok := ctr.HostConfig.Tmpfs["/tmp"]; !ok {
		t.Errorf("no tmpfs on /tmp: %v", ctr.HostConfig.Tmpfs)
	}

	if out, code := box.secShell(t, "id -u; id -g"); code != 0 || out != "1000\n1000" {
		t.Errorf("id -u; id -g = %q (exit %d), want 1000 and 1000", out, code)
	}
	for _, p := range []string{"/probe", "/etc/probe", "/root/probe"} {
		if _, code := box.secShell(t, "echo x > "+p); code == 0 {
			t.Errorf("writing %s succeeded on a read-only root", p)
		}
	}
	out, code := box.secShell(t, "touch /probe 2>&1; true")
	if code != 0 || !strings.Contains(out, "Read-only file system") {
		t.Errorf("touch /probe said %q, want a read-only file system error", out)
	}
	if out, code := box.secShell(t, "echo scratch > /tmp/ok && cat /tmp/ok"); code != 0 || out != "scratch" {
		t.Errorf("/tmp is not writable: %q exit %d", out, code)
	}
	st, code := box.secShell(t, "cat /proc/self/status")
	if code != 0 {
		t.Fatal("cat /proc/self/status failed")
	}
	fields := secStatus(st)
	if fields["CapEff"] != "0000000000000000" || fields["CapBnd"] != secCapMask() || fields["NoNewPrivs"] != "1" {
		t.Errorf("non-root sandbox: CapEff %s CapBnd %s NoNewPrivs %s; want none effective, the documented bounding set, 1",
			fields["CapEff"], fields["CapBnd"], fields["NoNewPrivs"])
	}

	// Uploads and downloads still work (through the agent, as Docker's
	// archive API refuses a read-only root and cannot see the tmpfs).
	uploadFile(t, s, box.ID, "/tmp/up/hello.txt", "uploaded")
	if out, _ := box.secShell(t, "cat /tmp/up/hello.txt; echo; stat -c %u /tmp/up/hello.txt"); out != "uploaded\n1000" {
		t.Errorf("the uploaded file reads %q, want its content and owner 1000", out)
	}
	if got := downloadFile(t, s, box.ID, "/tmp/ok"); got != "scratch\n" {
		t.Errorf("download /tmp/ok = %q", got)
	}

	// Bad values are refused before anything is made.
	for _, ext := range []map[string]string{
		{"sandboxd.io/read-only-rootfs": "maybe"},
		{"sandboxd.io/user": "root; rm -rf /"},
		{"sandboxd.io/user": ""},
	} {
		status, hdr, body := s.do(t, http.MethodPost, "/v1/sandboxes", busyboxWith(map[string]any{"extensions": ext}), nil)
		secWantError(t, "create with extensions "+strings.Join(slices.Collect(maps.Values(ext)), ","), status, hdr, body, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")
	}
	if n := secInstanceContainers(t, s); n != 1 {
		t.Errorf("%d containers after the refused creates, want 1", n)
	}
}

// TestSecurityNetworkDeny: a sandbox created with networkPolicy deny-all
// shares its network namespace with its egress helper, whose firewall lets
// nothing out, so it reaches no other sandbox, while a sandbox on Docker's
// bridge network does.
func TestSecurityNetworkDeny(t *testing.T) {
	s := startServer(t, withTOML("[docker]\nnetwork_mode = \"bridge\"\n"))
	open := newExecdBox(t, s, busyboxRequest())
	closed := newExecdBox(t, s, busyboxWith(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny"}}))

	if hs := containersByLabel(t, labelEgressFor, closed.ID); len(hs) != 1 || string(inspectContainer(t, hs[0].ID).HostConfig.NetworkMode) != "container:"+sandboxContainer(t, closed.ID).ID {
		t.Errorf("the deny-all sandbox has no egress helper in its network namespace")
	}
	secListen(t, open)
	openIP := secEndpoint(t, sandboxContainer(t, open.ID), "bridge").IPAddress

	// Control: another bridge sandbox does reach it (Docker's default).
	other := newExecdBox(t, s, busyboxRequest())
	if out, code := other.secShell(t, "nc -w 10 "+openIP+" 9999 </dev/null"); code != 0 || out != "hi" {
		t.Fatalf("control: a bridge sandbox cannot reach another (%q, exit %d)", out, code)
	}
	if out, code := closed.secShell(t, "nc -w 10 "+openIP+" 9999 </dev/null"); code == 0 {
		t.Errorf("the deny-all sandbox reached another sandbox: %q", out)
	}
}

// TestSecurityNetworkIsolated: with network_mode unset, sandboxes are on
// sandboxd's network, where a sandbox reaches its gateway but not another
// sandbox, policed or not; on Docker's bridge the same probe connects
// (TestSecurityNetworkDeny's control).
func TestSecurityNetworkIsolated(t *testing.T) {
	s := startServer(t)
	removeInstanceHelpersAtEnd(t, s)
	a := newExecdBox(t, s, busyboxRequest())
	b := newExecdBox(t, s, busyboxRequest())
	policed := newExecdBox(t, s, busyboxWith(map[string]any{"networkPolicy": map[string]any{"defaultAction": "allow"}}))
	for _, id := range []string{a.ID, b.ID, policed.ID} {
		if mode := sandboxContainer(t, id).HostConfig.NetworkMode; mode != "sandboxd" {
			t.Errorf("sandbox %s has network mode %q, want sandboxd", id, mode)
		}
	}
	// A policed sandbox's helper has no network of its own: it joins the
	// sandbox's namespace.
	if hs := containersByLabel(t, labelEgressFor, policed.ID); len(hs) != 1 || string(inspectContainer(t, hs[0].ID).HostConfig.NetworkMode) != "container:"+sandboxContainer(t, policed.ID).ID {
		t.Errorf("the policed sandbox does not have one egress helper in its namespace: %d helpers", len(hs))
	}
	nw, err := dockerClient(t).NetworkInspect(context.Background(), "sandboxd", network.InspectOptions{})
	if err != nil || nw.Options["com.docker.network.bridge.enable_icc"] != "false" || nw.Labels["io.sandboxd.network"] == "" {
		t.Fatalf("network sandboxd: %v, options %v, labels %v", err, nw.Options, nw.Labels)
	}

	// A sandbox here does reach its gateway (the host; see
	// TestSecurityContainerHardening): the network is not just down.
	secListen(t, a)
	ip := secEndpoint(t, sandboxContainer(t, a.ID), "sandboxd").IPAddress
	if out, code := b.secShell(t, "nc -w 10 "+ip+" 9999 </dev/null"); code == 0 || out == "hi" {
		t.Errorf("a sandbox reached another on sandboxd's network: %q, exit %d", out, code)
	}
	policedIP := secEndpoint(t, sandboxContainer(t, policed.ID), "sandboxd").IPAddress
	secListen(t, policed)
	if out, code := b.secShell(t, "nc -w 10 "+policedIP+" 9999 </dev/null"); code == 0 || out == "hi" {
		t.Errorf("a sandbox reached a policed one: %q, exit %d", out, code)
	}
}

// secListen starts a TCP server answering "hi" on port 9999 in box and
// waits until it answers locally.
func secListen(t *testing.T, box *execdBox) {
	t.Helper()
	box.run(t, map[string]any{"command": "while true; do echo hi | nc -l -p 9999; done", "background": true})
	waitUntil(t, secWait, "the listener in the sandbox", func() bool {
		_, code := box.secShell(t, "nc -w 5 127.0.0.1 9999 </dev/null")
		return code == 0
	})
}

// secEndpoint returns a container's endpoint on network nw.
func secEndpoint(t *testing.T, ctr container.InspectResponse, nw string) *network.EndpointSettings {
	t.Helper()
	if ctr.NetworkSettings == nil || ctr.NetworkSettings.Networks[nw] == nil || ctr.NetworkSettings.Networks[nw].IPAddress == "" {
		t.Fatalf("container %s has no address on network %s", ctr.ID, nw)
	}
	return ctr.NetworkSettings.Networks[nw]
}
