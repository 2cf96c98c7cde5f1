#!/usr/bin/env bash
# A rank killed mid-run (SIGKILL, so no handler of ours runs) must end the whole job with a non-zero
# status within 60 s. Usage: killed_rank.sh TEST_BINARY LAUNCHER [ARGS...]: the launcher (mpirun,
# torchrun, env_ranks.sh) starts two ranks of the binary, whose path follows its arguments.
set -u
binary=$1
shift
start=$SECONDS
out=$(LLMTRAIN_KILL_RANK_TEST=1 timeout 120 "$@" "$binary" --gtest_filter='RanksKilledRank.*' 2>&1)
status=$? took=$((SECONDS - start))
printf '%s\n' "$out" | tail -20
echo "exit status $status after $took s"
grep -q "rank 1 kills itself at step 3" <<<"$out" || { echo "FAIL: the run never reached the kill"; exit 1; }
[ "$status" -ne 0 ] || { echo "FAIL: the job exited 0"; exit 1; }
[ "$status" -ne 124 ] || { echo "FAIL: the job hung (killed by timeout)"; exit 1; }
[ "$took" -le 60 ] || { echo "FAIL: the job took $took s to end"; exit 1; }
echo "PASS: the job ended with status $status in $took s"
