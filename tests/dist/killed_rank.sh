#!/usr/bin/env bash
# A rank killed mid-run (SIGKILL, so no handler of ours runs) must end the whole mpirun job with a
# non-zero status within 60 s. Usage: killed_rank.sh MPIEXEC TEST_BINARY
set -u
mpiexec=$1 binary=$2
start=$SECONDS
out=$(LLMTRAIN_KILL_RANK_TEST=1 timeout 120 "$mpiexec" -np 2 --oversubscribe --allow-run-as-root \
      -x LLMTRAIN_KILL_RANK_TEST "$binary" --gtest_filter='MpiKilledRank.*' 2>&1)
status=$? took=$((SECONDS - start))
printf '%s\n' "$out" | tail -20
echo "exit status $status after $took s"
grep -q "rank 1 kills itself at step 3" <<<"$out" || { echo "FAIL: the run never reached the kill"; exit 1; }
[ "$status" -ne 0 ] || { echo "FAIL: the job exited 0"; exit 1; }
[ "$status" -ne 124 ] || { echo "FAIL: the job hung (killed by timeout)"; exit 1; }
[ "$took" -le 60 ] || { echo "FAIL: the job took $took s to end"; exit 1; }
echo "PASS: the job ended with status $status in $took s"
