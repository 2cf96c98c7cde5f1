#!/usr/bin/env bash
# ctest's demo.short_run: scripts/demo.sh on the State of the Union corpus ($LLMTRAIN_DATA_DIR/sotu)
# for 12 steps into BUILD/demo_test. Skips (77) without the data, unless LLMTRAIN_REQUIRE_DATA=1.
#   demo_short.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build_dir=$2
if [ -z "${LLMTRAIN_DATA_DIR:-}" ]; then
  [ "${LLMTRAIN_REQUIRE_DATA:-}" = 1 ] && { echo "LLMTRAIN_DATA_DIR is not set" >&2; exit 1; }
  echo "LLMTRAIN_DATA_DIR is not set: skipped"; exit 77
fi
rm -rf "$build_dir/demo_test"
CORPUS=$LLMTRAIN_DATA_DIR/sotu DEMO_OUT=$build_dir/demo_test DEMO_STEPS=12 DEMO_DEVICE=cpu \
  LLMTRAIN_BUILD_DIR=$build_dir bash "$source_dir/scripts/demo.sh"
