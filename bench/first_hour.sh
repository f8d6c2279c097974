#!/usr/bin/env bash
# Issue 37's "first hour" journey on a GPU, each step one dtrain command: own text -> tokenizer -> dataset with a
# validation split -> GPT-2 with periodic eval -> Ctrl-C (SIGINT to the launcher's process group, as a terminal
# sends it) -> the same command again resumes -> export for Hugging Face -> transformers loads the model (and the
# tokenizer, when its Python sentencepiece is installed) and scores the validation records.
# The tokenizer and dataset steps need Debian's `sentencepiece` tools: where they are missing (the GPU machine),
# pass a directory made by them elsewhere with PREPARED=DIR (it holds tok.model and data/{train,val}).
# Usage: bench/first_hour.sh BUILD_DIR TEXT OUT   (python3 with torch and transformers for the last step)
#   DEVICE=cpu: train on the CPU in fp32 (2 ranks) and stop before the transformers step (to try the flow here);
#   EXTRA: more --set arguments (a smaller model there); STOP_STEP: Ctrl-C once this step is logged (400).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$1 TEXT=$2 OUT=$3
D=$PWD/$BUILD/dtrain
mkdir -p "$OUT"
say() { printf '\n$ %s\n' "$*"; }
if [[ -z ${PREPARED:-} ]]; then
  say dtrain data train-tokenizer --input "$TEXT" --vocab-size 8000 --out "$OUT/tok"
  "$D" data train-tokenizer --input "$TEXT" --vocab-size 8000 --out "$OUT/tok"
  say dtrain data convert-text --tokenizer "$OUT/tok.model" --val-fraction 0.05 --seq-len 256 --out "$OUT/data" "$TEXT"
  "$D" data convert-text --tokenizer "$OUT/tok.model" --val-fraction 0.05 --seq-len 256 --out "$OUT/data" "$TEXT"
else
  cp -r "$PREPARED"/. "$OUT"/
fi
# A 6-layer GPT-2 (vocabulary and context from the dataset: configs/gpt2_text.yaml's 0 = auto) on the GPU.
ARGS=(configs/gpt2_text.yaml --set data.train_shards="$OUT/data/train" --set data.test_shards="$OUT/data/val"
      --set model.gpt2.n_layer=6 --set model.gpt2.n_head=6 --set model.gpt2.n_embd=384 --set data.batch_size=32
      --set data.eval_batch_size=32 --set train.device=${DEVICE:-cuda} --set train.precision=${PRECISION:-bf16} --set train.epochs=3
      --set train.max_steps=0 --set train.eval_every=100 --set train.eval_batches=8 --set train.log_every=100
      --set optim.lr=1e-3 --set run.dir="$OUT/run" ${EXTRA:-})
STOP_STEP=${STOP_STEP:-400}
last_step() { grep -oE "step [0-9]+/" "$1" | tail -1 | tr -dc 0-9; }
say dtrain launch "${ARGS[@]}" "  # Ctrl-C after step $STOP_STEP"
setsid "$D" launch "${ARGS[@]}" > "$OUT/launch1.log" 2>&1 &
pid=$!
until (( $(last_step "$OUT/launch1.log" || true)0 >= STOP_STEP * 10 )) || ! kill -0 $pid 2>/dev/null; do sleep 0.2; done
kill -INT -- -$pid
wait $pid && rc=0 || rc=$?
grep -vE "^\s*$" "$OUT/launch1.log" | grep -E "step [0-9]+/|eval|preempt|checkpoint|signal|resume" | sed 's/^[0-9:.]* [^ ]* //' | tail -8
echo "(exit $rc)"
say dtrain launch "${ARGS[@]}" "  # the same command again"
"$D" launch "${ARGS[@]}" > "$OUT/launch2.log" 2>&1 && rc=0 || rc=$?
grep -E "resum|step [0-9]+/|eval loss|done:" "$OUT/launch2.log" | sed 's/^[0-9:.]* [^ ]* //' | head -3
grep -E "step [0-9]+/|eval loss|done:" "$OUT/launch2.log" | sed 's/^[0-9:.]* [^ ]* //' | tail -3
echo "(exit $rc)"
say dtrain ckpt export "$OUT/run/checkpoints" --format hf --out "$OUT/hf"
"$D" ckpt export "$OUT/run/checkpoints" --format hf --out "$OUT/hf"
ls "$OUT/hf"
[[ ${DEVICE:-cuda} == cuda ]] || exit 0
say python3 bench/first_hour_check.py "$OUT/hf" "$OUT/data/val" "$TEXT"
python3 bench/first_hour_check.py "$OUT/hf" "$OUT/data/val" "$TEXT"
