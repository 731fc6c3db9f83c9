package config

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// isolate clears the environment Load and ResolvePath read and points HOME at a fresh
// directory, which it returns.
func isolate(t *testing.T) (home string) {
	t.Helper()
	for _, k := range []string{envConfigPath, envAPIKey, envInsecure} {
		t.Setenv(k, "")
	}
	home = t.TempDir()
	t.Setenv("HOME", home)
	return home
}

// writeConfig writes doc to a file in a fresh directory and returns its path.
func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandbox.toml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefault(t *testing.T) {
	c := Default()
	tests := []struct {
		name      string
		got, want any
	}{
		{"server.host", c.Server.Host, "127.0.0.1"},
		{"server.port", c.Server.Port, 8080},
		{"server.api_key", c.Server.APIKey, ""},
		{"server.max_sandbox_timeout_seconds", c.Server.MaxSandboxTimeoutSeconds, 0},
		{"server.cors_origins", len(c.Server.CORSOrigins), 0},
		{"server.max_body_bytes", c.Server.MaxBodyBytes, int64(1 << 20)},
		{"server.insecure", c.Server.Insecure, false},
		{"server.max_proxy_requests_per_sandbox", c.Server.MaxProxyRequestsPerSandbox, 128},
		{"server.max_proxy_requests_per_token", c.Server.MaxProxyRequestsPerToken, 512},
		{"server.max_connections", c.Server.MaxConnections, 4096},
		{"server.idle_timeout", c.Server.IdleTimeout.Duration, 90 * time.Second},
		{"server.proxy_read_timeout", c.Server.ProxyReadTimeout.Duration, 300 * time.Second},
		{"log.level", c.Log.Level, "INFO"},
		{"log.access", c.Log.Access, true},
		{"docker.log_max_size", c.Docker.LogMaxSize, "10m"},
		{"docker.log_max_files", c.Docker.LogMaxFiles, 3},
		{"docker.disk_limit", c.Docker.DiskLimit, ""},
		{"docker.agent_transport", c.Docker.AgentTransport, "auto"},
		{"runtime.type", c.Runtime.Type, "docker"},
		{"docker.host", c.Docker.Host, ""},
		{"docker.network_mode", c.Docker.NetworkMode, ""},
		{"docker.api_timeout", c.Docker.APITimeout.Duration, 180 * time.Second},
		{"docker.drop_capabilities", c.Docker.DropCapabilities, []string{"ALL"}},
		{"docker.add_capabilities", c.Docker.AddCapabilities,
			[]string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE"}},
		{"docker.no_new_privileges", c.Docker.NoNewPrivileges, true},
		{"docker.pids_limit", c.Docker.PidsLimit, int64(4096)},
		{"docker.seccomp_profile", c.Docker.SeccompProfile, ""},
		{"docker.default_memory", c.Docker.DefaultMemory, "2Gi"},
		{"docker.default_cpu", c.Docker.DefaultCPU, "1"},
		{"docker.read_only_rootfs", c.Docker.ReadOnlyRootfs, false},
		{"docker.user", c.Docker.User, ""},
		{"docker.runtime", c.Docker.OCIRuntime, ""},
		{"storage.allowed_host_paths", len(c.Storage.AllowedHostPaths), 0},
		{"lifecycle.idle_timeout", c.Lifecycle.IdleTimeout.Duration, time.Duration(0)},
		{"lifecycle.reaper_interval", c.Lifecycle.ReaperInterval.Duration, 5 * time.Second},
		{"store.dir", c.Store.Dir, "~/.sandboxd"},
		{"pools", len(c.Pools), 0},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s = %#v, want %#v", tt.name, tt.got, tt.want)
		}
	}

	// Default returns fresh slices: a caller changing one must not change the next.
	c.Docker.AddCapabilities[0] = "SYS_ADMIN"
	if got := Default().Docker.AddCapabilities[0]; got != "CHOWN" {
		t.Errorf("Default shares slices between calls: got %q", got)
	}
}

func TestLoadWithoutFile(t *testing.T) {
	home := isolate(t)
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Store.Dir = filepath.Join(home, ".sandboxd")
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Load(\"\") = %+v\nwant %+v", c, want)
	}
}

const everyKey = `
[server]
host = "0.0.0.0"
port = 9090
api_key = "k1"
api_keys = ["k2", "k3"]
eip = "sandbox.example.com"
max_sandbox_timeout_seconds = 3600
cors_origins = ["https://app.example.com"]
max_body_bytes = 2048
max_proxy_requests_per_sandbox = 8
max_proxy_requests_per_token = 16
max_connections = 100
idle_timeout = "10s"
proxy_read_timeout = "20s"

[log]
level = "debug"
access = false

[runtime]
type = "docker"
agent_binaries = { "linux/arm64" = "/opt/sandboxd/sandboxd-linux-arm64" }

[kubernetes]
kubeconfig_path = "/etc/sandboxd/kubeconfig"
context = "prod"
namespace = "sandboxes"
service_account = "sandbox"
runtime_class_name = "gvisor"
node_selector = { pool = "sandboxes" }
tolerations = [{ key = "sandboxes", operator = "Exists", effect = "NoSchedule" }]
image_pull_secrets = ["regcred"]
agent_image = "registry.example.com/sandboxd:1.0"
image_pull_policy = "IfNotPresent"
default_cpu_request = "250m"
default_memory_request = "256Mi"
api_timeout = "20s"
lease_name = "sandboxd-prod"

[sandbox]
allow_nested = true

[docker]
host = "unix:///run/docker.sock"
network_mode = "none"
api_timeout = 30
drop_capabilities = ["NET_RAW"]
add_capabilities = ["CHOWN"]
no_new_privileges = false
pids_limit = 100
seccomp_profile = "/etc/seccomp.json"
apparmor_profile = "sandbox"
default_memory = "512Mi"
default_cpu = "500m"
read_only_rootfs = true
user = "1000:1000"
runtime = "runsc"
log_max_size = "1m"
log_max_files = 2
disk_limit = "5G"
agent_transport = "exec"

[storage]
allowed_host_paths = ["/srv/data/"]
allowed_volumes = ["cache"]

[lifecycle]
idle_timeout = "30m"
reaper_interval = 2
instance_id = "node-a"
sleep_after_idle = "10m"
sleep_action = "stop"
sleep_retention = "48h"
test_min_idle_seconds = 5

[store]
dir = "/var/lib/sandboxd"

[egress]
dns_upstream = ["192.0.2.53", "192.0.2.54:5353"]
default_policy = { default_action = "deny", egress = [{ action = "allow", target = "pypi.org" }] }

[[pool]]
name = "py"
image = "python:3.12"
size = 2
entrypoint = ["sleep", "infinity"]
resource_limits = { cpu = "1", memory = "1Gi" }
env = { A = "1" }
network_policy = { default_action = "deny", egress = [{ action = "allow", target = "pypi.org" }] }

[[pool]]
name = "node"
image = "node:22"
`

func TestLoadEveryKey(t *testing.T) {
	isolate(t)
	path := writeConfig(t, everyKey)
	want := Config{
		Server: Server{
			Host:                       "0.0.0.0",
			Port:                       9090,
			APIKey:                     "k1",
			APIKeys:                    []string{"k2", "k3"},
			EIP:                        "sandbox.example.com",
			MaxSandboxTimeoutSeconds:   3600,
			CORSOrigins:                []string{"https://app.example.com"},
			MaxBodyBytes:               2048,
			MaxProxyRequestsPerSandbox: 8,
			MaxProxyRequestsPerToken:   16,
			MaxConnections:             100,
			IdleTimeout:                Duration{10 * time.Second},
			ProxyReadTimeout:           Duration{20 * time.Second},
		},
		Log:     Log{Level: "DEBUG", Access: false},
		Runtime: Runtime{Type: "docker", AgentBinaries: map[string]string{"linux/arm64": "/opt/sandboxd/sandboxd-linux-arm64"}},
		Sandbox: Sandbox{AllowNested: true},
		Docker: Docker{
			Host:        "unix:///run/docker.sock",
			NetworkMode: "none",
			APITimeout:  Duration{30 * time.Second},
			Hardening: Hardening{
				DropCapabilities: []string{"NET_RAW"},
				AddCapabilities:  []string{"CHOWN"},
				NoNewPrivileges:  false,
				PidsLimit:        100,
				SeccompProfile:   "/etc/seccomp.json",
				ApparmorProfile:  "sandbox",
				DefaultMemory:    "512Mi",
				DefaultCPU:       "500m",
				ReadOnlyRootfs:   true,
				User:             "1000:1000",
			},
			OCIRuntime:     "runsc",
			LogMaxSize:     "1m",
			LogMaxFiles:    2,
			DiskLimit:      "5G",
			AgentTransport: "exec",
		},
		Kubernetes: Kubernetes{
			Kubeconfig:           "/etc/sandboxd/kubeconfig",
			Context:              "prod",
			Namespace:            "sandboxes",
			ServiceAccount:       "sandbox",
			RuntimeClassName:     "gvisor",
			NodeSelector:         map[string]string{"pool": "sandboxes"},
			Tolerations:          []Toleration{{Key: "sandboxes", Operator: "Exists", Effect: "NoSchedule"}},
			ImagePullSecrets:     []string{"regcred"},
			AgentImage:           "registry.example.com/sandboxd:1.0",
			ImagePullPolicy:      "IfNotPresent",
			DefaultCPURequest:    "250m",
			DefaultMemoryRequest: "256Mi",
			APITimeout:           Duration{20 * time.Second},
			LeaseName:            "sandboxd-prod",
		},
		Storage: Storage{
			AllowedHostPaths: []string{"/srv/data"},
			AllowedVolumes:   []string{"cache"},
		},
		Lifecycle: Lifecycle{
			IdleTimeout:        Duration{30 * time.Minute},
			ReaperInterval:     Duration{2 * time.Second},
			InstanceID:         "node-a",
			SleepAfterIdle:     Duration{10 * time.Minute},
			SleepAction:        "stop",
			SleepRetention:     Duration{48 * time.Hour},
			TestMinIdleSeconds: 5,
		},
		Store: Store{Dir: "/var/lib/sandboxd"},
		Egress: Egress{
			DNSUpstream:   []string{"192.0.2.53", "192.0.2.54:5353"},
			DefaultPolicy: EgressPolicy{DefaultAction: "deny", Egress: []EgressRule{{Action: "allow", Target: "pypi.org"}}},
		},
		Pools: []Pool{
			{
				Name:           "py",
				Image:          "python:3.12",
				Size:           2,
				Entrypoint:     []string{"sleep", "infinity"},
				ResourceLimits: map[string]string{"cpu": "1", "memory": "1Gi"},
				Env:            map[string]string{"A": "1"},
				NetworkPolicy:  EgressPolicy{DefaultAction: "deny", Egress: []EgressRule{{Action: "allow", Target: "pypi.org"}}},
			},
			{Name: "node", Image: "node:22"},
		},
		Path: path,
	}

	// The document must set every key to a value other than its default, or a key that is
	// not decoded would go unnoticed. runtime.type has no other valid value; Insecure is
	// not read from the file. The [sandbox] hardening keys are those of [docker] under
	// their new names (TestSandboxHardening).
	for _, f := range sameLeaves(reflect.ValueOf(want), reflect.ValueOf(Default()), "") {
		if f != ".Runtime.Type" && f != ".Server.Insecure" && f != ".Path" && f != ".Ignored" && !strings.HasPrefix(f, ".Sandbox.Hardening.") {
			t.Errorf("test document leaves %s at its default", f)
		}
	}

	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load =\n%+v\nwant\n%+v", got, want)
	}
}

// sameLeaves returns the fields under prefix where a and b are equal; slices, maps and
// durations count as single values.
func sameLeaves(a, b reflect.Value, prefix string) []string {
	if a.Kind() != reflect.Struct || a.Type() == reflect.TypeFor[Duration]() {
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			return []string{prefix}
		}
		return nil
	}
	var same []string
	for i := range a.NumField() {
		same = append(same, sameLeaves(a.Field(i), b.Field(i), prefix+"."+a.Type().Field(i).Name)...)
	}
	return same
}

func TestLoadUpstreamExample(t *testing.T) {
	isolate(t)
	c, err := Load("testdata/upstream-docker.toml")
	if err != nil {
		t.Fatal(err)
	}
	wantIgnored := []string{
		"egress.image",
		"egress.mode",
		"ingress",
		"renew_intent",
		"runtime.execd_image",
		"storage.volume_default_size",
		"store.path",
		"store.type",
	}
	if !slices.Equal(c.Ignored, wantIgnored) {
		t.Errorf("Ignored = %q, want %q", c.Ignored, wantIgnored)
	}
	if c.Server.MaxSandboxTimeoutSeconds != 86400 || c.Docker.NetworkMode != "bridge" ||
		len(c.Docker.DropCapabilities) != 9 || c.Addr() != "127.0.0.1:8080" {
		t.Errorf("upstream values not loaded: %+v", c)
	}
}

func TestLoadUpstreamKeys(t *testing.T) {
	isolate(t)
	path := writeConfig(t, `
[server]
timeout_keep_alive = 30
limit_concurrency = 1024
insecure = true

[log]
file_enabled = true
file_path = "/var/log/x.log"

[secure_runtime]
type = "gvisor"
docker_runtime = "runsc"
k8s_runtime_class = "gvisor"

[kubernetes]
namespace = "x"

[renew_intent]
redis.enabled = false
`)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"log.file_enabled",
		"log.file_path",
		"renew_intent",
		"secure_runtime.k8s_runtime_class",
		"secure_runtime.type",
		"server.insecure",
		"server.limit_concurrency",
		"server.timeout_keep_alive",
	}
	if !slices.Equal(c.Ignored, want) {
		t.Errorf("Ignored = %q, want %q", c.Ignored, want)
	}
	if c.Server.Insecure {
		t.Error("server.insecure in the file made the server insecure; only the flag and env may")
	}
	if c.Docker.OCIRuntime != "runsc" {
		t.Errorf("secure_runtime.docker_runtime gave docker runtime %q, want runsc", c.Docker.OCIRuntime)
	}
}

func TestLoadEnv(t *testing.T) {
	tests := []struct {
		name         string
		doc          string
		env          map[string]string
		wantKey      string
		wantInsecure bool
	}{
		{"file key", `server.api_key = "file"`, nil, "file", false},
		{"env overrides file", `server.api_key = "file"`, map[string]string{envAPIKey: "env"}, "env", false},
		{"env without file key", ``, map[string]string{envAPIKey: "env"}, "env", false},
		{"insecure YES", ``, map[string]string{envInsecure: "YES"}, "", true},
		{"insecure needs exactly YES", ``, map[string]string{envInsecure: "yes"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolate(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := Load(writeConfig(t, tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			if c.Server.APIKey != tt.wantKey || c.Server.Insecure != tt.wantInsecure {
				t.Errorf("api key %q insecure %v, want %q %v", c.Server.APIKey, c.Server.Insecure, tt.wantKey, tt.wantInsecure)
			}
		})
	}
}

func TestLoadTypeErrors(t *testing.T) {
	tests := []struct {
		doc  string
		want string
	}{
		{"[server]\n\nport = \"8080\"\n", `line 3: server.port: expected integer, got string`},
		{"server.port = 1.5\n", `line 1: server.port: expected integer, got float`},
		{"[server]\nhost = 1\n", `line 2: server.host: expected string, got integer`},
		{"[log]\nlevel = [\"INFO\"]\n", `line 2: log.level: expected string, got array`},
		{"[docker]\nno_new_privileges = \"yes\"\n", `line 2: docker.no_new_privileges: expected boolean, got string`},
		{"[docker]\ndrop_capabilities = \"ALL\"\n", `line 2: docker.drop_capabilities: expected array, got string`},
		{"[docker]\ndrop_capabilities = [\"ALL\", 1]\n", `line 2: docker.drop_capabilities[1]: expected string, got integer`},
		{"[docker]\npids_limit = 1979-05-27\n", `line 2: docker.pids_limit: expected integer, got datetime`},
		{"server = 3\n", `line 1: server: expected table, got integer`},
		{"[server.port]\n", `line 1: server.port: expected integer, got table`},
		{"[lifecycle]\nidle_timeout = true\n", `line 2: lifecycle.idle_timeout: expected integer seconds or duration string, got boolean`},
		{"[lifecycle]\nreaper_interval = \"soon\"\n", `line 2: lifecycle.reaper_interval: invalid duration "soon": want integer seconds or a duration such as "30s" or "5m"`},
		{"[lifecycle]\nreaper_interval = -1\n", `line 2: lifecycle.reaper_interval: duration must not be negative, got -1`},
		{"[secure_runtime]\ndocker_runtime = 1\n", `line 2: secure_runtime.docker_runtime: expected string, got integer`},
		{"[[pool]]\nname = \"a\"\nimage = \"i\"\nenv = 3\n", `line 4: pool[0].env: expected table, got integer`},
		{"[[pool]]\nname = \"a\"\nenv = { A = 1 }\n", `line 3: pool[0].env.A: expected string, got integer`},
		{"pool = 1\n", `line 1: pool: expected array, got integer`},
		// The TOML library keeps one position per dotted key, so a key repeated in several
		// [[pool]] tables is named with its index but without a line.
		{"[[pool]]\nsize = \"2\"\n[[pool]]\nsize = 1\n", `pool[0].size: expected integer, got string`},
		{"[server]\nport = \n", `line 2: expected value but found '\n' instead`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			isolate(t)
			path := writeConfig(t, tt.doc)
			_, err := Load(path)
			want := fmt.Sprintf("config %s: %s", path, tt.want)
			if err == nil || err.Error() != want {
				t.Errorf("Load(%q)\nerror %v\nwant  %s", tt.doc, err, want)
			}
		})
	}
}

func TestLoadValidation(t *testing.T) {
	tests := []struct {
		doc  string
		want []string // each a line of the error, after "config <path>: "
	}{
		{`server.port = 0`, []string{`server.port: must be between 1 and 65535, got 0`}},
		{`server.port = 65536`, []string{`server.port: must be between 1 and 65535, got 65536`}},
		{`server.host = ""`, []string{`server.host: must not be empty; use "0.0.0.0" to listen on all interfaces`}},
		{`server.max_sandbox_timeout_seconds = 59`, []string{`server.max_sandbox_timeout_seconds: must be 0 (no cap) or at least 60, got 59`}},
		{`server.max_sandbox_timeout_seconds = -1`, []string{`server.max_sandbox_timeout_seconds: must be 0 (no cap) or at least 60, got -1`}},
		{`server.max_body_bytes = 0`, []string{`server.max_body_bytes: must be positive, got 0`}},
		{`server.max_proxy_requests_per_sandbox = 0`, []string{`server.max_proxy_requests_per_sandbox: must be positive, got 0`}},
		{`server.max_proxy_requests_per_token = -1`, []string{`server.max_proxy_requests_per_token: must be positive, got -1`}},
		{`server.max_connections = 8`, []string{`server.max_connections: must be at least 16, got 8`}},
		{`server.idle_timeout = 0`, []string{`server.idle_timeout: must be positive`}},
		{`docker.log_max_size = "ten"`, []string{`docker.log_max_size: must be a size such as "10m" or "" (no rotation), got "ten"`}},
		{`docker.log_max_size = "0m"`, []string{`docker.log_max_size: must be a size such as "10m" or "" (no rotation), got "0m"`}},
		{`docker.log_max_files = 0`, []string{`docker.log_max_files: must be at least 1, got 0`}},
		{`docker.agent_transport = "direct"`, []string{`docker.agent_transport: must be "auto" or "exec", got "direct"`}},
		{`docker.disk_limit = "10 GB of disk"`, []string{`docker.disk_limit: must be a size such as "10G" or "" (no limit), got "10 GB of disk"`}},
		{`log.level = "TRACE"`, []string{`log.level: must be DEBUG, INFO, WARN or ERROR, got "TRACE"`}},
		{`runtime.type = "podman"`, []string{`runtime.type: "podman" is not supported; use "docker" or "kubernetes"`}},
		{"runtime.type = \"kubernetes\"\n[kubernetes]\nnamespace = \"Sandboxes\"\nagent_image = \"\"\nkubeconfig_path = \"kc\"\nimage_pull_policy = \"always\"\n" +
			"default_cpu_request = \"a lot\"\napi_timeout = 0\ntolerations = [{ operator = \"Exists\", value = \"x\", effect = \"NoWay\" }]", []string{
			`kubernetes.namespace: "Sandboxes" is not a Kubernetes name (lower-case letters, digits and '-', at most 63)`,
			`kubernetes.agent_image: must name a sandboxd image (images/sandboxd), which copies the agent into each pod`,
			`kubernetes.kubeconfig_path: "kc" is not an absolute path (~/ is allowed)`,
			`kubernetes.image_pull_policy: must be "", "Always", "IfNotPresent" or "Never", got "always"`,
			`kubernetes.default_cpu_request: must be a quantity such as "100m", got "a lot"`,
			`kubernetes.api_timeout: must be positive`,
			`kubernetes.tolerations[0].value: must be empty with operator "Exists"`,
			`kubernetes.tolerations[0].effect: must be "", "NoSchedule", "PreferNoSchedule" or "NoExecute", got "NoWay"`,
		}},
		{`runtime.agent_binaries = { "linux/arm64" = "bin/sandboxd", "arm64" = "/bin/sandboxd" }`, []string{
			`runtime.agent_binaries.arm64: "arm64" is not a sandbox platform such as "linux/arm64"`,
			`runtime.agent_binaries.linux/arm64: "bin/sandboxd" is not an absolute path (~/ is allowed)`,
		}},
		{`docker.network_mode = "host"`, []string{`docker.network_mode: "host" is refused: sandboxes would share the host's network stack and reach every service on it, defeating isolation; sandboxd proxies all execd traffic, so no host networking is needed; use "bridge", "none" or a network name`}},
		{`docker.network_mode = "container:abc"`, []string{`docker.network_mode: "container:abc" is refused: sharing another container's network namespace defeats sandbox isolation`}},
		{`docker.api_timeout = 0`, []string{`docker.api_timeout: must be positive`}},
		{`docker.pids_limit = -1`, []string{`docker.pids_limit: must not be negative (0 = no limit), got -1`}},
		{`docker.drop_capabilities = [""]`, []string{`docker.drop_capabilities[0]: "" is not a capability name such as "ALL" or "NET_RAW"`}},
		{`docker.add_capabilities = ["CHOWN", "SYS ADMIN"]`, []string{`docker.add_capabilities[1]: "SYS ADMIN" is not a capability name such as "CHOWN"`}},
		{`storage.allowed_host_paths = ["/srv", "data"]`, []string{`storage.allowed_host_paths[1]: "data" is not an absolute path`}},
		{`storage.allowed_volumes = ["", "/srv"]`, []string{
			`storage.allowed_volumes[0]: must not be empty`,
			`storage.allowed_volumes[1]: "/srv" is a path, not a volume name; host directories go in storage.allowed_host_paths`,
		}},
		{`lifecycle.reaper_interval = 0`, []string{`lifecycle.reaper_interval: must be positive`}},
		{`lifecycle.sleep_action = "delete"`, []string{`lifecycle.sleep_action: must be "pause" or "stop", got "delete"`}},
		{`lifecycle.sleep_after_idle = "10s"`, []string{`lifecycle.sleep_after_idle: must be 0 (off) or between 30s and 24h`}},
		{"lifecycle.test_min_idle_seconds = 40", []string{`lifecycle.test_min_idle_seconds: must be between 0 and 30`}},
		{`egress.dns_upstream = ["192.0.2.53", "127.0.0.1:5353", "::1", "dns.example"]`, []string{
			`egress.dns_upstream: "127.0.0.1:5353" is a loopback address: policed sandboxes resolve from their own network namespace and can never reach the host's loopback (every lookup would fail); give an address of the host or a resolver they can route to (unset, Docker's embedded resolver is used on a user network)`,
			`egress.dns_upstream: "::1" is a loopback address: policed sandboxes resolve from their own network namespace and can never reach the host's loopback (every lookup would fail); give an address of the host or a resolver they can route to (unset, Docker's embedded resolver is used on a user network)`,
			`egress.dns_upstream: "dns.example" is not an IP or IP:port (a name would be resolved through the policy it enforces)`,
		}},
		{`store.dir = "state"`, []string{`store.dir: "state" is not an absolute path (~/ is allowed)`}},
		{"[[pool]]\nimage = \"i\"\nsize = -1", []string{`pool[0].name: must not be empty`, `pool[0].size: must not be negative, got -1`}},
		{"[[pool]]\nname = \"a\"", []string{`pool[0].image: must not be empty`}},
		{"[[pool]]\nname = \"a\"\nimage = \"i\"\n[[pool]]\nname = \"b\"\nimage = \"i\"\n[[pool]]\nname = \"a\"\nimage = \"i\"",
			[]string{`pool[2].name: "a" is also the name of pool[0]`}},
		{"server.port = 0\nlog.level = \"x\"", []string{
			`server.port: must be between 1 and 65535, got 0`,
			`log.level: must be DEBUG, INFO, WARN or ERROR, got "x"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.doc, func(t *testing.T) {
			isolate(t)
			path := writeConfig(t, tt.doc)
			_, err := Load(path)
			var want []string
			for _, w := range tt.want {
				want = append(want, fmt.Sprintf("config %s: %s", path, w))
			}
			if err == nil || err.Error() != strings.Join(want, "\n") {
				t.Errorf("error:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
			}
		})
	}
}

func TestLoadRuntimeConflict(t *testing.T) {
	isolate(t)
	doc := "[docker]\nruntime = \"runc\"\n[secure_runtime]\ndocker_runtime = \"runsc\"\n"
	_, err := Load(writeConfig(t, doc))
	if err == nil || !strings.Contains(err.Error(), `docker.runtime "runc" and secure_runtime.docker_runtime "runsc" disagree`) {
		t.Errorf("error %v, want the two keys named", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	isolate(t)
	_, err := Load(filepath.Join(t.TempDir(), "absent.toml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v, want fs.ErrNotExist", err)
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		data    any
		want    time.Duration
		wantErr string
	}{
		{int64(0), 0, ""},
		{int64(90), 90 * time.Second, ""},
		{"90s", 90 * time.Second, ""},
		{"1h30m", 90 * time.Minute, ""},
		{"250ms", 250 * time.Millisecond, ""},
		{"0", 0, ""},
		{"90", 0, `invalid duration "90"`},
		{"-5s", 0, "duration must not be negative, got -5s"},
		{int64(-5), 0, "duration must not be negative, got -5"},
		{int64(1) << 40, 0, "1099511627776 seconds is out of range"},
		{1.5, 0, "expected integer seconds or duration string, got float"},
		{true, 0, "expected integer seconds or duration string, got boolean"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.data), func(t *testing.T) {
			var d Duration
			err := d.UnmarshalTOML(tt.data)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || d.Duration != tt.want {
				t.Errorf("got %v, %v; want %v", d.Duration, err, tt.want)
			}
		})
	}
}

func TestTildeExpansion(t *testing.T) {
	home := isolate(t)
	doc := "store.dir = \"~/state\"\nstorage.allowed_host_paths = [\"~\", \"~/data\", \"/srv\"]\n"
	if err := os.WriteFile(filepath.Join(home, "sb.toml"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load("~/sb.toml")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(home, "sb.toml"); c.Path != want {
		t.Errorf("Path = %q, want %q", c.Path, want)
	}
	if want := filepath.Join(home, "state"); c.Store.Dir != want {
		t.Errorf("store.dir = %q, want %q", c.Store.Dir, want)
	}
	if want := []string{home, filepath.Join(home, "data"), "/srv"}; !slices.Equal(c.Storage.AllowedHostPaths, want) {
		t.Errorf("allowed_host_paths = %q, want %q", c.Storage.AllowedHostPaths, want)
	}
}

func TestResolvePath(t *testing.T) {
	tests := []struct {
		name, flag, env string
		want            string // "~" stands for HOME
		wantExplicit    bool
	}{
		{"default", "", "", "~/.sandbox.toml", false},
		{"env", "", "/etc/sb.toml", "/etc/sb.toml", true},
		{"flag beats env", "/x.toml", "/etc/sb.toml", "/x.toml", true},
		{"flag tilde", "~/y.toml", "", "~/y.toml", true},
		{"env tilde", "", "~/z.toml", "~/z.toml", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := isolate(t)
			t.Setenv(envConfigPath, tt.env)
			want := strings.Replace(tt.want, "~", home, 1)
			got, explicit := ResolvePath(tt.flag)
			if got != want || explicit != tt.wantExplicit {
				t.Errorf("ResolvePath(%q) = %q, %v; want %q, %v", tt.flag, got, explicit, want, tt.wantExplicit)
			}
		})
	}
}

func TestAPIKeysAll(t *testing.T) {
	tests := []struct {
		key  string
		keys []string
		want []string
	}{
		{"", nil, nil},
		{"a", nil, []string{"a"}},
		{" a ", []string{"b", "a", "", "  ", "b", "c"}, []string{"a", "b", "c"}},
		{"", []string{"b"}, []string{"b"}},
	}
	for _, tt := range tests {
		var c Config
		c.Server.APIKey, c.Server.APIKeys = tt.key, tt.keys
		if got := c.APIKeysAll(); !slices.Equal(got, tt.want) {
			t.Errorf("APIKeysAll(%q, %q) = %q, want %q", tt.key, tt.keys, got, tt.want)
		}
	}
}

func TestAddr(t *testing.T) {
	tests := []struct {
		host string
		want string
	}{
		{"127.0.0.1", "127.0.0.1:8080"},
		{"::1", "[::1]:8080"},
		{"[::1]", "[::1]:8080"},
		{"localhost", "localhost:8080"},
	}
	for _, tt := range tests {
		isolate(t)
		c, err := Load(writeConfig(t, fmt.Sprintf("server.host = %q", tt.host)))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Addr(); got != tt.want {
			t.Errorf("host %q: Addr() = %q, want %q", tt.host, got, tt.want)
		}
	}
}

func TestSlogLevel(t *testing.T) {
	tests := []struct {
		level string
		want  slog.Level
	}{
		{"debug", slog.LevelDebug},
		{"INFO", slog.LevelInfo},
		{"Warn", slog.LevelWarn},
		{"WARNING", slog.LevelWarn},
		{"error", slog.LevelError},
	}
	for _, tt := range tests {
		isolate(t)
		c, err := Load(writeConfig(t, fmt.Sprintf("log.level = %q", tt.level)))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Log.SlogLevel(); got != tt.want {
			t.Errorf("level %q: SlogLevel() = %v, want %v", tt.level, got, tt.want)
		}
	}
}
