#!/usr/bin/env bash
# Gathers what scripts/gpu_check.sh needs but a bare GPU machine (no package registry) may
# lack, into .gpu_deps/ (git-ignored; name it in the device tool's `carry`): the GoogleTest
# sources (Debian's googletest package, built there by gpu_check.sh's `deps` step) and the
# CLI11 headers (xccl-tests falls back to getopt without them; xccl-topo needs them).
# Run where apt works (Debian/Ubuntu); a few MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$PWD/.gpu_deps
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download googletest libcli11-dev)
rm -rf "$dest" && mkdir -p "$dest"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest"; done
rm -rf "$dest/usr/share/doc" "$dest/usr/src/googletest/googlemock/docs" "$dest/usr/src/googletest/docs"
du -sh "$dest"
echo "gpu_deps: GoogleTest sources in $dest/usr/src/googletest, CLI11 in $dest/usr/include/CLI"
