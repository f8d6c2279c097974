#!/usr/bin/env bash
# torchao float8 training baselines on the GPU machine (issue 35), no build needed: for each model, the PyTorch
# reference under torch.compile with each of $RECIPES (default: none tensorwise rowwise; none = the bf16 baseline of the
# same call), B x T = 16 x 1024, synthetic tokens. One JSON line per run (tokens/s, step ms, MFU, peak memory, and for
# float8 the recipe, the converted layer count and torchao's commit); logs in $OUT (default /tmp/torchao_bench).
# Needs .device-carry/torchao.tgz (bench/torchao_carry.sh) or TORCHAO_PATH.
# Usage: bench/torchao_bench.sh llama|gpt2     ($SHAPES: llama shapes, default smollm2_360m llama3_1b; $SIZES: gpt2
#        sizes, default 124m 350m; $MODE: torch.compile mode, default default; $FILTER: all|auto, default all)
set -uo pipefail
cd "$(dirname "$0")/.."
[[ ${1:-} == llama || ${1:-} == gpt2 ]] || { echo "usage: bench/torchao_bench.sh llama|gpt2" >&2; exit 2; }
source bench/torchao_env.sh
OUT=${OUT:-/tmp/torchao_bench}; mkdir -p "$OUT"
run() {  # NAME SCRIPT ARGS...: one run, its last line (the JSON line, or the error)
  local name=$1; shift
  python3 "$@" --compile --mode "${MODE:-default}" --float8-filter "${FILTER:-all}" > "$OUT/$name.log" 2>&1
  echo "$name rc=$?: $(tail -1 "$OUT/$name.log")"
}
R=${RECIPES:-none tensorwise rowwise}
case ${1:-} in
  llama) for s in ${SHAPES:-smollm2_360m llama3_1b}; do
           for r in $R; do run llama_${s}_$r bench/llama_torch.py --shape $s --float8 $r; done
         done ;;
  gpt2) for s in ${SIZES:-124m 350m}; do
          for r in $R; do run gpt2_${s}_$r bench/gpt2_torch.py --model $s --steps 30 --float8 $r; done
        done ;;
esac
