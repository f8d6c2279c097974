#!/usr/bin/env bash
# Checkpoint cost: the training stall of an asynchronous save vs a synchronous save of the same
# state, and dtrain's write throughput to local disk vs `dd` writing the same number of bytes with
# fsync — all in one run, on the same disk.
#
# Usage: bench/checkpoint.sh [BUILD_DIR]   (env: HIDDEN, default [8192,8192,8192]: an MLP of ~141M
#   parameters, i.e. ~1.7 GB of checkpoint with AdamW state; DEVICE=cuda|cpu, default cuda; OUT dir)
set -euo pipefail
BUILD=${1:-build}
BIN=$BUILD/dtrain
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
rm -rf "$OUT/async" "$OUT/sync"  # metrics.jsonl appends: start clean
HIDDEN=${HIDDEN:-[8192,8192,8192]}
DEVICE=${DEVICE:-cuda}
# Saves every SAVE_EVERY steps (default 600), far enough apart for a background write to finish, as
# in real training (minutes between saves); the first save also allocates the pinned snapshot buffers.
STEPS=${STEPS:-4500}
SAVE_EVERY=${SAVE_EVERY:-1500}
common=(--set "model.mlp.hidden=$HIDDEN" --set train.device=$DEVICE --set train.max_steps=$STEPS
        --set train.epochs=1000 --set train.eval=false --set train.log_every=$SAVE_EVERY
        --set checkpoint.every_steps=$SAVE_EVERY --set checkpoint.at_end=false --set checkpoint.keep_last=2
        --set data.limit_train=8192 --set optim.lr=1e-4 --set schedule.warmup_steps=5)
for mode in async sync; do
  flag=$([[ $mode == async ]] && echo true || echo false)
  "$BIN" train configs/fashion_mnist_mlp.yaml "${common[@]}" --set checkpoint.async=$flag \
    --set run.dir="$OUT/$mode" > "$OUT/$mode.log" 2>&1 || { tail -5 "$OUT/$mode.log"; exit 1; }
done
step_dir=$(ls -d "$OUT"/sync/checkpoints/step-* | tail -1)
bytes=$(du -sb "$step_dir" | cut -f1)
# Stall per save from metrics.jsonl: the first save, and the median of the later ones.
stalls() { grep '"kind":"checkpoint"' "$1" | sed 's/.*"stall_ms":\([0-9.e+-]*\),"wait_ms":\([0-9.e+-]*\).*/\1 \2/' |
  awk -v w="${WITH_WAIT:-1}" '{print w ? $1 : $1 - $2}'; }
first_stall() { stalls "$1" | head -1; }
median_later_stall() { stalls "$1" | tail -n +2 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
async_first=$(first_stall "$OUT/async/metrics.jsonl")
async_ms=$(median_later_stall "$OUT/async/metrics.jsonl")
async_nowait_ms=$(WITH_WAIT=0 median_later_stall "$OUT/async/metrics.jsonl")
sync_ms=$(median_later_stall "$OUT/sync/metrics.jsonl")
# dd: the same bytes, 16 MiB blocks, fsync at the end (what a durable checkpoint needs).
count=$(( (bytes + 16777215) / 16777216 ))
dd_s=$( { /usr/bin/time -f %e dd if=/dev/zero of="$OUT/dd.bin" bs=16M count=$count conv=fsync status=none; } 2>&1 )
rm -f "$OUT/dd.bin"
awk -v b="$bytes" -v a="$async_ms" -v n="$async_nowait_ms" -v f="$async_first" -v s="$sync_ms" -v d="$dd_s" 'BEGIN {
  printf "checkpoint size            %.2f GB\n", b / 1e9
  printf "stall, first async save   %.1f ms (allocates the pinned snapshot buffers)\n", f
  printf "stall per save, async      %.1f ms (median of the later saves; %.2f ms without waiting for the previous write)\n", a, n
  printf "stall per save, sync       %.1f ms  (async/sync = %.3f)\n", s, a / s
  printf "write throughput, dtrain   %.2f GB/s (sync save: snapshot + write + fsync + manifest)\n", b / 1e9 / (s / 1e3)
  printf "write throughput, dd       %.2f GB/s (same bytes, conv=fsync)\n", b / 1e9 / d
  printf "dtrain / dd                %.2f\n", (b / (s / 1e3)) / (b / d)
}' | tee "$OUT/summary.txt"
