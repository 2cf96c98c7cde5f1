#!/usr/bin/env bash
# A launcher with nothing but torchrun's variables: starts N copies of a command with RANK,
# LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (rank 0 hosts the store, no
# agent watches the ranks) and exits with the first non-zero status among them.
# Usage: env_ranks.sh N COMMAND [ARGS...]
set -u
n=$1
shift
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid"
  s=$?
  [ "$status" -ne 0 ] || status=$s
done
exit "$status"
