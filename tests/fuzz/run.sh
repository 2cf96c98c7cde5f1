#!/usr/bin/env bash
# Runs one fuzz target for SECONDS seconds from its seeds (tests/fuzz/corpus/NAME), with what it finds
# kept in a corpus of the run; a crash, a leak, undefined behaviour or a time-out fails with the input
# saved and named.   tests/fuzz/run.sh FUZZER_BINARY NAME SECONDS [WORK_DIR]
set -euo pipefail
bin=$1 name=$2 seconds=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=${4:-$(mktemp -d "${TMPDIR:-/tmp}/llmtrain_fuzz_${name}_XXXXXX")}
mkdir -p "$work/corpus" "$work/artifacts"
# Leaks are checked; the sanitizers stop at the first report, which libFuzzer turns into a failure.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
# SentencePiece models are a few hundred KB (their normaliser's tables); the other inputs are small.
max_len=65536
[ "$name" = sentencepiece ] && max_len=400000
"$bin" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2560 -max_len=$max_len -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$here/corpus/$name" || status=$?
if [ $status -ne 0 ]; then
  echo "fuzz_$name failed (exit $status); the input that did it: $(ls "$work/artifacts"/* 2>/dev/null | head -1)"
  exit 1
fi
[ $# -ge 4 ] || rm -rf "$work"
echo "fuzz_$name: no failure in $seconds s"
