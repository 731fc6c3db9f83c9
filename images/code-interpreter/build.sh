#!/usr/bin/env bash
# Recipe for the local stand-in of opensandbox/code-interpreter: a Debian
# bookworm minbase root filesystem with bash, GNU grep, coreutils, python3 and
# the scientific Python stack, made with debootstrap (no registry needed).
#
# Usage: build.sh OUTDIR   (run by images/build.sh, as root)
# Writes OUTDIR/rootfs and OUTDIR/changes.
#
# The Debian mirror is taken from this machine's apt configuration at run time
# (override with SANDBOXD_DEBIAN_MIRROR); the downloaded packages are cached as a
# debootstrap tarball under SANDBOXD_IMAGE_CACHE so that a rebuild downloads
# nothing (delete that directory to pick up newer Debian packages).
set -euo pipefail

out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
suite=bookworm
cache=${SANDBOXD_IMAGE_CACHE:-/var/cache/sandboxd-images}
packages=$(grep -v '^#' "$here/packages" | xargs | tr ' ' ',')

log() { printf '  [code-interpreter] %s\n' "$*" >&2; }

# apt_uris prints the URIs of every enabled "deb" source in the host's apt
# configuration, in both the one-line and the deb822 format.
apt_uris() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/ && $i !~ /^[a-z-]+=/) { print $i; break } }' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk '
			function flush() { if (deb && enabled) for (i = 1; i <= n; i++) print uri[i]; deb = 0; enabled = 1; n = 0 }
			BEGIN { enabled = 1 }
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
			tolower($1) == "enabled:" { enabled = (tolower($2) != "no") }
			tolower($1) == "uris:" { for (i = 2; i <= NF; i++) uri[++n] = $i }
			END { flush() }
		' "$f"
	done
}

# pick_mirror prints the first apt source that serves the Debian suite we need.
pick_mirror() {
	if [ -n "${SANDBOXD_DEBIAN_MIRROR:-}" ]; then
		echo "$SANDBOXD_DEBIAN_MIRROR"
		return
	fi
	local uri
	for uri in $(apt_uris | awk '!seen[$0]++'); do
		case $uri in http://* | https://*) ;; *) continue ;; esac
		if wget -q --spider --timeout=20 "${uri%/}/dists/$suite/Release"; then
			echo "${uri%/}"
			return
		fi
	done
	echo "no apt source in /etc/apt serves Debian $suite; set SANDBOXD_DEBIAN_MIRROR" >&2
	return 1
}

# The cache key covers everything that decides which packages are downloaded.
arch=$(dpkg --print-architecture)
key=$(printf '%s %s %s\n' "$suite" "$arch" "$packages" | sha256sum | cut -c1-16)
tarball="$cache/code-interpreter-$suite-$arch-$key.tgz"
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
	mirror=$(pick_mirror)
	log "downloading packages from $mirror into $tarball"
	debootstrap --variant=minbase --include="$packages" \
		--make-tarball="$tarball.partial" "$suite" "$out/download" "$mirror" >"$out/debootstrap-download.log" 2>&1 ||
		{ tail -n 30 "$out/debootstrap-download.log" >&2; exit 1; }
	mv "$tarball.partial" "$tarball"
	# Only the current package set is worth keeping.
	find "$cache" -maxdepth 1 -name 'code-interpreter-*.tgz' ! -path "$tarball" -delete
else
	log "using cached packages $tarball"
fi

root="$out/rootfs"
log "installing into $root"
# dpkg in the new system skips documentation and translations (as Debian's
# own container images do) and, while building, needs no fsync per file.
install -d "$root/etc/dpkg/dpkg.cfg.d"
printf 'path-exclude=/usr/share/%s/*\n' doc man info locale >"$root/etc/dpkg/dpkg.cfg.d/sandboxd-nodoc"
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/sandboxd-build"
debootstrap --variant=minbase --include="$packages" \
	--unpack-tarball="$tarball" "$suite" "$root" >"$out/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$out/debootstrap.log" >&2; exit 1; }

# Entry point that only keeps the sandbox alive: commands arrive through the
# sandboxd agent, not through the image.
install -d -m 0755 "$root/opt/code-interpreter" "$root/workspace"
install -m 0755 "$here/code-interpreter.sh" "$root/opt/code-interpreter/code-interpreter.sh"

# Build matplotlib's font cache now, so the first plot in a sandbox is fast.
log "warming the matplotlib font cache"
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin MPLBACKEND=Agg \
	python3 -c 'import pandas, seaborn, matplotlib.pyplot'

rm "$root/etc/dpkg/dpkg.cfg.d/sandboxd-build"
# What a sandbox never needs: package lists, downloaded archives, and the
# documentation that debootstrap's first stage unpacked without dpkg.
rm -rf "${root:?}"/var/cache/apt/archives/*.deb "${root:?}"/var/lib/apt/lists/* \
	"${root:?}"/usr/share/doc/* "${root:?}"/usr/share/man/* "${root:?}"/usr/share/info/* \
	"${root:?}"/usr/share/locale/* "${root:?}"/dev/* "${root:?}"/proc/* "${root:?}"/sys/*
# debootstrap copied the host's resolver configuration; Docker provides its own.
: >"$root/etc/resolv.conf"
cp "$here/changes" "$out/changes"
