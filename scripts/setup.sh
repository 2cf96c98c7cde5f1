#!/usr/bin/env bash
# One idempotent set-up for every machine llmtrain is built on: installs what is missing (when it can),
# picks the Python that holds LibTorch, then configures and builds with ninja and ccache into build/.
# Run again at any time: present packages, an up-to-date virtual environment and a configured build
# directory are all kept.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${LLMTRAIN_BUILD_DIR:-$root/build}
build_type=${LLMTRAIN_BUILD_TYPE:-Release}
venv=$root/.venv
say() { printf '[setup] %s\n' "$*"; }
if [ ! -f "$build_dir/build.ninja" ]; then
  say "first set-up of this checkout: packages, Python with LibTorch, then the build into $build_dir"
  say "(on a 2-core machine without a GPU: about 10 minutes and 5 GB of disk for make demo, 25 minutes for make"
  say " test, which builds the tests and benchmarks too; later runs rebuild only what changed)"
fi

# ---- Debian packages: probe what the build needs, install only what is missing -----------------
have_header() {  # have_header HEADER [extra compiler flags]
  local h=$1; shift
  printf '#include <%s>\n' "$h" | ${CXX:-c++} "$@" -x c++ -fsyntax-only - >/dev/null 2>&1
}
missing=()
command -v c++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v ccache >/dev/null || missing+=(ccache)
command -v mpirun >/dev/null || missing+=(openmpi-bin)
command -v mpicxx >/dev/null || missing+=(libopenmpi-dev)
command -v python3 >/dev/null || missing+=(python3 python3-venv)
have_header nlohmann/json.hpp || missing+=(nlohmann-json3-dev)
have_header pcre2.h -DPCRE2_CODE_UNIT_WIDTH=8 || missing+=(libpcre2-dev)
have_header sentencepiece_processor.h || missing+=(libsentencepiece-dev)
have_header gtest/gtest.h || missing+=(libgtest-dev libgmock-dev)
have_header benchmark/benchmark.h || missing+=(libbenchmark-dev)
have_header CLI/CLI.hpp || missing+=(libcli11-dev)
have_header gloo/context.h || missing+=(libgloo-dev)  # headers for LibTorch's Gloo process group
have_header unicode/normalizer2.h || missing+=(libicu-dev)  # NFC for Qwen2's tokenizer.json (optional)
# clang with libFuzzer and the sanitizers builds the parsers' fuzz targets (tests/fuzz); without it they are skipped.
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' |
  clang++ -fsanitize=fuzzer,address,undefined -x c++ - -o /dev/null >/dev/null 2>&1 || missing+=(clang libclang-rt-14-dev)

# A machine that cannot install (offline, no apt, not root) goes on with what it has: what is truly
# required then fails at configure time with CMake's message naming it.
if ((${#missing[@]})); then
  say "missing: ${missing[*]}"
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] && timeout 60 apt-get update -qq >/dev/null 2>&1 &&
     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    say "installed: ${missing[*]}"
  else
    say "could not install them here (no apt, not root, or offline); going on without"
  fi
fi

# ---- Python with LibTorch ----------------------------------------------------------------------
# A python3 that already has a CUDA build of torch 2.x (the GPU machine) is used as it is; otherwise
# the project's own virtual environment gets the pinned wheels of scripts/requirements.txt.
torch_ok() { "$1" -c 'import sys, torch; sys.exit(0 if torch.__version__.startswith("2.") and torch.version.cuda else 1)' 2>/dev/null; }
if [ -x "$venv/bin/python" ] && torch_ok "$venv/bin/python"; then
  py=$venv/bin/python
elif torch_ok python3; then
  py=$(command -v python3)
else
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  py=$venv/bin/python
fi
if [ "$py" = "$venv/bin/python" ]; then
  stamp=$venv/.llmtrain-requirements
  if ! cmp -s "$root/scripts/requirements.txt" "$stamp"; then
    say "installing Python packages into $venv, once per machine: about 3 GB to download (the torch wheel with"
    say "CUDA; PyPI has no CPU-only one for Linux, and download.pytorch.org is not reachable everywhere), 5 GB on disk"
    if "$py" -m pip install --progress-bar on -r "$root/scripts/requirements.txt"; then
      cp "$root/scripts/requirements.txt" "$stamp"
    else
      say "pip install failed (offline?); continuing with what $venv has"
    fi
  fi
fi
torch_ok "$py" || { say "error: no torch 2.x with CUDA in $py"; exit 1; }
say "python: $py (torch $("$py" -c 'import torch; print(torch.__version__)'))"

# ---- Configure and build -----------------------------------------------------------------------
# The GPU machine has PCRE2's library but not its header, nor Gloo's headers, and cannot install them:
# copies unpacked by scripts/unpack_deps.sh into .deps/ (carried there with the tree) stand in.
extra=()
if ! have_header pcre2.h -DPCRE2_CODE_UNIT_WIDTH=8 && [ -f "$root/.deps/pcre2/usr/include/pcre2.h" ]; then
  extra+=(-DPCRE2_ROOT="$root/.deps/pcre2/usr")
fi
if ! have_header gloo/context.h && [ -f "$root/.deps/gloo/usr/include/gloo/context.h" ]; then
  extra+=(-DGLOO_ROOT="$root/.deps/gloo/usr")
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake_args=${LLMTRAIN_CMAKE_ARGS:-}
if [ ! -f "$build_dir/build.ninja" ] || [ -n "${cmake_args// /}" ]; then
  # LLMTRAIN_CMAKE_ARGS adds options, e.g. "-DLLMTRAIN_CUDA=ON -DLLMTRAIN_BUILD_BENCHMARKS=OFF"; given
  # to a configured build directory, it configures again with them (cached options stay otherwise).
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
    -DPython3_EXECUTABLE="$py" "${launcher[@]}" "${extra[@]}" $cmake_args
fi
# LLMTRAIN_TARGETS builds only those (make demo: the four programs it runs); default: everything.
# shellcheck disable=SC2086
[ -n "${LLMTRAIN_TARGETS:-}" ] && say "building ${LLMTRAIN_TARGETS}"
cmake --build "$build_dir" ${LLMTRAIN_TARGETS:+--target $LLMTRAIN_TARGETS}
