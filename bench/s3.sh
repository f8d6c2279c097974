#!/usr/bin/env bash
# Checkpoint upload to an S3 server vs curl uploading the same files, in one run: a real Ceph RGW on
# loopback (scripts/s3_test_server.sh), a synchronous checkpoint save of dtrain (3 data files +
# manifest + latest, SigV4-signed, SHA-256 of every body) vs `curl --aws-sigv4` PUTs of the same
# three data files (UNSIGNED-PAYLOAD: curl does not hash the body).
# Usage: bench/s3.sh [BUILD_DIR]  (env: HIDDEN, default [2048,2048] ≈ 71 MB per checkpoint; OUT dir)
set -euo pipefail
BUILD=${1:-build}
BIN=$BUILD/dtrain
OUT=${OUT:-$(mktemp -d)}
HIDDEN=${HIDDEN:-[2048,2048]}
rm -rf "$OUT/s3" "$OUT/local" "$OUT/rgw"
mkdir -p "$OUT"
read -r EP AK SK < <(scripts/s3_test_server.sh start "$OUT/rgw")
trap 'scripts/s3_test_server.sh stop "$OUT/rgw"' EXIT
export AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK AWS_ENDPOINT_URL=$EP
sig=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$AK:$SK" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
curl -sf -X PUT "${sig[@]}" "$EP/bench" > /dev/null
common=(--set "model.mlp.hidden=$HIDDEN" --set train.device=cpu --set train.max_steps=60 --set train.eval=false
        --set train.log_every=20 --set checkpoint.every_steps=20 --set checkpoint.at_end=false
        --set checkpoint.async=false --set checkpoint.keep_last=2 --set data.limit_train=4096
        --set schedule.warmup_steps=5)
"$BIN" train configs/fashion_mnist_mlp.yaml "${common[@]}" --set run.dir="$OUT/local" > "$OUT/local.log" 2>&1
"$BIN" train configs/fashion_mnist_mlp.yaml "${common[@]}" --set run.dir="$OUT/s3" \
  --set checkpoint.url=s3://bench/run > "$OUT/s3.log" 2>&1 || { tail -5 "$OUT/s3.log"; exit 1; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
stall() { grep '"kind":"checkpoint"' "$1" | sed 's/.*"stall_ms":\([0-9.e+-]*\).*/\1/' | median; }
s3_ms=$(stall "$OUT/s3/metrics.jsonl")
local_ms=$(stall "$OUT/local/metrics.jsonl")
step_dir=$(ls -d "$OUT"/local/checkpoints/step-* | tail -1)
bytes=$(du -sb "$step_dir" | cut -f1)
# curl: the same three data files, one PUT each, three repetitions; the median.
curl_s=$(for rep in 1 2 3; do
  t0=$(date +%s.%N)
  for f in "$step_dir"/*.bin; do curl -sf -T "$f" "${sig[@]}" "$EP/bench/curl/$rep/$(basename "$f")" > /dev/null; done
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}'
done | median)
awk -v b="$bytes" -v s="$s3_ms" -v l="$local_ms" -v c="$curl_s" 'BEGIN {
  printf "checkpoint size                 %.1f MB\n", b / 1e6
  printf "dtrain sync save to S3 (RGW)    %.0f ms  -> %.0f MB/s\n", s, b / 1e6 / (s / 1e3)
  printf "curl PUT of the same files      %.0f ms  -> %.0f MB/s\n", c * 1e3, b / 1e6 / c
  printf "dtrain / curl (throughput)      %.2f\n", (c * 1e3) / s
  printf "dtrain sync save to local disk  %.0f ms  (same run, for reference)\n", l
}' | tee "$OUT/summary.txt"
