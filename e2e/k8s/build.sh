#!/usr/bin/env bash
# Builds the test cluster's binaries from the Go module proxy into
# $SANDBOXD_CACHE/k8s/<K8S_VERSION>-<go version>/bin (see lib.sh):
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl
# (k8s.io/kubernetes plus its staging modules) and etcd (the version the
# Kubernetes module graph selects), all static. Skipped when bin/.stamp
# matches; FORCE_BUILD=1 builds anyway. The Go caches are dedicated ones in
# the same directory, so the build neither fills nor depends on the user's.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

stamp="$K8S_VERSION $go_version"
if [ "${FORCE_BUILD:-0}" != 1 ] && [ "$(cat "$bin_dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
	k8s_log "binaries of $stamp are in $bin_dir"
	exit 0
fi

export GOCACHE=$build_dir/gocache GOMODCACHE=$build_dir/gomod CGO_ENABLED=0 GOFLAGS=-buildvcs=false
export GOTOOLCHAIN=local GOWORK=off
src=$build_dir/src
mkdir -p "$src" "$bin_dir"
rm -f "$bin_dir/.stamp"
start=$SECONDS

# A wrapper module that requires k8s.io/kubernetes. Its staging modules are
# published as k8s.io/X v0.<minor>.<patch>: each `./staging/...` replace of
# Kubernetes' own go.mod becomes a replace to that version.
staging=v0.${K8S_VERSION#v1.}
k8s_gomod=$(cd "$src" && go mod download -json 2>/dev/null "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[ -f "$k8s_gomod" ] || k8s_die "no go.mod for k8s.io/kubernetes@$K8S_VERSION"
{
	echo "module sandboxd.local/k8se2e"
	echo
	echo "go ${go_version#go}"
	echo
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo
	sed -n 's#^\t\(k8s.io/[^ ]*\) => ./staging/.*#replace \1 => \1 '"$staging"'#p' "$k8s_gomod"
} >"$src/go.mod"
cat >"$src/tools.go" <<'GO'
//go:build tools

// Package tools pins the commands that build.sh builds.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
# The module downloads (hundreds of lines) go to a log, shown on failure.
(cd "$src" && go mod tidy) >"$build_dir/tidy.log" 2>&1 || k8s_die "go mod tidy failed: $(tail -n 30 "$build_dir/tidy.log")"
k8s_log "module graph ready ($((SECONDS - start))s)"

minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor
 -X k8s.io/component-base/version.gitTreeState=clean"
# kube-apiserver first: it compiles most of what the others share.
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd; do
	pkg=k8s.io/kubernetes/cmd/$cmd
	[ "$cmd" = etcd ] && pkg=go.etcd.io/etcd/server/v3
	t=$SECONDS
	(cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$bin_dir/$cmd" "$pkg")
	k8s_log "built $cmd ($((SECONDS - t))s)"
done
echo "$stamp" >"$bin_dir/.stamp"
k8s_log "build done in $((SECONDS - start))s"
