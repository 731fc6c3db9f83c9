package config

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// WriteExample writes a commented configuration file that works as is and is secure: a
// freshly generated API key, loopback listener, bridge network, no host mounts. The file is
// private (mode 0600, also when it replaces one). An existing file is replaced only if force
// is set. example is "" or "docker". It returns the API key written.
func WriteExample(path, example string, force bool) (apiKey string, err error) {
	if example != "" && example != "docker" {
		return "", fmt.Errorf("unknown example %q; valid examples: docker", example)
	}
	p, err := expandHome(path)
	if err != nil {
		return "", err
	}
	apiKey = newAPIKey()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", fmt.Errorf("write config: %w", err)
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(p, flags, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("config file already exists at %s; pass --force to overwrite it", p)
	}
	if err != nil {
		return "", fmt.Errorf("write config: %w", err)
	}
	// Before the key is written: the mode of a replaced file, or a umask, must not expose it.
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.WriteString(strings.Replace(dockerExample, apiKeyPlaceholder, apiKey, 1))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p) // a partial file would fail to load or hold a truncated key
		return "", fmt.Errorf("write config %s: %w", p, err)
	}
	return apiKey, nil
}

// newAPIKey returns 32 random bytes as unpadded URL-safe base64 (43 characters).
func newAPIKey() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails: it aborts the program if the OS has no randomness
	return base64.RawURLEncoding.EncodeToString(b)
}

const apiKeyPlaceholder = "API_KEY_PLACEHOLDER"

// dockerExample is the "docker" example; its values are Default()'s.
const dockerExample = `# sandboxd configuration (example "docker").
#
# Sections and keys follow opensandbox-server's configuration file where they apply, so an
# opensandbox-server file also loads; keys sandboxd does not use are logged and ignored.
# Durations are integer seconds or strings such as "30s", "5m", "1h".
#
# This file holds the API key: keep it readable by its owner only (mode 0600).

[server]
# Address to listen on. 127.0.0.1 serves this machine only; set the machine's address or
# "0.0.0.0" to serve others.
host = "127.0.0.1"
# TCP port, 1..65535.
port = 8080
# Clients send this key in the OPEN-SANDBOX-API-KEY header. It was generated at random
# for this file. Env OPENSANDBOX_SERVER_API_KEY overrides it.
api_key = "API_KEY_PLACEHOLDER"
# Further keys accepted too, e.g. the previous key while clients move to a new one.
api_keys = []
# Public host name or address put in the endpoints returned to clients, when clients reach
# sandboxd by another name than host (e.g. behind NAT or a proxy).
# eip = "sandbox.example.com"
# Longest timeout a client may request for a sandbox, in seconds: 0 = no cap, else >= 60.
max_sandbox_timeout_seconds = 0
# Web origins allowed to call the API from a browser (CORS), e.g. ["https://app.example.com"].
# Empty: no CORS headers, browsers on other origins are refused.
cors_origins = []
# Largest JSON request body, in bytes. File uploads stream and are not bound by it.
max_body_bytes = 1048576
# Proxied requests (commands, files, forwarded ports) in flight at once to one sandbox, and
# with one credential (a sandbox's token, an API key); more are refused with 429.
max_proxy_requests_per_sandbox = 128
max_proxy_requests_per_token = 512
# Open client connections; past it, or when file descriptors run out, the longest-idle
# connections are closed first so that new requests are still served.
max_connections = 4096
# Keep-alive connections idle this long are closed.
idle_timeout = "90s"
# How long a server in a sandbox reached through the proxy route (a port other than
# execd's) may take to send its response headers before the request is answered
# 504 BACKEND_TIMEOUT. "0s": no bound.
proxy_read_timeout = "300s"

[log]
# DEBUG, INFO, WARN or ERROR.
level = "INFO"
# One line per request at INFO: method, path, status, bytes, duration, sandbox and request
# id (never the query, headers or bodies).
access = true

[runtime]
# Where sandboxes run: "docker", or "kubernetes" (pods; see the README's Kubernetes section).
type = "docker"
# The agent run inside each sandbox is a static Linux sandboxd of the image's platform.
# Release binaries embed linux/amd64 and linux/arm64; a plain build on Linux has only its own.
# Others (or replacements) by platform:
# agent_binaries = { "linux/arm64" = "/opt/sandboxd/sandboxd-linux-arm64" }

[sandbox]
# Let a create ask for user namespaces inside its sandbox (extensions
# "sandboxd.io/nested": "true"), so that an agent can sandbox its own commands with
# bubblewrap. Such a sandbox runs as a non-root uid:gid (default 1000:1000), with
# Docker's seccomp profile plus the calls user namespaces need and an unmasked /proc.
# It adds kernel attack surface: see SECURITY.md, "Nested sandboxes".
allow_nested = false

[docker]
# Docker Engine endpoint, e.g. "unix:///var/run/docker.sock" or "npipe:////./pipe/docker_engine".
# Empty: env DOCKER_HOST, else the docker CLI's current context, else the local engine
# (Docker Desktop's socket on macOS, its named pipe on Windows).
host = ""
# Network of the sandboxes. Unset: the bridge network "sandboxd", created at start if
# missing, on which sandboxes reach the outside but not each other. Or "bridge" (Docker's
# default network, where they can), "none" (no network at all) or the name of an existing
# user-defined network. "host" is refused: it would defeat isolation. sandboxd never
# publishes sandbox ports; clients reach them through sandboxd's proxy.
# network_mode = "bridge"
# Timeout of one Docker Engine API call.
api_timeout = 180
# Capabilities dropped from every sandbox, then those added back. The added ones let a root
# shell install packages and run ordinary programs: CHOWN (change file owners),
# DAC_OVERRIDE (bypass file permission bits), FOWNER (chmod/utime others' files), FSETID
# (keep setuid bits on edit), KILL (signal other users' processes), SETGID and SETUID
# (switch group and user), SETPCAP (drop own capabilities), NET_BIND_SERVICE (ports < 1024).
drop_capabilities = ["ALL"]
add_capabilities = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE"]
# Processes cannot gain privileges through setuid binaries.
no_new_privileges = true
# Most processes in one sandbox; 0 = no limit.
pids_limit = 4096
# Seccomp and AppArmor profiles; "" = Docker's default profile.
seccomp_profile = ""
apparmor_profile = ""
# Memory and CPU of a sandbox whose request sets none ("512Mi", "2Gi"; "500m", "2").
default_memory = "2Gi"
default_cpu = "1"
# Mount each sandbox's root filesystem read-only.
read_only_rootfs = false
# Run sandboxes as this user, e.g. "1000:1000"; "" = the image's user.
user = ""
# OCI runtime of the sandboxes, e.g. "runsc" for gVisor; "" = Docker's default (runc).
runtime = ""
# Rotation of each sandbox's container log (json-file driver): size of one file and how
# many are kept. "" = no rotation.
log_max_size = "10m"
log_max_files = 3
# Size limit of each sandbox's writable root filesystem, e.g. "10G"; "" = none. Needs a
# storage driver that supports it (overlay2 on xfs mounted with pquota, btrfs, zfs).
disk_limit = ""
# How sandboxd reaches each sandbox's agent: "auto" = straight to the agent's socket when
# sandboxd is root on the engine's own host, else over a Docker exec stream; "exec" = always
# over the exec stream.
agent_transport = "auto"

[storage]
# Host directories under which sandboxes may bind-mount host paths (absolute, ~/ allowed).
# Empty: no host path can be mounted. Docker's socket and data directory never can.
allowed_host_paths = []
# Named Docker volumes sandboxes may mount besides the ones sandboxd created.
allowed_volumes = []

[lifecycle]
# Remove a sandbox after it has been idle this long; 0 = never (its timeout still applies).
idle_timeout = 0
# How often expired sandboxes are looked for.
reaper_interval = "5s"
# Identifies this sandboxd's containers, so that two instances sharing one Docker Engine
# leave each other's sandboxes alone. Unset: generated once and kept in the store directory.
# instance_id = "sandboxd-1"
# Put sandboxes to sleep after this long idle instead of leaving them running, unless a
# sandbox sets extensions["access.pause.after.idle.seconds"] itself; 0 = off. "pause"
# freezes them (memory kept), "stop" ends their processes (files kept, memory released);
# the next call wakes them (docs/sleep.md).
sleep_after_idle = 0
sleep_action = "pause"
# A sandbox put to sleep at its expiry (extensions["sandboxd.io/expire-action"]) is deleted
# after this long asleep.
sleep_retention = "168h"

[store]
# Directory holding sandboxd's state.
dir = "~/.sandboxd"

[egress]
# Resolvers (IP or IP:port) that a policed sandbox's allowed names are forwarded to. Empty:
# the resolvers Docker gives the sandbox's egress helper.
# dns_upstream = ["192.0.2.53"]
# networkPolicy of every sandbox created without one. Unset: none (unrestricted egress).
# default_policy = { default_action = "deny", egress = [{ action = "allow", target = "pypi.org" }] }

# Pools keep sandboxes created and ready, so that creating one from the same image is
# instant. One [[pool]] table per pool:
# [[pool]]
# name = "python"
# image = "python:3.12-slim"
# size = 2
# entrypoint = ["sleep", "infinity"]
# resource_limits = { cpu = "1", memory = "1Gi" }
# env = { PYTHONUNBUFFERED = "1" }
# networkPolicy of the pool's sandboxes, enforced before one is handed out. Unset: none
# ([egress] default_policy applies).
# network_policy = { default_action = "deny", egress = [{ action = "allow", target = "pypi.org" }] }
`
