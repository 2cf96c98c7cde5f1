#!/usr/bin/env bash
# The main job (`make demo`): a GPT-2 trained from nothing on one machine. Takes a corpus (the fortunes
# Debian package, 2.6 MB of English quotations, or CORPUS=path: a text file or a folder of them),
# trains a SentencePiece tokenizer on it, prepares token shards, trains a small GPT-2 (about 5 minutes
# on a 2-core CPU; a larger one on a GPU), evaluates it, draws the loss curves into
# runs/demo/model/loss.svg and prints a few samples. Set-up (packages, LibTorch, the build) is done by
# `make build` before this runs.
#   DEMO_OUT   the run's folder (default runs/demo)      DEMO_STEPS  training steps (default: the config's)
#   DEMO_SET   more --set flags for train            DEMO_DEVICE cpu or gpu (default: gpu when there is one)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bin=${LLMTRAIN_BUILD_DIR:-$root/build}/bin
out=${DEMO_OUT:-runs/demo}
say() { printf '\n[demo] %s\n' "$*"; }

# ---- The corpus ---------------------------------------------------------------------------------
fortunes=/usr/share/games/fortunes
separator=${DOC_SEPARATOR-}
if [ -n "${CORPUS:-}" ]; then
  [ -e "$CORPUS" ] || { echo "[demo] error: CORPUS=$CORPUS does not exist (give a text file or a folder of them)" >&2; exit 1; }
  mapfile -t files < <(find -L "$CORPUS" -type f ! -name '.*' | sort)
else
  if [ ! -d "$fortunes" ]; then
    say "installing the fortunes package (the default corpus)"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      timeout 120 apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fortunes >/dev/null || true
    fi
    [ -d "$fortunes" ] || { echo "[demo] error: no $fortunes and the fortunes package cannot be installed here; run with CORPUS=path/to/text" >&2; exit 1; }
  fi
  # Quotation files only: not the .dat indexes, not the .u8 links to the same files.
  mapfile -t files < <(find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
  separator=${DOC_SEPARATOR-%}  # fortune files hold many quotations, each ended by a "%" line
fi
[ "${#files[@]}" -gt 0 ] || { echo "[demo] error: no text files in ${CORPUS:-$fortunes}" >&2; exit 1; }
bytes=$(cat "${files[@]}" | wc -c)
say "corpus: ${#files[@]} files, $((bytes / 1024)) KiB from ${CORPUS:-the fortunes package}"

# A fresh run folder each time; the previous demo is kept once as $out.previous. Only folders a demo
# wrote (its model folder carries llmtrain's .llmtrain marker, or it holds nothing but the demo's
# tokenizer/, data/ and model/ of a run stopped early) are moved or removed.
is_demo() {
  [ -f "$1/model/.llmtrain" ] && return 0
  local name
  for name in $(ls -A "$1"); do
    case $name in tokenizer | data | model) ;; *) return 1 ;; esac
  done
}
if [ -e "$out" ]; then
  is_demo "$out" || { echo "[demo] error: $out exists and is not a demo's folder; set DEMO_OUT to another" >&2; exit 1; }
  if [ -e "$out.previous" ]; then
    is_demo "$out.previous" || { echo "[demo] error: $out.previous exists and is not a demo's folder" >&2; exit 1; }
    rm -rf "$out.previous"
  fi
  mv "$out" "$out.previous"
fi
mkdir -p "$out"

# ---- Tokenizer and shards -----------------------------------------------------------------------
say "training a SentencePiece BPE tokenizer (4096 pieces)"
"$bin/train_tokenizer" --vocab-size 4096 --max-sentences 2000000 --out "$out/tokenizer/sp" "${files[@]}"
say "preparing token shards (5% of the documents for validation)"
"$bin/prepare_data" --tokenizer sentencepiece --model "$out/tokenizer/sp.model" ${separator:+--doc-separator "$separator"} \
  --val-fraction 0.05 --out "$out/data" "${files[@]}"

# ---- Training -----------------------------------------------------------------------------------
if [ -z "${DEMO_DEVICE:-}" ]; then
  DEMO_DEVICE=cpu
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then DEMO_DEVICE=gpu; fi
fi
config=examples/configs/demo_${DEMO_DEVICE}.json
[ -f "$config" ] || { echo "[demo] error: DEMO_DEVICE=$DEMO_DEVICE: expected cpu or gpu" >&2; exit 1; }
say "training GPT-2 ($config)"
start=$(date +%s)
# shellcheck disable=SC2086
"$bin/train" --config "$config" --set out_dir="$out/model" --set data.train="$out/data/train_*.bin" \
  --set data.val="$out/data/val_*.bin" --set tokenizer.path="$out/tokenizer/sp.model" \
  ${DEMO_STEPS:+--set train.max_steps=$DEMO_STEPS} ${DEMO_SET:-}
say "trained in $(($(date +%s) - start)) s; loss curves: $out/model/loss.svg, metrics: $out/model/metrics.jsonl"
say "the run folder $out/model carries its tokenizer: generate --checkpoint $out/model needs nothing else"

# ---- Samples ------------------------------------------------------------------------------------
say "samples (temperature 0.8, top-k 40)"
for seed in 1 2 3; do
  printf -- '--- sample %s ---\n' "$seed"
  "$bin/generate" --checkpoint "$out/model" --max-new-tokens 80 --temperature 0.8 --top-k 40 --seed "$seed"
done
printf -- '--- prompt "The meaning of life" ---\n'
"$bin/generate" --checkpoint "$out/model" --prompt "The meaning of life" --max-new-tokens 60 --temperature 0.8 \
  --top-k 40 --seed 7
