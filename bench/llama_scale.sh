#!/usr/bin/env bash
# Big Llama models on one GPU (issue 36), the stages named in $STAGES (default: scale offload):
#   scale     configs/smollm2_360m, llama3_1b, llama3_3b, llama3_8b at B x T = 4 x 2048 (synthetic tokens, each config's
#             precision and optimizer settings, activation checkpointing picked by train.memory_budget_gib 128):
#             tokens/s, peak memory and the plan; bench/llama_scale_chart.py draws tokens/s x parameters and MFU.
#   offload   Llama-3-8B with optim.offload cpu: fp32 masters and fp32 AdamW state (PyTorch's numerics, which do not
#             fit one H200 otherwise), and bf16 masters and state (against the scale stage's 8B run without offload).
#   keep      Llama-3-8B with fp32 masters and fp32 AdamW state (PyTorch's numerics), B x T = 4 x 2048, against the
#             GPU (train.memory_budget_gib 138.7), each of $KEEP_RUNS (OFFLOAD:POLICY[:CAST[:GRADS[:MASTERS]]];
#             default auto:none cpu:none auto:selective auto:full): optim.offload auto keeps as much of the state on the
#             GPU as the plan leaves under the activation checkpointing policy, cpu streams all of it; CAST is
#             model.llama.weight_cast (default auto: under policy auto the budget may pick layer), GRADS
#             train.gradients (default fp32), MASTERS train.master_weights fp32 or split (default fp32: both are
#             PyTorch's numerics); 16 steps, steps 9-16 timed.
#   largest   the deepest stacks of Llama-3-8B's layer that bench/llama_fit.py plans to fit, each of $LARGEST
#             (POLICY:MASTERS:STATE:OFFLOAD:LAYERS), 8 steps: does it train, its peak against the plan, tokens/s.
#   stateloss the SmolLM2-360M shape, $LOSS_STEPS (2000) steps of byte tokens of $TEXT read in order, B x T = 8 x 1024:
#             fp32 masters and state, bf16 masters and state (same init), fp32 with another train.seed (the spread);
#             bench/loss_diff.py over the last 200 steps, the curves to $OUT/stateloss.png. The three runs share
#             the GPU at once (their losses do not depend on it; their step times are not measurements).
#   gradloss  as stateloss, fp32 masters and state: train.gradients fp32, bf16, and fp32 with another train.seed.
# Run directories go to /tmp/llama_scale (a big model's final weights do not fit the device's disk twice); each run's
# log and metrics.jsonl are copied to $OUT.
# Usage (GPU machine, repo root, after a build): OUT=/some/dir BIN=build-dev/dtrain bash bench/llama_scale.sh
set -uo pipefail
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
BIN=${BIN:-build-dev/dtrain}
STAGES=${STAGES:-"scale offload"}
TEXT=${TEXT:-.device-carry/text/corpus.txt}
has() { [[ " $STAGES " == *" $1 "* ]]; }
step_line() { grep -E "step [0-9]+/" "$1" | tail -1 | sed 's/.*\] //'; }
peak_line() { grep -m1 "measured peak" "$1" | sed 's/.*\] //'; }

# run NAME CONFIG STEPS [--set ...]: a throughput run into $OUT/NAME (its log: $OUT/NAME.log).
run() {
  local name=$1 cfg=$2 steps=$3
  shift 3
  $BIN train "$cfg" --set train.max_steps="$steps" --set train.log_every=${LOG_EVERY:-10} \
    --set checkpoint.enabled=false --set run.final_weights=false --set run.dir="$RUNS/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$?: $(step_line "$OUT/$name.log")"
  echo "  $(peak_line "$OUT/$name.log")"
  cp "$RUNS/$name/metrics.jsonl" "$OUT/$name.metrics.jsonl" 2> /dev/null
  rm -rf "${RUNS:?}/$name"
}
RUNS=/tmp/llama_scale
mkdir -p $RUNS

if has scale; then
  for shape in smollm2_360m llama3_1b llama3_3b llama3_8b; do
    run "scale_$shape" configs/$shape.yaml 30 --set data.batch_size=4 --set model.llama.max_seq_len=2048 \
      --set model.llama.activation_checkpointing=auto --set train.memory_budget_gib=128
  done
  python3 bench/llama_scale_chart.py "$OUT/scale.png" "$OUT"/scale_*.log
fi

if has offload; then
  run offload_8b_fp32 configs/llama3_8b.yaml 12 --set train.master_weights=fp32 --set optim.state_dtype=fp32 \
    --set optim.offload=cpu
  run offload_8b_bf16 configs/llama3_8b.yaml 20 --set optim.offload=cpu
fi

if has keep; then
  for spec in ${KEEP_RUNS:-auto:none cpu:none auto:selective auto:full}; do
    IFS=: read -r offload policy cast grads masters <<< "$spec"
    name=keep_8b_fp32_${offload}_${policy}_${cast:-auto}_${grads:-fp32}_${masters:-fp32}
    LOG_EVERY=8 run "$name" configs/llama3_8b.yaml 16 --set train.master_weights="${masters:-fp32}" \
      --set optim.state_dtype=fp32 --set optim.offload="$offload" --set model.llama.activation_checkpointing="$policy" \
      --set model.llama.weight_cast="${cast:-auto}" --set train.gradients="${grads:-fp32}" \
      --set train.memory_budget_gib=138.7
    grep -m1 -oE "activation checkpointing [^;]* chosen|optim.offload auto: [^:]*" "$OUT/$name.log"
  done
fi

if has largest; then
  for spec in ${LARGEST:-full:bf16:bf16:none:60 selective:bf16:bf16:cpu:67}; do
    IFS=: read -r policy masters state offload layers <<< "$spec"
    LOG_EVERY=2 run "largest_${policy}_${masters}_${state}_${offload}_${layers}" configs/llama3_8b.yaml 8 \
      --set model.llama.n_layer="$layers" --set model.llama.activation_checkpointing="$policy" \
      --set train.master_weights="$masters" --set optim.state_dtype="$state" --set optim.offload="$offload" \
      --set train.memory_budget_gib=138.7
  done
fi

if has stateloss || has gradloss; then
  L=$RUNS/stateloss
  rm -rf $L && mkdir -p $L
  $BIN data convert-text --out $L/shards --seq-len 1024 "$TEXT" > "$OUT/stateloss_data.log" 2>&1
  echo "convert-text rc=$?: $(tail -1 "$OUT/stateloss_data.log")"
  loss_run() {
    local name=$1
    shift
    $BIN train configs/smollm2_360m.yaml --set data.dataset=shards --set data.train_shards=$L/shards \
      --set data.shuffle=false --set data.batch_size=8 --set train.max_steps="${LOSS_STEPS:-2000}" \
      --set schedule.warmup_steps=100 --set train.log_every=1 --set checkpoint.enabled=false --set train.eval=false \
      --set run.dir="$L/$name" "$@" > "$OUT/$name.log" 2>&1
    echo "$name rc=$?: $(step_line "$OUT/$name.log")"
    cp "$L/$name/metrics.jsonl" "$OUT/$name.metrics.jsonl"
  }
fi

if has stateloss; then
  loss_run stateloss_fp32 &
  loss_run stateloss_bf16 --set train.master_weights=bf16 --set optim.state_dtype=bf16 &
  loss_run stateloss_fp32_seed --set train.seed=4321 &
  wait
  python3 bench/loss_diff.py 200 "$L/stateloss_fp32" "$L/stateloss_bf16" "$L/stateloss_fp32_seed" \
    --png "$OUT/stateloss.png"
fi

# gradloss: as stateloss, with fp32 masters and state throughout: train.gradients fp32, bf16, and fp32 with another
# train.seed (the spread); the curves to $OUT/gradloss.png.
if has gradloss; then
  fp32=(--set train.master_weights=fp32 --set optim.state_dtype=fp32)
  loss_run gradloss_fp32 "${fp32[@]}" &
  loss_run gradloss_bf16 "${fp32[@]}" --set train.gradients=bf16 &
  loss_run gradloss_fp32_seed "${fp32[@]}" --set train.seed=4321 &
  wait
  python3 bench/loss_diff.py 200 "$L/gradloss_fp32" "$L/gradloss_bf16" "$L/gradloss_fp32_seed" \
    --png "$OUT/gradloss.png"
fi
