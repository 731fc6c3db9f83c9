#!/usr/bin/env bash
# Recipe for sandboxd-test/busybox: an image FROM scratch holding only Debian's
# statically linked busybox and one symlink per applet (sh, sleep, tail, cat…).
#
# Usage: build.sh OUTDIR   (run by images/build.sh)
# Writes OUTDIR/rootfs and OUTDIR/changes.
set -euo pipefail

out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
busybox=${SANDBOXD_BUSYBOX:-/bin/busybox}
# The binary that lists the applets: another one than $busybox when that is
# built for another architecture (images/busybox-arm64).
list=${SANDBOXD_BUSYBOX_LIST:-$busybox}

# A dynamically linked busybox (Debian's "busybox" package) would not run in
# an empty image; images/build.sh checks the result by running it.
[ -x "$busybox" ] || { echo "$busybox not found: install busybox-static" >&2; exit 1; }

root="$out/rootfs"
install -d -m 0755 "$root/bin" "$root/sbin" "$root/usr/bin" "$root/usr/sbin" "$root/etc" "$root/root"
install -d -m 1777 "$root/tmp"
install -m 0755 "$busybox" "$root/bin/busybox"
"$list" --list-full | while read -r applet; do
	[ "$applet" = bin/busybox ] || ln -sf /bin/busybox "$root/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
cp "$here/changes" "$out/changes"
