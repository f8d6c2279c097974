#!/usr/bin/env bash
# dtrain's NCCL all-reduce against bare NCCL, same sizes, same timing, same machine, same job:
#   1. mpirun -np $NGPU dtrain bench allreduce --backend nccl    (dtrain's Communicator path)
#   2. mpirun -np $NGPU raw_nccl_allreduce                       (bench/raw_nccl_allreduce.cu)
# then prints dtrain's busbw / raw NCCL's busbw at 256 MiB and 1 GiB (1.00 = no overhead).
#
# Usage (from the repo root, after building with CUDA and examples on):
#   bench/allreduce.sh [BUILD_DIR]            default BUILD_DIR=build
# Environment: NGPU (default: every visible GPU), DTYPE (f32|bf16, default f32), ITERS (20),
#   WARMUP (5), MAX_BYTES (1G), OUT (directory for the two tables; default a temp dir),
#   MPIRUN_ARGS (extra mpirun arguments, e.g. "--host a:8,b:8").
# Exits non-zero if either run fails or reports a wrong all-reduce result.
set -euo pipefail

BUILD=${1:-build}
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
# NVLink SHARP (NVLS) stays off, as in every dtrain device run (NVLink multicast is not used).
export NCCL_NVLS_ENABLE=0
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# shellcheck disable=SC2206  # MPIRUN_ARGS is split on purpose
MPIRUN=(mpirun -np "$NGPU" --bind-to none -x NCCL_NVLS_ENABLE ${MPIRUN_ARGS:-})
ARGS=(--min-bytes 8 --max-bytes "${MAX_BYTES:-1G}" --factor 2 --iters "${ITERS:-20}" --warmup "${WARMUP:-5}"
      --dtype "${DTYPE:-f32}")

echo "== dtrain bench allreduce ($NGPU GPUs) =="
"${MPIRUN[@]}" "$BUILD/dtrain" bench allreduce --backend nccl "${ARGS[@]}" | tee "$OUT/dtrain.txt"
echo "== raw NCCL ($NGPU GPUs) =="
"${MPIRUN[@]}" "$BUILD/bench/raw_nccl_allreduce" "${ARGS[@]}" | tee "$OUT/raw_nccl.txt"

# Table rows: size count type redop time algbw busbw #wrong ('#' lines are headers).
busbw() { awk -v s="$2" '$1 !~ /^#/ && $1 == s { print $7 }' "$1"; }
wrong() { awk '$1 !~ /^#/ && NF == 8 { w += $8 } END { print w + 0 }' "$1"; }
echo "== dtrain vs raw NCCL (busbw, GB/s) =="
for size in 268435456 1073741824; do
  d=$(busbw "$OUT/dtrain.txt" "$size")
  r=$(busbw "$OUT/raw_nccl.txt" "$size")
  if [[ -z $d || -z $r ]]; then echo "$((size >> 20)) MiB: not measured (MAX_BYTES too small?)"; continue; fi
  awk -v s="$((size >> 20))" -v d="$d" -v r="$r" \
    'BEGIN { printf "%5d MiB: dtrain %8.2f  raw NCCL %8.2f  ratio %.3f\n", s, d, r, (r > 0 ? d / r : 0) }'
done
for f in dtrain raw_nccl; do
  if [[ $(wrong "$OUT/$f.txt") != 0 ]]; then echo "$f: WRONG all-reduce results (see $OUT/$f.txt)"; exit 1; fi
done
echo "tables: $OUT/dtrain.txt $OUT/raw_nccl.txt"
