#!/usr/bin/env bash
# Recipe for sandboxd-test/bubblewrap: the busybox image (images/busybox) plus
# Debian's bubblewrap, /usr/bin/bwrap with the shared libraries it links, taken
# from this machine's installed package (e2e/setup.sh installs it), and a user
# 1000, for the nested-sandbox tests (e2e/nested_test.go).
#
# Usage: build.sh OUTDIR   (run by images/build.sh)
# Writes OUTDIR/rootfs and OUTDIR/changes.
set -euo pipefail

out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
bwrap=/usr/bin/bwrap
[ -x "$bwrap" ] || { echo "$bwrap not found: install bubblewrap" >&2; exit 1; }

bash "$here/../busybox/build.sh" "$out"
root="$out/rootfs"
install -D -m 0755 "$bwrap" "$root$bwrap"
# The loader and every library bwrap links, at the paths ldd resolves.
for lib in $(ldd "$bwrap" | grep -o '/[^ ]*'); do
	install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
printf 'sandbox:x:1000:1000:sandbox:/tmp:/bin/sh\n' >>"$root/etc/passwd"
printf 'sandbox:x:1000:\n' >>"$root/etc/group"
cp "$here/changes" "$out/changes"
