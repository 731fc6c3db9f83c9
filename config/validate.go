package config

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// validate reports every invalid value at once, each error naming its key.
func (c Config) validate() error {
	var errs []error
	check := func(ok bool, key, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
		}
	}

	s := c.Server
	check(s.Host != "", "server.host", `must not be empty; use "0.0.0.0" to listen on all interfaces`)
	check(s.Port >= 1 && s.Port <= 65535, "server.port", "must be between 1 and 65535, got %d", s.Port)
	check(s.MaxSandboxTimeoutSeconds == 0 || s.MaxSandboxTimeoutSeconds >= 60,
		"server.max_sandbox_timeout_seconds", "must be 0 (no cap) or at least 60, got %d", s.MaxSandboxTimeoutSeconds)
	check(s.MaxBodyBytes > 0, "server.max_body_bytes", "must be positive, got %d", s.MaxBodyBytes)
	check(s.MaxProxyRequestsPerSandbox > 0, "server.max_proxy_requests_per_sandbox", "must be positive, got %d", s.MaxProxyRequestsPerSandbox)
	check(s.MaxProxyRequestsPerToken > 0, "server.max_proxy_requests_per_token", "must be positive, got %d", s.MaxProxyRequestsPerToken)
	check(s.MaxConnections >= 16, "server.max_connections", "must be at least 16, got %d", s.MaxConnections)
	check(s.IdleTimeout.Duration > 0, "server.idle_timeout", "must be positive")
	check(s.ProxyReadTimeout.Duration >= 0, "server.proxy_read_timeout", "must not be negative")

	_, ok := parseLevel(c.Log.Level)
	check(ok, "log.level", "must be DEBUG, INFO, WARN or ERROR, got %q", c.Log.Level)
	check(c.Runtime.Type == "docker" || c.Runtime.Type == "kubernetes", "runtime.type", `%q is not supported; use "docker" or "kubernetes"`, c.Runtime.Type)
	for _, plat := range slices.Sorted(maps.Keys(c.Runtime.AgentBinaries)) {
		p := c.Runtime.AgentBinaries[plat]
		key := "runtime.agent_binaries." + plat
		arch, ok := strings.CutPrefix(plat, "linux/")
		check(ok && arch != "" && !strings.Contains(arch, "/"), key, `%q is not a sandbox platform such as "linux/arm64"`, plat)
		check(filepath.IsAbs(p), key, "%q is not an absolute path (~/ is allowed)", p)
	}

	d := c.Docker
	check(d.NetworkMode != "host", "docker.network_mode",
		`"host" is refused: sandboxes would share the host's network stack and reach every service on it, `+
			`defeating isolation; sandboxd proxies all execd traffic, so no host networking is needed; use "bridge", "none" or a network name`)
	check(!strings.HasPrefix(d.NetworkMode, "container:"), "docker.network_mode",
		"%q is refused: sharing another container's network namespace defeats sandbox isolation", d.NetworkMode)
	check(d.APITimeout.Duration > 0, "docker.api_timeout", "must be positive")
	check(d.LogMaxSize == "" || isByteSize(d.LogMaxSize), "docker.log_max_size", `must be a size such as "10m" or "" (no rotation), got %q`, d.LogMaxSize)
	check(d.LogMaxFiles >= 1, "docker.log_max_files", "must be at least 1, got %d", d.LogMaxFiles)
	check(d.DiskLimit == "" || isByteSize(d.DiskLimit), "docker.disk_limit", `must be a size such as "10G" or "" (no limit), got %q`, d.DiskLimit)
	check(d.AgentTransport == "auto" || d.AgentTransport == "exec", "docker.agent_transport",
		`must be "auto" or "exec", got %q`, d.AgentTransport)
	check(d.PidsLimit >= 0, "docker.pids_limit", "must not be negative (0 = no limit), got %d", d.PidsLimit)
	for i, name := range d.DropCapabilities {
		check(isCapability(name), fmt.Sprintf("docker.drop_capabilities[%d]", i), "%q is not a capability name such as \"ALL\" or \"NET_RAW\"", name)
	}
	for i, name := range d.AddCapabilities {
		check(isCapability(name), fmt.Sprintf("docker.add_capabilities[%d]", i), "%q is not a capability name such as \"CHOWN\"", name)
	}

	if c.Runtime.Type == "kubernetes" {
		errs = append(errs, c.Kubernetes.validate()...)
	}

	for i, p := range c.Storage.AllowedHostPaths {
		check(filepath.IsAbs(p), fmt.Sprintf("storage.allowed_host_paths[%d]", i), "%q is not an absolute path", p)
	}
	for i, v := range c.Storage.AllowedVolumes {
		key := fmt.Sprintf("storage.allowed_volumes[%d]", i)
		check(v != "", key, "must not be empty")
		check(!strings.Contains(v, "/"), key, "%q is a path, not a volume name; host directories go in storage.allowed_host_paths", v)
	}

	check(c.Lifecycle.ReaperInterval.Duration > 0, "lifecycle.reaper_interval", "must be positive")
	lc := c.Lifecycle
	check(lc.SleepAction == "" || lc.SleepAction == "pause" || lc.SleepAction == "stop", "lifecycle.sleep_action", "must be \"pause\" or \"stop\", got %q", lc.SleepAction)
	minIdle := 30 * time.Second
	if lc.TestMinIdleSeconds > 0 {
		minIdle = time.Duration(lc.TestMinIdleSeconds) * time.Second
	}
	check(lc.SleepAfterIdle.Duration == 0 || lc.SleepAfterIdle.Duration >= minIdle && lc.SleepAfterIdle.Duration <= 24*time.Hour, "lifecycle.sleep_after_idle", "must be 0 (off) or between %s and 24h", minIdle)
	check(lc.SleepRetention.Duration >= 0, "lifecycle.sleep_retention", "must not be negative")
	check(lc.TestMinIdleSeconds >= 0 && lc.TestMinIdleSeconds <= 30, "lifecycle.test_min_idle_seconds", "must be between 0 and 30")
	for _, u := range c.Egress.DNSUpstream {
		ap, errAP := netip.ParseAddrPort(u)
		a, errA := netip.ParseAddr(u)
		check(errAP == nil || errA == nil, "egress.dns_upstream", "%q is not an IP or IP:port (a name would be resolved through the policy it enforces)", u)
		if errAP == nil {
			a = ap.Addr()
		}
		// The egress daemon forwards from the sandbox's network namespace,
		// whose loopback is the sandbox's own: the host's is out of reach.
		check(!a.IsLoopback(), "egress.dns_upstream", "%q is a loopback address: policed sandboxes resolve from their own network namespace and can never reach the host's loopback (every lookup would fail); give an address of the host or a resolver they can route to (unset, Docker's embedded resolver is used on a user network)", u)
	}
	check(filepath.IsAbs(c.Store.Dir), "store.dir", "%q is not an absolute path (~/ is allowed)", c.Store.Dir)

	first := make(map[string]int) // pool name -> index of its first use
	for i, p := range c.Pools {
		key := fmt.Sprintf("pool[%d]", i)
		check(p.Name != "", key+".name", "must not be empty")
		j, dup := first[p.Name]
		check(!dup || p.Name == "", key+".name", "%q is also the name of pool[%d]", p.Name, j)
		if !dup {
			first[p.Name] = i
		}
		check(p.Image != "", key+".image", "must not be empty")
		check(p.Size >= 0, key+".size", "must not be negative, got %d", p.Size)
	}
	return errors.Join(errs...)
}

// byteSize is a size as Docker's log and storage options parse it (units.RAMInBytes).
var byteSize = regexp.MustCompile(`^[0-9]+ ?[kKmMgGtT]?[iI]?[bB]?$`)

// isByteSize reports whether s is a positive size such as "10m" or "5GiB".
func isByteSize(s string) bool {
	return byteSize.MatchString(s) && strings.Trim(s, "0 kKmMgGtTiIbB") != ""
}

// isCapability reports whether name looks like a Linux capability as Docker accepts it:
// letters and underscores, with or without the CAP_ prefix, or ALL.
func isCapability(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && r != '_' {
			return false
		}
	}
	return true
}

// dns1123 is a Kubernetes object name (RFC 1123 label).
var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// quantity is a Kubernetes resource quantity such as "100m", "1" or "128Mi".
var quantity = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$`)

func (k Kubernetes) validate() []error {
	var errs []error
	check := func(ok bool, key, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("kubernetes.%s: %s", key, fmt.Sprintf(format, args...)))
		}
	}
	name := func(key, v string, optional bool) {
		check((optional && v == "") || (len(v) <= 63 && dns1123.MatchString(v)), key,
			"%q is not a Kubernetes name (lower-case letters, digits and '-', at most 63)", v)
	}
	name("namespace", k.Namespace, false)
	name("lease_name", k.LeaseName, false)
	name("service_account", k.ServiceAccount, true)
	name("runtime_class_name", k.RuntimeClassName, true)
	for i, s := range k.ImagePullSecrets {
		name(fmt.Sprintf("image_pull_secrets[%d]", i), s, false)
	}
	check(k.AgentImage != "", "agent_image", "must name a sandboxd image (images/sandboxd), which copies the agent into each pod")
	check(k.Kubeconfig == "" || filepath.IsAbs(k.Kubeconfig), "kubeconfig_path", "%q is not an absolute path (~/ is allowed)", k.Kubeconfig)
	check(slices.Contains([]string{"", "Always", "IfNotPresent", "Never"}, k.ImagePullPolicy), "image_pull_policy",
		`must be "", "Always", "IfNotPresent" or "Never", got %q`, k.ImagePullPolicy)
	check(quantity.MatchString(k.DefaultCPURequest), "default_cpu_request", `must be a quantity such as "100m", got %q`, k.DefaultCPURequest)
	check(quantity.MatchString(k.DefaultMemoryRequest), "default_memory_request", `must be a quantity such as "128Mi", got %q`, k.DefaultMemoryRequest)
	check(k.APITimeout.Duration > 0, "api_timeout", "must be positive")
	for i, t := range k.Tolerations {
		key := fmt.Sprintf("tolerations[%d]", i)
		check(slices.Contains([]string{"", "Equal", "Exists"}, t.Operator), key+".operator", `must be "Equal" or "Exists", got %q`, t.Operator)
		check(t.Operator != "Exists" || t.Value == "", key+".value", `must be empty with operator "Exists"`)
		check(slices.Contains([]string{"", "NoSchedule", "PreferNoSchedule", "NoExecute"}, t.Effect), key+".effect",
			`must be "", "NoSchedule", "PreferNoSchedule" or "NoExecute", got %q`, t.Effect)
	}
	return errs
}
