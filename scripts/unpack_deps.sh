#!/usr/bin/env bash
# For a machine that cannot install packages (the offline GPU machine): downloads, here, the Debian
# packages whose headers it lacks and unpacks them into .deps/ (ignored by git), to be carried along
# with the tree. scripts/setup.sh uses .deps/pcre2 when the system has no pcre2.h.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$root/.deps"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download libpcre2-dev >/dev/null 2>&1)
rm -rf "$root/.deps/pcre2"
dpkg -x "$tmp"/libpcre2-dev_*.deb "$root/.deps/pcre2"
echo "unpacked into $root/.deps: $(ls "$root/.deps")"
