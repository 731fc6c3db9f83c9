#!/usr/bin/env bash
# Recipe for sandboxd-test/noshell: an image FROM scratch with no shell and no
# tools at all, only /pause, a static Go program that waits for a signal.
#
# Usage: build.sh OUTDIR   (run by images/build.sh)
# Writes OUTDIR/rootfs and OUTDIR/changes.
set -euo pipefail

out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)

install -d -m 0755 "$out/rootfs"
install -d -m 1777 "$out/rootfs/tmp"
(cd "$here/pause" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/rootfs/pause" .)
cp "$here/changes" "$out/changes"
