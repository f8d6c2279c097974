#!/usr/bin/env bash
# dtrain's data loader alone vs PyTorch's DataLoader, on the same shards, same workers, same batch
# size and count, in the same run (decoded tensors into pinned memory; with DEVICE=cuda also copied
# to the GPU):
#   1. dtrain data convert-fashion-mnist (train split, 60000 samples) into a temp dir
#   2. dtrain data bench DIR        (data/loader.h)
#   3. python3 bench/loader_torch.py DIR
# then prints dtrain / torch samples/s (> 1.00 = dtrain is faster).
#
# Usage (from the repo root): bench/loader.sh [BUILD_DIR]     default BUILD_DIR=build
# Environment: THREADS (4), BATCH (256), BATCHES (200), DEVICE (cpu|cuda; default cuda when
#   nvidia-smi sees a GPU), SRC (Fashion-MNIST dir), OUT (shard dir; default a temp dir). Needs torch.
set -euo pipefail

BUILD=${1:-build}
THREADS=${THREADS:-4}
BATCH=${BATCH:-256}
BATCHES=${BATCHES:-200}
if [[ -z ${DEVICE:-} ]]; then DEVICE=$(nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu); fi
OUT=${OUT:-$(mktemp -d)}
SRC=${SRC:-/usr/share/datasets/fashion-mnist}
ARGS=(--threads "$THREADS" --batch "$BATCH" --batches "$BATCHES" --device "$DEVICE")

"$BUILD/dtrain" data convert-fashion-mnist --src "$SRC" --out "$OUT" --split train
echo "== dtrain loader =="
d=$("$BUILD/dtrain" data bench "$OUT/train" "${ARGS[@]}" | tee /dev/stderr | awk '{for(i=1;i<NF;i++) if($(i+1)=="samples/s") print $i}')
echo "== torch DataLoader =="
t=$(python3 "$(dirname "$0")/loader_torch.py" "$OUT/train" "${ARGS[@]}" | tee /dev/stderr | awk '{for(i=1;i<NF;i++) if($(i+1)=="samples/s") print $i}')
awk -v d="$d" -v t="$t" 'BEGIN { printf "dtrain / torch samples/s: %.2f\n", d / t }'
