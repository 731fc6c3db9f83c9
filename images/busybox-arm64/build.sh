#!/usr/bin/env bash
# Recipe for sandboxd-test/busybox-arm64: sandboxd-test/busybox for linux/arm64
# (Debian's busybox-static:arm64), run under emulation (qemu-user-static with
# binfmt_misc) by the platform e2e test. images/build.sh imports it with
# --platform linux/arm64.
#
# Usage: build.sh OUTDIR   (run by images/build.sh)
# Writes OUTDIR/rootfs and OUTDIR/changes. The .deb is kept in
# $SANDBOXD_CACHE (default /var/cache/sandboxd) so a rebuild needs no network.
set -euo pipefail

out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
cache=${SANDBOXD_CACHE:-/var/cache/sandboxd}

deb=$(ls "$cache"/busybox-static_*_arm64.deb 2>/dev/null | head -n 1 || true)
if [ -z "$deb" ]; then
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then
		dpkg --add-architecture arm64
		apt-get update -q
	fi
	install -d "$cache"
	# apt drops privileges to _apt for downloads; it must be able to write.
	(cd "$cache" && chown _apt "$cache" 2>/dev/null; apt-get download -q busybox-static:arm64)
	deb=$(ls "$cache"/busybox-static_*_arm64.deb | head -n 1)
fi
dpkg-deb -x "$deb" "$out/deb"
# The applet list is the same as the host's busybox of this Debian release;
# asking the host's binary needs no emulation.
SANDBOXD_BUSYBOX="$out/deb/bin/busybox" SANDBOXD_BUSYBOX_LIST=/bin/busybox bash "$here/../busybox/build.sh" "$out"
rm -rf "$out/deb"
cp "$here/changes" "$out/changes"
