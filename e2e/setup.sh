#!/usr/bin/env bash
# Prepares a Debian machine, as root, for e2e/run.sh:
#   - installs what is missing of docker.io, busybox-static, bubblewrap, debootstrap,
#     qemu-user-static and binfmt-support, and registers arm64 emulation;
#   - starts the Docker engine if it does not answer (in the background,
#     logging to $SANDBOXD_DOCKERD_LOG);
#   - builds the test images (images/build.sh);
#   - installs the TypeScript SDK used by the e2e tests (e2e/ts);
#   - installs chromium and playwright-core for the console's browser test
#     (e2e/console).
# Each step is skipped when its result is already there, so a second run is a
# fast no-op.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dockerd_log=${SANDBOXD_DOCKERD_LOG:-/var/log/sandboxd-dockerd.log}

log() { printf '==> setup: %s\n' "$*"; }
die() {
	printf 'e2e/setup.sh: %s\n' "$*" >&2
	exit 1
}

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts dockerd)"
for tool in go node npm; do
	command -v "$tool" >/dev/null || die "$tool is not installed"
done

installed() {
	[ "$(dpkg-query -W -f '${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# --- Debian packages -------------------------------------------------------
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
installed busybox-static || missing+=(busybox-static)
# bwrap for the nested-sandbox test image (images/bubblewrap).
installed bubblewrap || missing+=(bubblewrap)
command -v debootstrap >/dev/null || missing+=(debootstrap)
installed chromium || missing+=(chromium)
# arm64 sandboxes under emulation (e2e/platform_test.go).
installed qemu-user-static || missing+=(qemu-user-static)
installed binfmt-support || missing+=(binfmt-support)
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
else
	log "docker.io, busybox-static, bubblewrap, debootstrap, chromium, qemu-user-static and binfmt-support are installed"
fi

# --- arm64 emulation --------------------------------------------------------
# Debian registers qemu-aarch64 with the F flag, so it works inside
# containers. Without binfmt_misc (an unprivileged container) the arm64
# test skips and says so.
binfmt=/proc/sys/fs/binfmt_misc
[ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null || true
if [ -e "$binfmt/qemu-aarch64" ]; then
	log "arm64 emulation is registered"
elif [ -e "$binfmt/register" ] && update-binfmts --enable qemu-aarch64; then
	log "registered arm64 emulation"
else
	log "no binfmt_misc here: arm64 emulation unavailable, e2e/platform_test.go will skip"
fi

# --- Docker engine ---------------------------------------------------------
docker_up() { docker info >/dev/null 2>&1; }
if docker_up; then
	log "Docker engine is running"
else
	dockerd_pid=
	if [ -d /run/systemd/system ] && systemctl start docker 2>/dev/null; then
		log "started docker.service"
	else
		log "starting dockerd (log: $dockerd_log)"
		setsid dockerd >>"$dockerd_log" 2>&1 </dev/null &
		dockerd_pid=$!
	fi
	for _ in $(seq 1 120); do
		docker_up && break
		# Stop waiting for a dockerd that has already exited.
		[ -z "$dockerd_pid" ] || kill -0 "$dockerd_pid" 2>/dev/null || break
		sleep 0.5
	done
	docker_up || {
		tail -n 40 "$dockerd_log" >&2 || true
		die "the Docker engine is not running (see $dockerd_log)"
	}
	log "Docker engine is running"
fi

# --- test images -----------------------------------------------------------
bash "$repo/images/build.sh"

# --- npm packages of the e2e tests -----------------------------------------
# npm_dep DIR PACKAGE installs DIR's package.json dependencies unless
# PACKAGE is already there at the version it names.
npm_dep() {
	local dir="$repo/$1" pkg=$2 want have
	want=$(node -p 'require(process.argv[1]).dependencies[process.argv[2]]' "$dir/package.json" "$pkg")
	have=$(node -p 'try { require(process.argv[1]).version } catch { "" }' \
		"$dir/node_modules/$pkg/package.json")
	if [ "$have" = "$want" ]; then
		log "$pkg $have is installed"
	else
		log "installing $pkg $want in $1"
		# No lock file: it would record registry addresses.
		(cd "$dir" && npm install --no-audit --no-fund --no-package-lock --no-update-notifier)
	fi
}
npm_dep e2e/ts @alibaba-group/opensandbox # the TypeScript SDK
npm_dep e2e/mcp @modelcontextprotocol/sdk # the MCP client of the MCP tests
# The console's browser test; playwright-core downloads no browser, the test
# drives Debian's chromium.
npm_dep e2e/console playwright-core
log "done"
