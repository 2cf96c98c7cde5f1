#!/usr/bin/env bash
# Formats llmtrain's C++ and CUDA sources with .clang-format (`make format`), or with --check says which
# files differ from it and fails (the ctest format.tree_is_formatted). The seed corpora of the fuzzers
# are data, not code, and are left alone. New files count before they are added (not ignored ones):
# a file formatted only once it is tracked would reach a commit unformatted.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
clang_format=${CLANG_FORMAT:-clang-format}
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.h' '*.cu' '*.cuh' |
  grep -v '^tests/fuzz/corpus/')
if [ "${1:-}" = --check ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$clang_format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
      echo "not formatted: $f (make format)"
      bad=1
    fi
  done
  [ $bad = 0 ] && echo "all ${#files[@]} files formatted"
  exit $bad
fi
"$clang_format" --style=file -i "${files[@]}"
