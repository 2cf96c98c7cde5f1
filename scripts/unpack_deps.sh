#!/usr/bin/env bash
# For a machine that cannot install packages (the offline GPU machine): downloads, here, the Debian
# packages whose headers it lacks and unpacks them into .deps/ (ignored by git), to be carried along
# with the tree. scripts/setup.sh uses .deps/pcre2 and .deps/gloo when the system lacks their headers.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$root/.deps"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download libpcre2-dev libgloo-dev >/dev/null 2>&1)
for pkg in pcre2 gloo; do
  rm -rf "$root/.deps/$pkg"
  dpkg -x "$tmp"/lib$pkg-dev_*.deb "$root/.deps/$pkg"
done
echo "unpacked into $root/.deps: $(ls "$root/.deps")"
