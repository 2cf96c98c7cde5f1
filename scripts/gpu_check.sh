#!/usr/bin/env bash
# The GPU machine's round, in one go (GPU time is scarce, so everything a change needs is here): the
# set-up and build, the CUDA tests, the kernel and training benchmarks, a per-kernel profile of one
# training step, and the GPT-2 124M reference run of ../shared/ENVIRONMENT.md. Each part writes its log
# into LOGDIR and a line to LOGDIR/summary.txt.
#   scripts/gpu_check.sh [LOGDIR] [PART...]   PART: build tests kernels train generate profile converge
#                                             finetune dist seeds hfgen sanitize flaky (default all but
#                                             finetune, dist, seeds, hfgen, sanitize and flaky)
# BENCH_TRAIN_ARGS adds arguments to bench_train (e.g. "--without layer_norm --with mlp"), BENCH_GENERATE_ARGS
# to bench_generate (e.g. "--model llama-3.2-1b --batch 1"). `finetune` runs
# bench_finetune with its transformers rows (BENCH_FINETUNE_ARGS adds arguments, e.g. "--model
# llama-3.2-1b --path qlora --path hf-qlora"); PEFT and bitsandbytes come from .deps/pylib
# (scripts/unpack_deps.sh) where it is there. `dist` runs
# bench_dist over DIST_RANKS ranks (default 2; NCCL is measured where there is a GPU for each). `seeds` runs the
# reference once for each seed in CONVERGE_SEEDS (default "1337 1 2 3 4 5"), without checkpoints, and says
# each one's last val loss: how far the seed alone moves it; CONVERGE_SETS adds KEY=VALUE settings to those runs
# (e.g. "train.fp8=true"). `sanitize` runs every *_CUDA test under
# compute-sanitizer's memcheck, racecheck, synccheck and initcheck at once (llmtrain's kernels
# checked; SANITIZE_TIMEOUT seconds each, default 420) and says what each reported. `flaky` runs the
# layer-norm kernel test under load (FLAKY_JOBS copies at a time, FLAKY_REPEAT shuffled repeats each,
# every repeat with new inputs) and counts the failures. `hfgen` takes the model `converge` trained,
# exports it as a Hugging Face folder and compares 64 greedy tokens in bf16 on the GPU: generate's
# (KV cache, CUDA graph; from the native checkpoint and from the folder) against transformers'.
# GPU_CHECK_SECONDS (default 0: no limit) bounds the whole round: a command still running then is
# stopped (the benchmarks print each row as it finishes) and the parts after it are skipped, so that a
# round inside a device call's limit still returns its logs.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log=${1:-$root/runs/gpu_check}
shift || true
parts=${*:-build tests kernels train generate profile converge}
mkdir -p "$log"
cd "$root"
export LLMTRAIN_DATA_DIR=${LLMTRAIN_DATA_DIR:-$root/../shared/data}
[ -d "$root/.deps/pylib" ] && export PYTHONPATH="$root/.deps/pylib${PYTHONPATH:+:$PYTHONPATH}"
say() { printf '%s\n' "$*" | tee -a "$log/summary.txt"; }
end=$((SECONDS + ${GPU_CHECK_SECONDS:-0}))
timed() {  # timed NAME COMMAND...: runs it into LOGDIR/NAME.log, says how it went and how long it took
  local name=$1 t0=$SECONDS rc; shift
  if [ "${GPU_CHECK_SECONDS:-0}" -gt 0 ]; then  # within the call's time: stopped at the end, or skipped
    if ((end - SECONDS < 5)); then say "[$name] skipped: the $GPU_CHECK_SECONDS s are spent"; return 124; fi
    set -- timeout $((end - SECONDS)) "$@"
  fi
  "$@" >"$log/$name.log" 2>&1; rc=$?
  say "[$name] exit $rc in $((SECONDS - t0)) s"
  return $rc
}
prepare() {  # the reference's shards, once
  [ -f data/sotu/val_000000.bin ] && return 0
  timed prepare build/bin/prepare_data --tokenizer gpt2 --vocab-dir "$LLMTRAIN_DATA_DIR/gpt2" --out data/sotu \
    --val-files "$LLMTRAIN_DATA_DIR"/sotu/201*.txt "$LLMTRAIN_DATA_DIR"/sotu/202*.txt -- "$LLMTRAIN_DATA_DIR/sotu"
}
for part in $parts; do
  case $part in
    build) LLMTRAIN_CMAKE_ARGS="${LLMTRAIN_CMAKE_ARGS:-} -DLLMTRAIN_CUDA=ON" timed build bash scripts/setup.sh || { tail -40 "$log/build.log"; exit 1; } ;;
    tests) timed tests ctest --test-dir build -R 'CUDA|OpsEmbedding|OpsLayerNorm|GPT2\.' --output-on-failure -j 4
           grep -E 'tests passed|FAILED|Failed' "$log/tests.log" | tee -a "$log/summary.txt" ;;
    kernels) timed kernels build/bin/bench_kernels --iters 20; tail -12 "$log/kernels.log" ;;
    train) timed train build/bin/bench_train --steps 15 --warmup 3 ${BENCH_TRAIN_ARGS:-}; tail -12 "$log/train.log" ;;
    generate) timed generate build/bin/bench_generate --sample ${BENCH_GENERATE_ARGS:-}; tail -16 "$log/generate.log" ;;
    finetune) timed finetune build/bin/bench_finetune --hf ${BENCH_FINETUNE_ARGS:-}; tail -16 "$log/finetune.log" ;;
    dist) timed dist build/bin/bench_dist --ranks "${DIST_RANKS:-2}"; tail -16 "$log/dist.log" | cut -c1-120 ;;
    hfgen)
      prompt="[3666, 5891, 4841]"  # "My fellow Americans"
      rm -rf runs/sotu_hf
      timed convert build/bin/convert --from native runs/sotu_gpt2_124m --to hf runs/sotu_hf
      for from in native hf; do
        src=runs/sotu_gpt2_124m; [ $from = hf ] && src=runs/sotu_hf
        timed "gen_$from" build/bin/generate --checkpoint $src --prompt-ids "$prompt" --max-new-tokens 64 \
          --temperature 0 --stop-ids "[]" --format ids
      done
      timed gen_transformers python3 tests/python/hf_gpt2_peer.py greedy runs/sotu_hf "$prompt" 64 \
        "$log/hf_greedy.json" cuda bfloat16
      python3 - "$log" <<'PY' | tee -a "$log/summary.txt"
import json, sys
log = sys.argv[1]
theirs = json.load(open(f"{log}/hf_greedy.json"))[3:]
for src in ("native", "hf"):
    ours = json.loads(open(f"{log}/gen_{src}.log").read().strip().splitlines()[-1])
    same = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    print(f"hfgen from {src}: {same} of {len(theirs)} greedy tokens equal to transformers' bf16"
          f"{' (all)' if ours == theirs else ''}")
PY
      ;;
    profile) timed profile python3 benchmarks/profile_step.py --top 45 --csv "$log/profile.csv"; head -50 "$log/profile.log" ;;
    converge)
      prepare
      rm -rf runs/sotu_gpt2_124m
      timed converge build/bin/train --config examples/configs/sotu_gpt2_124m.json
      grep -E 'val loss|step 300/' "$log/converge.log" | tee -a "$log/summary.txt"
      cp runs/sotu_gpt2_124m/metrics.jsonl "$log/converge_metrics.jsonl" 2>/dev/null ;;
    seeds)
      prepare
      extra=()
      for set in ${CONVERGE_SETS:-}; do extra+=(--set "$set"); done
      for seed in ${CONVERGE_SEEDS:-1337 1 2 3 4 5}; do
        rm -rf "runs/seed_$seed"
        timed "seed_$seed" build/bin/train --config examples/configs/sotu_gpt2_124m.json --set train.seed=$seed \
          --set checkpoint.every=0 --set out_dir=runs/seed_$seed "${extra[@]}"
        say "seed $seed: $(grep -E 'val loss' "$log/seed_$seed.log" | tail -1)"
      done ;;
    sanitize)
      bin=build/bin/llmtrain_tests
      filter=${SANITIZE_FILTER:-*_CUDA}
      pids=()
      limit=${SANITIZE_TIMEOUT:-420}
      [ "${GPU_CHECK_SECONDS:-0}" -gt 0 ] && ((end - SECONDS < limit)) && limit=$((end - SECONDS > 1 ? end - SECONDS : 1))
      for tool in memcheck racecheck synccheck initcheck; do
        ( timeout "$limit" compute-sanitizer --tool $tool --kernel-name kns=llmtrain \
            --error-exitcode 3 $bin --gtest_filter="$filter" >"$log/sanitize_$tool.log" 2>&1
          echo "[sanitize $tool] exit $?" >>"$log/summary.txt" ) &
        pids+=($!)
      done
      wait "${pids[@]}"
      for tool in memcheck racecheck synccheck initcheck; do
        say "[sanitize $tool] $(grep -E '(ERROR|RACECHECK|INITCHECK|SYNCCHECK) SUMMARY|tests passed|PASSED|FAILED' "$log/sanitize_$tool.log" | tr '\n' ' ')"
      done ;;
    flaky)
      pids=()
      for j in $(seq 1 "${FLAKY_JOBS:-6}"); do
        ( build/bin/llmtrain_tests --gtest_filter='OpsLayerNorm.KernelsMatchReference_CUDA' --gtest_shuffle \
            --gtest_random_seed=$((j * 1000)) --gtest_repeat="${FLAKY_REPEAT:-20}" >"$log/flaky_$j.log" 2>&1 ) &
        pids+=($!)
      done
      wait "${pids[@]}"
      say "[flaky] runs: $(cat "$log"/flaky_*.log | grep -c '^\[ RUN')" \
          "failed: $(cat "$log"/flaky_*.log | grep -c '^\[  FAILED  \] OpsLayerNorm.KernelsMatchReference_CUDA (')"
      grep -h -B2 -A6 'Failure' "$log"/flaky_*.log | head -60 >"$log/flaky_failures.txt" ;;
    *) say "unknown part $part"; exit 2 ;;
  esac
done
