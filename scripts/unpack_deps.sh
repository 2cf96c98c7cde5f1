#!/usr/bin/env bash
# For a machine that cannot install packages (the offline GPU machine): downloads, here, the Debian
# packages whose headers it lacks and unpacks them into .deps/ (ignored by git), to be carried along
# with the tree. scripts/setup.sh uses .deps/pcre2 and .deps/gloo when the system lacks their headers, and
# CMake takes CUTLASS's headers from .deps/cutlass/include when its Python has no nvidia-cutlass wheel.
# .deps/pylib holds the pinned peft and bitsandbytes (only its CPU and CUDA 13 libraries, which the GPU
# machine's torch loads: 8 MB of the 125 it installs), for bench_finetune's transformers rows there;
# scripts/gpu_check.sh puts it on PYTHONPATH.
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
pin=$(grep -E '^nvidia-cutlass==' "$root/scripts/requirements.txt")
py=python3
[ -x "$root/.venv/bin/python" ] && py=$root/.venv/bin/python
"$py" -m pip download -q --no-deps -d "$tmp" "$pin"
rm -rf "$root/.deps/cutlass"
python3 - "$tmp"/nvidia_cutlass-*.whl "$root/.deps/cutlass" <<'PY'
import sys, zipfile
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            wheel.extract(name, sys.argv[2] + "/tmp")
PY
mv "$root/.deps/cutlass/tmp/cutlass_library/source/include" "$root/.deps/cutlass/include"
rm -rf "$root/.deps/cutlass/tmp"
"$py" -m pip download -q --no-deps -d "$tmp" $(grep -E '^(peft|bitsandbytes)==' "$root/scripts/requirements.txt")
rm -rf "$root/.deps/pylib"
python3 - "$root/.deps/pylib" "$tmp"/peft-*.whl "$tmp"/bitsandbytes-*.whl <<'PY'
import re, sys, zipfile
for path in sys.argv[2:]:
    with zipfile.ZipFile(path) as wheel:
        for name in wheel.namelist():
            lib = re.search(r"libbitsandbytes_(\w+)\.so$", name)
            if lib and not re.fullmatch(r"cpu|cuda13\d", lib.group(1)):
                continue
            if not name.endswith("/"):
                wheel.extract(name, sys.argv[1])
PY
echo "unpacked into $root/.deps: $(ls "$root/.deps")"
