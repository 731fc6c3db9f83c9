#!/usr/bin/env bash
# Imports images into the test cluster's containerd (namespace k8s.io),
# without a registry; pods use them with imagePullPolicy Never or
# IfNotPresent.
#
# Usage: images.sh [NAME...]
#   pause     the pod sandbox image (localhost/pause:3.10-local), built here
#             from images/noshell/pause; needs no Docker
#   sandboxd  localhost/sandboxd:$SANDBOXD_K8S_SANDBOXD_TAG (default e2e):
#             images/sandboxd/Dockerfile around $SANDBOXD_K8S_SANDBOXD_BINARY,
#             default a static sandboxd built from this tree (rerun it after
#             a change)
#   IMAGE     any other name is an image of the local dockerd (docker save)
# Without NAME: sandboxd, sandboxd-test/busybox:latest and
# sandboxd-test/noshell:latest; SANDBOXD_K8S_IMAGES overrides that list
# (up.sh passes it on).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

[ -S "$containerd_sock" ] || k8s_die "images.sh: no cluster containerd at $containerd_sock (run up.sh)"
ctr_import() { ctr --address "$containerd_sock" -n k8s.io images import - >/dev/null; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# pause writes a `docker save` archive by hand: one layer holding /pause.
pause() {
	local d=$tmp/pause arch layer cfg
	arch=$(go env GOARCH)
	mkdir -p "$d/rootfs" "$d/out"
	(cd "$k8s_repo/images/noshell/pause" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$d/rootfs/pause" .)
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$d/rootfs" -cf "$d/layer.tar" .
	layer=$(sha256sum "$d/layer.tar" | cut -d' ' -f1)
	mkdir "$d/out/$layer"
	mv "$d/layer.tar" "$d/out/$layer/layer.tar"
	printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$arch" "$layer" >"$d/config.json"
	cfg=$(sha256sum "$d/config.json" | cut -d' ' -f1)
	mv "$d/config.json" "$d/out/$cfg.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfg" "$pause_image" "$layer" >"$d/out/manifest.json"
	tar -C "$d/out" -cf - . | ctr_import
}

# sandboxd builds the image under a tag of its own, so that concurrent runs
# and the shared dockerd's other images are left alone, and removes it there
# once containerd holds it.
sandboxd() {
	local d=$tmp/sandboxd tag=localhost/sandboxd:tmp-$$ name=localhost/sandboxd:${SANDBOXD_K8S_SANDBOXD_TAG:-e2e}
	mkdir -p "$d"
	if [ -n "${SANDBOXD_K8S_SANDBOXD_BINARY:-}" ]; then
		cp "$SANDBOXD_K8S_SANDBOXD_BINARY" "$d/sandboxd"
		# The agent beside it, if it has one (a release binary embeds it).
		agent_bin=$(dirname "$SANDBOXD_K8S_SANDBOXD_BINARY")/sandboxd-agent
		if [ -f "$agent_bin" ]; then cp "$agent_bin" "$d/sandboxd-agent"; fi
	else
		# Built as e2e's TestMain builds it, so that the two share Go's cache.
		(cd "$k8s_repo" && CGO_ENABLED=0 go build -o "$d/" ./cmd/sandboxd ./cmd/sandboxd-agent)
	fi
	# The legacy builder warns on stderr about its deprecation: shown only on failure.
	docker build -q -f "$k8s_repo/images/sandboxd/Dockerfile" -t "$tag" "$d" >"$tmp/build.log" 2>&1 ||
		k8s_die "docker build of the sandboxd image failed: $(cat "$tmp/build.log")"
	docker save "$tag" | ctr_import
	docker rmi "$tag" >/dev/null
	ctr --address "$containerd_sock" -n k8s.io images tag --force "$tag" "$name" >/dev/null
	ctr --address "$containerd_sock" -n k8s.io images rm "$tag" >/dev/null
	k8s_log "sandboxd image: $name"
}

if [ $# = 0 ]; then
	# shellcheck disable=SC2086 # a list of names
	set -- ${SANDBOXD_K8S_IMAGES:-sandboxd sandboxd-test/busybox:latest sandboxd-test/noshell:latest}
fi
for name in "$@"; do
	t=$SECONDS
	case $name in
	pause) pause ;;
	sandboxd) sandboxd ;;
	*) docker save "$name" | ctr_import ;;
	esac
	k8s_log "imported $name ($((SECONDS - t))s)"
done
