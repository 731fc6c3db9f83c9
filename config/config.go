// Package config loads sandboxd's configuration: a TOML file whose section and key names
// follow opensandbox-server's where they apply, plus sandboxd's own keys, with defaults and
// environment overrides, validated into one typed Config handed to everything at start.
//
// Only fields with a toml tag are read from the file; the others are set by Load itself
// (Path, Ignored) or by the caller (Server.Insecure).
package config

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Config is the whole resolved configuration.
type Config struct {
	Server  Server  `toml:"server"`
	Log     Log     `toml:"log"`
	Runtime Runtime `toml:"runtime"`
	Docker  Docker  `toml:"docker"`
	Sandbox Sandbox `toml:"sandbox"`
	// Kubernetes is read when Runtime.Type is "kubernetes".
	Kubernetes Kubernetes `toml:"kubernetes"`
	Storage    Storage    `toml:"storage"`
	Lifecycle  Lifecycle  `toml:"lifecycle"`
	Store      Store      `toml:"store"`
	Egress     Egress     `toml:"egress"`
	Pools      []Pool     `toml:"pool"` // [[pool]] tables

	Path    string   // file it was loaded from ("" if none)
	Ignored []string // dotted keys present in the file that sandboxd does not use, for logging
}

// Server is the [server] section: the HTTP listener and its authentication.
type Server struct {
	// Host is the listen address. Unlike upstream (0.0.0.0), sandboxd listens on loopback
	// unless told otherwise.
	Host string `toml:"host"`
	Port int    `toml:"port"`
	// APIKey is required in the OPEN-SANDBOX-API-KEY header; env OPENSANDBOX_SERVER_API_KEY
	// overrides it.
	APIKey string `toml:"api_key"`
	// APIKeys are further accepted keys, so that a key can be rotated without downtime.
	APIKeys []string `toml:"api_keys"`
	// EIP is the public host put into returned endpoints.
	EIP string `toml:"eip"`
	// MaxSandboxTimeoutSeconds caps a sandbox's requested timeout; 0 = no cap.
	MaxSandboxTimeoutSeconds int      `toml:"max_sandbox_timeout_seconds"`
	CORSOrigins              []string `toml:"cors_origins"`
	// MaxBodyBytes bounds JSON request bodies; file uploads stream and are not bound by it.
	MaxBodyBytes int64 `toml:"max_body_bytes"`
	// MaxProxyRequestsPerSandbox and MaxProxyRequestsPerToken cap the proxied requests in
	// flight to one sandbox and with one credential (a sandbox token, an API key); more
	// are refused with 429, so a sandbox or a token holder cannot hold unbounded memory
	// and goroutines of sandboxd.
	MaxProxyRequestsPerSandbox int `toml:"max_proxy_requests_per_sandbox"`
	MaxProxyRequestsPerToken   int `toml:"max_proxy_requests_per_token"`
	// MaxConnections bounds open client connections: past it (or when descriptors run
	// out) the longest-idle connections are closed so that a new request is served.
	MaxConnections int `toml:"max_connections"`
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout Duration `toml:"idle_timeout"`
	// ProxyReadTimeout bounds the wait for the response headers of a server in a
	// sandbox reached through the proxy route (any port but execd's); past it the
	// request is answered 504 BACKEND_TIMEOUT, as upstream's proxy does. 0 = no bound.
	ProxyReadTimeout Duration `toml:"proxy_read_timeout"`
	// Insecure allows starting without an API key (loopback only). It is never read from
	// the file: flag --insecure or env OPENSANDBOX_INSECURE_SERVER=YES sets it.
	Insecure bool
}

// Log is the [log] section.
type Log struct {
	// Level is DEBUG, INFO, WARN (or WARNING) or ERROR; Load upper-cases it.
	Level string `toml:"level"`
	// Access logs one line per request at INFO (method, path, status, bytes, duration,
	// sandbox and request id; never the query, headers or bodies).
	Access bool `toml:"access"`
}

// SlogLevel returns Level as a slog level; INFO for a level Load would have refused.
func (l Log) SlogLevel() slog.Level {
	level, _ := parseLevel(l.Level)
	return level
}

func parseLevel(s string) (slog.Level, bool) {
	switch strings.ToUpper(s) {
	case "DEBUG":
		return slog.LevelDebug, true
	case "INFO":
		return slog.LevelInfo, true
	case "WARN", "WARNING":
		return slog.LevelWarn, true
	case "ERROR":
		return slog.LevelError, true
	}
	return slog.LevelInfo, false
}

// Runtime is the [runtime] section. Type is "docker" or "kubernetes".
type Runtime struct {
	Type string `toml:"type"`
	// AgentBinaries names a static sandboxd binary per sandbox platform
	// ("linux/arm64" = "/path/sandboxd-linux-arm64"), for images whose
	// platform this sandboxd neither is nor embeds an agent for.
	AgentBinaries map[string]string `toml:"agent_binaries"`
}

// Sandbox is the [sandbox] section: what every sandbox may do, whatever the
// engine.
type Sandbox struct {
	// AllowNested lets a create ask for user namespaces inside its sandbox
	// (extensions "sandboxd.io/nested"), for agents that sandbox their own
	// commands with bubblewrap; off by default (SECURITY.md).
	AllowNested bool `toml:"allow_nested"`
	// Hardening is what [sandbox] gave, as read; Load merges it into
	// Docker's, where the values in force are kept (Config.Hardening).
	Hardening
}

// Hardening is how every sandbox is confined, on any runtime (Docker, the
// pods of Kubernetes): the [sandbox] keys below, which [docker] accepts
// too. Config.Hardening returns the values in force.
type Hardening struct {
	DropCapabilities []string `toml:"drop_capabilities"`
	AddCapabilities  []string `toml:"add_capabilities"`
	NoNewPrivileges  bool     `toml:"no_new_privileges"`
	// PidsLimit bounds the processes of one sandbox; 0 = no limit.
	PidsLimit int64 `toml:"pids_limit"`
	// SeccompProfile and ApparmorProfile name profiles; "" = the engine's default profile.
	SeccompProfile  string `toml:"seccomp_profile"`
	ApparmorProfile string `toml:"apparmor_profile"`
	// DefaultMemory and DefaultCPU apply when a request sets no resource limits.
	DefaultMemory  string `toml:"default_memory"`
	DefaultCPU     string `toml:"default_cpu"`
	ReadOnlyRootfs bool   `toml:"read_only_rootfs"`
	// User runs sandboxes as this user (e.g. "1000:1000"); "" = the image's user.
	User string `toml:"user"`
}

// Hardening returns the sandbox hardening settings in force, whichever of
// [sandbox] and [docker] gave them.
func (c Config) Hardening() Hardening { return c.Docker.Hardening }

// Docker is the [docker] section: how sandboxes are created on the Docker Engine.
type Docker struct {
	// Host is the Docker endpoint; "" = env DOCKER_HOST, else the local unix socket.
	Host string `toml:"host"`
	// NetworkMode is "" (sandboxd's own network, whose sandboxes cannot reach each
	// other), "bridge", "none" or a user-defined network name; never "host".
	NetworkMode string   `toml:"network_mode"`
	APITimeout  Duration `toml:"api_timeout"`
	// Hardening holds the values in force (see Config.Hardening); its keys
	// are accepted here as aliases of [sandbox]'s.
	Hardening
	// OCIRuntime is the Docker runtime name (e.g. "runsc"); also read from upstream's
	// [secure_runtime] docker_runtime.
	OCIRuntime string `toml:"runtime"`
	// LogMaxSize and LogMaxFiles rotate each sandbox's container log (json-file driver:
	// max-size, max-file), so that output of a sandbox's main process cannot fill the
	// host's disk.
	LogMaxSize  string `toml:"log_max_size"`
	LogMaxFiles int    `toml:"log_max_files"`
	// DiskLimit caps each sandbox's writable root filesystem (e.g. "10G"; Docker's
	// storage-opt size); "" = no cap. Only some storage drivers support it (overlay2 on
	// xfs with pquota, btrfs, zfs, devicemapper); elsewhere creates fail with a clear error.
	DiskLimit string `toml:"disk_limit"`
	// AgentTransport is how sandboxd reaches each sandbox's agent: "auto" (straight to
	// its socket when sandboxd is root on the engine's host, else a Docker exec stream)
	// or "exec" (always the exec stream).
	AgentTransport string `toml:"agent_transport"`
}

// Kubernetes is the [kubernetes] section: how sandboxes are created as pods when
// runtime.type is "kubernetes". The [sandbox] hardening keys (capabilities, user,
// read_only_rootfs, default_cpu/memory) apply to pods as to containers.
type Kubernetes struct {
	// Kubeconfig is a kubeconfig file; "" = $KUBECONFIG, else the in-cluster
	// config (the pod's service account).
	Kubeconfig string `toml:"kubeconfig_path"`
	// Context selects a kubeconfig context; "" = the file's current one.
	Context string `toml:"context"`
	// Namespace holds the sandbox pods, their NetworkPolicies and the Lease.
	Namespace string `toml:"namespace"`
	// ServiceAccount runs the sandbox pods; "" = the namespace's default. Its token is
	// never mounted into them.
	ServiceAccount string `toml:"service_account"`
	// RuntimeClassName picks a RuntimeClass (gVisor, Kata) for sandbox pods.
	RuntimeClassName string            `toml:"runtime_class_name"`
	NodeSelector     map[string]string `toml:"node_selector"`
	Tolerations      []Toleration      `toml:"tolerations"`
	ImagePullSecrets []string          `toml:"image_pull_secrets"`
	// AgentImage is a sandboxd image (images/sandboxd): an init container of it copies
	// the agent into each sandbox pod.
	AgentImage string `toml:"agent_image"`
	// ImagePullPolicy of sandbox and agent containers: "" = Kubernetes' default,
	// "Always", "IfNotPresent" or "Never" (images loaded on the nodes).
	ImagePullPolicy string `toml:"image_pull_policy"`
	// DefaultCPURequest and DefaultMemoryRequest are what the scheduler reserves for a
	// sandbox that asks for no resourceRequests (its limits stay [docker] default_*).
	DefaultCPURequest    string `toml:"default_cpu_request"`
	DefaultMemoryRequest string `toml:"default_memory_request"`
	// APITimeout bounds each non-streaming call to the API server.
	APITimeout Duration `toml:"api_timeout"`
	// LeaseName is the coordination.k8s.io Lease through which one replica at a time
	// reaps and fills pools.
	LeaseName string `toml:"lease_name"`
}

// Toleration is one toleration of sandbox pods, as in a pod spec.
type Toleration struct {
	Key      string `toml:"key"`
	Operator string `toml:"operator"` // "Equal" (default) or "Exists"
	Value    string `toml:"value"`
	Effect   string `toml:"effect"` // "", "NoSchedule", "PreferNoSchedule" or "NoExecute"
}

// Storage is the [storage] section: what sandboxes may mount.
type Storage struct {
	// AllowedHostPaths are the host directories under which bind mounts are allowed;
	// empty denies all host mounts.
	AllowedHostPaths []string `toml:"allowed_host_paths"`
	// AllowedVolumes are named volumes usable besides those sandboxd created.
	AllowedVolumes []string `toml:"allowed_volumes"`
}

// Lifecycle is the [lifecycle] section.
type Lifecycle struct {
	// IdleTimeout removes sandboxes idle this long; 0 = off.
	IdleTimeout    Duration `toml:"idle_timeout"`
	ReaperInterval Duration `toml:"reaper_interval"`
	// InstanceID labels this instance's containers; "" = derived and persisted by the caller.
	InstanceID string `toml:"instance_id"`
	// SleepAfterIdle puts a sandbox that sets no access.pause.after.idle.seconds to sleep
	// after this long idle, by SleepAction ("pause" or "stop"); 0 = off (docs/sleep.md).
	SleepAfterIdle Duration `toml:"sleep_after_idle"`
	SleepAction    string   `toml:"sleep_action"`
	// SleepRetention deletes a sandbox asleep at its expiry after this long (7 days by default).
	SleepRetention Duration `toml:"sleep_retention"`
	// TestMinIdleSeconds lowers the smallest accepted access.pause.after.idle.seconds
	// below the wire's 30, for tests only; 0 = 30.
	TestMinIdleSeconds int `toml:"test_min_idle_seconds"`
}

// Store is the [store] section: where sandboxd keeps its state.
type Store struct {
	Dir string `toml:"dir"`
}

// Pool is one [[pool]] table: a number of sandboxes kept warm from one image.
type Pool struct {
	Name           string            `toml:"name"`
	Image          string            `toml:"image"`
	Size           int               `toml:"size"`
	Entrypoint     []string          `toml:"entrypoint"`
	ResourceLimits map[string]string `toml:"resource_limits"`
	Env            map[string]string `toml:"env"`
	// NetworkPolicy is the networkPolicy of the pool's sandboxes; unset (no
	// default_action nor egress) = none, so [egress] default_policy applies.
	NetworkPolicy EgressPolicy `toml:"network_policy"`
}

// Egress is the [egress] section: how networkPolicy is enforced.
type Egress struct {
	// DNSUpstream are the resolvers (IP or IP:port) the egress daemon forwards allowed names
	// to; empty = the resolvers Docker gives the helper container.
	DNSUpstream []string `toml:"dns_upstream"`
	// DefaultPolicy is the networkPolicy of every sandbox created without one; unset (no
	// default_action) = none.
	DefaultPolicy EgressPolicy `toml:"default_policy"`
}

// EgressPolicy is a networkPolicy written in TOML.
type EgressPolicy struct {
	DefaultAction string       `toml:"default_action"`
	Egress        []EgressRule `toml:"egress"`
}

// EgressRule is one rule of an EgressPolicy.
type EgressRule struct {
	Action string `toml:"action"`
	Target string `toml:"target"`
}

// Duration is a time.Duration written in TOML as integer seconds or as a Go duration
// string such as "30m".
type Duration struct{ time.Duration }

// Default returns the configuration used for every key the file does not set.
func Default() Config {
	c := Config{
		Server: Server{
			Host:         "127.0.0.1",
			Port:         8080,
			MaxBodyBytes: 1 << 20,
			// A sandbox's commands, file calls and forwarded ports together; SDKs open a
			// few at a time.
			MaxProxyRequestsPerSandbox: 128,
			MaxProxyRequestsPerToken:   512,
			MaxConnections:             4096,
			IdleTimeout:                Duration{90 * time.Second},
			ProxyReadTimeout:           Duration{300 * time.Second},
		},
		Log:     Log{Level: "INFO", Access: true},
		Runtime: Runtime{Type: "docker"},
		Docker: Docker{
			APITimeout: Duration{180 * time.Second},
			Hardening: Hardening{DropCapabilities: []string{"ALL"},
				// Docker's default set minus AUDIT_WRITE, MKNOD, NET_RAW, SETFCAP and SYS_CHROOT:
				// what a root shell needs to install packages and run ordinary programs.
				AddCapabilities: []string{
					"CHOWN",            // change file owners (package managers, tar)
					"DAC_OVERRIDE",     // root bypasses file permission bits, as usual
					"FOWNER",           // chmod/utime files root does not own
					"FSETID",           // keep setuid/setgid bits when root edits a file
					"KILL",             // signal processes of other users in the sandbox
					"SETGID",           // switch group (su, sudo, daemons dropping privileges)
					"SETUID",           // switch user (same)
					"SETPCAP",          // drop capabilities from its own bounding set
					"NET_BIND_SERVICE", // bind ports below 1024 inside the sandbox
				},
				NoNewPrivileges: true,
				PidsLimit:       4096,
				DefaultMemory:   "2Gi",
				DefaultCPU:      "1",
			},
			LogMaxSize:     "10m",
			LogMaxFiles:    3,
			AgentTransport: "auto",
		},
		Kubernetes: Kubernetes{
			Namespace:            "sandboxd",
			AgentImage:           "sandboxd:latest",
			DefaultCPURequest:    "100m",
			DefaultMemoryRequest: "128Mi",
			APITimeout:           Duration{60 * time.Second},
			LeaseName:            "sandboxd-leader",
		},
		Lifecycle: Lifecycle{ReaperInterval: Duration{5 * time.Second}, SleepAction: "pause", SleepRetention: Duration{7 * 24 * time.Hour}},
		Store:     Store{Dir: "~/.sandboxd"},
	}
	return c
}

// APIKeysAll returns every accepted API key: APIKey then APIKeys, trimmed, without empty
// entries or duplicates.
func (c Config) APIKeysAll() []string {
	var keys []string
	seen := make(map[string]bool)
	for _, k := range append([]string{c.Server.APIKey}, c.Server.APIKeys...) {
		k = strings.TrimSpace(k)
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		keys = append(keys, k)
	}
	return keys
}

// Addr returns the listen address host:port, bracketing IPv6 hosts.
func (c Config) Addr() string {
	return net.JoinHostPort(c.Server.Host, strconv.Itoa(c.Server.Port))
}
