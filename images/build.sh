#!/usr/bin/env bash
# Builds the local images that sandboxd's tests run, without any registry.
#
# Usage: images/build.sh [--force] [NAME...]
#
# NAME is a recipe directory under images/ (default: all of them). Each recipe
# images/NAME/build.sh OUTDIR writes a root filesystem to OUTDIR/rootfs and the
# image settings to OUTDIR/changes (one Dockerfile instruction per line); this
# script imports that with `docker import`, tags it and checks that it runs.
#
# An image is skipped when its first tag already holds a build of the current
# recipe (the recipe's hash is kept in the image's comment), so running this
# again is cheap and a changed recipe is rebuilt. --force rebuilds anyway.
# Run as root (debootstrap needs it).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

# Recipes in build order, and the tags each one gets; the first tag is primary.
recipes=(busybox busybox-arm64 noshell code-interpreter bubblewrap)
declare -A tags=(
	[busybox]="sandboxd-test/busybox:latest"
	[busybox-arm64]="sandboxd-test/busybox-arm64:latest"
	[noshell]="sandboxd-test/noshell:latest"
	[code-interpreter]="opensandbox/code-interpreter:v1.1.0 sandboxd-test/code-interpreter:latest"
	[bubblewrap]="sandboxd-test/bubblewrap:latest"
)
# Platforms of the images not of this machine's own.
declare -A platforms=(
	[busybox-arm64]="linux/arm64"
)

log() { printf '==> %s\n' "$*"; }
die() {
	printf 'images/build.sh: %s\n' "$*" >&2
	exit 1
}

# recipe_hash prints a digest of every file of a recipe.
recipe_hash() {
	(cd "$here/$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) |
		sha256sum | cut -c1-16
}

# image_comment prints the comment of an image, or nothing if it is absent.
image_comment() {
	docker image inspect --format '{{.Comment}}' "$1" 2>/dev/null || true
}

# verify runs the built image the way the tests use it.
verify() {
	local name=$1 tag=$2 out cid
	case $name in
	busybox)
		out=$(docker run --rm --network none "$tag" sh -c 'echo ok')
		[ "$out" = ok ] || die "$tag: sh -c 'echo ok' printed '$out'"
		;;
	busybox-arm64)
		# Runs only where arm64 binaries can be emulated (e2e/setup.sh
		# installs qemu-user-static); elsewhere only its platform is checked.
		if [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
			out=$(docker run --rm --platform linux/arm64 --network none "$tag" uname -m)
			[ "$out" = aarch64 ] || die "$tag: uname -m printed '$out'"
		fi
		out=$(docker image inspect --format '{{.Os}}/{{.Architecture}}' "$tag")
		[ "$out" = linux/arm64 ] || die "$tag: platform is $out"
		;;
	noshell)
		cid=$(docker run -d --network none "$tag")
		# docker stop must not need its kill timeout: /pause exits on SIGTERM.
		if [ "$(docker inspect --format '{{.State.Running}}' "$cid")" != true ] ||
			! docker stop --time 30 "$cid" >/dev/null ||
			[ "$(docker inspect --format '{{.State.ExitCode}}' "$cid")" != 0 ]; then
			docker logs "$cid" >&2 || true
			docker rm -f "$cid" >/dev/null
			die "$tag: /pause did not run and stop cleanly"
		fi
		docker rm "$cid" >/dev/null
		;;
	code-interpreter)
		docker run --rm --network none "$tag" bash -c '
			set -e
			python3 -c "import pandas, seaborn, matplotlib, ipykernel"
			jupyter notebook --version
			python --version
			grep --version | head -n 1 | grep -q "GNU grep"
			test -x /opt/code-interpreter/code-interpreter.sh
			test -d /workspace
		' >/dev/null || die "$tag: check of python3, pandas, seaborn, matplotlib, Jupyter, GNU grep failed"
		;;
	bubblewrap)
		out=$(docker run --rm --network none "$tag" bwrap --version)
		case $out in "bubblewrap "*) ;; *) die "$tag: bwrap --version printed '$out'" ;; esac
		;;
	*) die "no check for recipe $name" ;;
	esac
}

# set_platform rewrites the platform of an imported image: docker import
# records the engine's own (its --platform needs a multi-platform engine).
set_platform() {
	local tag=$1 platform=$2 imported config
	imported=$(docker image inspect --format '{{.Id}}' "$tag")
	mkdir "$work/save"
	docker save "$tag" | tar -x -C "$work/save"
	config=$(sed -n 's/^\[{"Config":"\([^"]*\)".*/\1/p' "$work/save/manifest.json")
	[ -n "$config" ] || die "$tag: no image config in docker save's manifest.json"
	sed -i -e "s|\"architecture\":\"[^\"]*\"|\"architecture\":\"${platform#*/}\"|" \
		-e "s|\"os\":\"[^\"]*\"|\"os\":\"${platform%%/*}\"|" "$work/save/$config"
	tar -C "$work/save" -c . | docker load -q >/dev/null || die "$tag: docker load failed"
	docker rmi "$imported" >/dev/null 2>&1 || true
}

build() {
	local name=$1
	local -a names
	read -r -a names <<<"${tags[$name]}"
	local primary=${names[0]} want start old
	want="sandboxd-recipe $name $(recipe_hash "$name")"
	old=$(docker image inspect --format '{{.Id}}' "$primary" 2>/dev/null || true)

	if [ "$force" = 0 ] && [ "$(image_comment "$primary")" = "$want" ]; then
		for t in "${names[@]:1}"; do docker tag "$primary" "$t"; done
		log "$name: ${names[*]} up to date, skipped"
		return
	fi

	log "$name: building ${names[*]}"
	start=$SECONDS
	work=$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-image-$name.XXXXXX")
	bash "$here/$name/build.sh" "$work" || die "$name: recipe failed"

	local -a changes=()
	local line
	while IFS= read -r line; do
		[ -n "$line" ] && changes+=(--change "$line")
	done <"$work/changes"
	tar --numeric-owner -C "$work/rootfs" -c . |
		docker import "${changes[@]}" --message "$want" - "$primary" >/dev/null ||
		die "$name: docker import failed"
	[ -z "${platforms[$name]:-}" ] || set_platform "$primary" "${platforms[$name]}"
	for t in "${names[@]:1}"; do docker tag "$primary" "$t"; done
	rm -rf "$work"
	work=

	verify "$name" "$primary"
	# The previous build is now untagged; reclaim its space unless a
	# container still uses it.
	if [ -n "$old" ] && [ "$old" != "$(docker image inspect --format '{{.Id}}' "$primary")" ]; then
		docker rmi "$old" >/dev/null 2>&1 || true
	fi
	log "$name: built ${names[*]} in $((SECONDS - start))s"
}

force=0
selected=()
for arg in "$@"; do
	case $arg in
	--force) force=1 ;;
	-h | --help)
		sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"
		exit 0
		;;
	-*) die "unknown option $arg" ;;
	*)
		[ -n "${tags[$arg]:-}" ] || die "unknown image $arg (have: ${recipes[*]})"
		selected+=("$arg")
		;;
	esac
done
[ ${#selected[@]} -gt 0 ] || selected=("${recipes[@]}")

docker info >/dev/null 2>&1 || die "the Docker engine is not reachable"
work=
trap '[ -z "$work" ] || rm -rf "$work"' EXIT
total=$SECONDS
for name in "${selected[@]}"; do
	build "$name"
done
log "images ready in $((SECONDS - total))s"
