#!/usr/bin/env bash
# Checkpoint-sized S3 transfers, dtrain vs curl, in one run against a real Ceph RGW on loopback
# (scripts/s3_test_server.sh, memstore). One object of SIZE bytes (default 1,493,277,696: GPT-2 124M's
# params + two AdamW moments in f32):
#   upload    dtrain Storage::Put (multipart, P parts in flight, SigV4 with each part's SHA-256; and once more
#             with UNSIGNED-PAYLOAD, as curl sends, storage.unsigned_payload)
#             vs one `curl -T` PUT (SigV4, UNSIGNED-PAYLOAD: curl hashes nothing)
#             vs P parallel `curl` UploadPart PUTs of the same parts (create + parts + complete, UNSIGNED-PAYLOAD)
#   download  dtrain Storage::GetInto (P ranged GETs in flight, into memory, then compared with the file)
#             vs P parallel ranged `curl` GETs of the same ranges (to /dev/null)
# Each figure is the median of REPS runs; ratios are throughput ratios (> 1: dtrain is faster).
# Usage: bench/ckpt_s3_bench.sh [BUILD_DIR]   env: SIZE, PART_MB (16), P (8), REPS (3), OUT (a temp dir)
set -euo pipefail
BUILD=${1:-build}
TOOL=$BUILD/bench/ckpt_io_bench
SIZE=${SIZE:-1493277696}
PART_MB=${PART_MB:-16}
P=${P:-8}
REPS=${REPS:-3}
OUT=${OUT:-$(mktemp -d)}
[[ -x $TOOL ]] || { echo "no $TOOL (build the ckpt_io_bench target)" >&2; exit 2; }
rm -rf "$OUT/rgw" "$OUT/parts"
mkdir -p "$OUT/parts"
# One object lives at a time: each is deleted, and its data garbage-collected at once, after its run
# (RGW's GC would otherwise keep it for hours and fill the in-memory store).
export S3_TEST_MEMSTORE_BYTES=$((SIZE * 2 + (1 << 30)))
read -r EP AK SK < <(scripts/s3_test_server.sh start "$OUT/rgw")
trap 'scripts/s3_test_server.sh stop "$OUT/rgw"' EXIT
export AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK AWS_ENDPOINT_URL=$EP AWS_REGION=us-east-1
export DT_BENCH_PART_MB=$PART_MB DT_BENCH_PARALLEL=$P
sig=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$AK:$SK" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
curl -sf -X PUT "${sig[@]}" "$EP/bench" >/dev/null

file=$OUT/state.bin
[[ -f $file && $(stat -c %s "$file") == "$SIZE" ]] || head -c "$SIZE" /dev/urandom >"$file"
part=$((PART_MB << 20))
split -b "$part" -d -a 5 "$file" "$OUT/parts/p."  # the parts curl uploads (made once, not timed)
mapfile -t parts < <(cd "$OUT/parts" && ls p.*)
nparts=${#parts[@]}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.3f\n", b - a}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
del() {
  curl -sf -X DELETE "${sig[@]}" "$EP/bench/$1" >/dev/null
  CEPH_CONF=$OUT/rgw/ceph.conf radosgw-admin gc process --include-all >/dev/null 2>&1
}

# Helpers that xargs runs P at a time (the keys are the throwaway test server's). Query parameters in byte
# order: curl 7.88's SigV4 does not sort them.
cat >"$OUT/put_part.sh" <<SH
#!/bin/sh
# put_part.sh PART_NUMBER PART_FILE UPLOAD_ID
exec curl -sf -T "$OUT/parts/\$2" -D "$OUT/parts/h.\$1" -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 \
  --user "$AK:$SK" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$EP/bench/multi?partNumber=\$1&uploadId=\$3"
SH
cat >"$OUT/get_range.sh" <<SH
#!/bin/sh
# get_range.sh INDEX: bytes [INDEX * part, (INDEX + 1) * part) of bench/dl, to /dev/null
a=\$((\$1 * $part))
exec curl -sf -r "\$a-\$((a + $part - 1))" -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 --user "$AK:$SK" \
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$EP/bench/dl"
SH
chmod 700 "$OUT/put_part.sh" "$OUT/get_range.sh"

curl_single_put() {  # one PUT of the whole file
  local t0
  t0=$(now)
  curl -sf -T "$file" "${sig[@]}" "$EP/bench/single" >/dev/null
  since "$t0"
  del single
}

curl_parallel_put() {  # create, P parallel UploadPart PUTs, complete
  local t0 id i xml="<CompleteMultipartUpload>"
  t0=$(now)
  id=$(curl -sf -X POST "${sig[@]}" "$EP/bench/multi?uploads=" | sed -n 's:.*<UploadId>\(.*\)</UploadId>.*:\1:p')
  for ((i = 0; i < nparts; i++)); do echo "$((i + 1)) ${parts[i]} $id"; done | xargs -P "$P" -n 3 "$OUT/put_part.sh"
  for ((i = 1; i <= nparts; i++)); do
    xml+="<Part><PartNumber>$i</PartNumber><ETag>$(tr -d '\r' <"$OUT/parts/h.$i" | sed -n 's/^[Ee][Tt][Aa][Gg]: *//p')</ETag></Part>"
  done
  xml+="</CompleteMultipartUpload>"
  curl -sf -X POST "${sig[@]}" -H "Content-Type: application/xml" --data-binary "$xml" \
    "$EP/bench/multi?uploadId=$id" >/dev/null
  since "$t0"
  rm -f "$OUT"/parts/h.*
  del multi
}

curl_parallel_get() {  # P parallel ranged GETs of part-sized ranges, to /dev/null
  local t0
  t0=$(now)
  seq 0 $((nparts - 1)) | xargs -P "$P" -n 1 "$OUT/get_range.sh"
  since "$t0"
}

dtrain() { "$TOOL" "$@" | awk '{print $4}'; }

up_dtrain=() up_unsigned=() up_single=() up_par=() dl_dtrain=() dl_par=()
for rep in $(seq "$REPS"); do
  up_dtrain+=("$(dtrain put s3://bench dtrain "$file")")
  del dtrain
  up_unsigned+=("$(DT_BENCH_UNSIGNED=1 dtrain put s3://bench dtrain "$file")")
  del dtrain
  up_single+=("$(curl_single_put)")
  up_par+=("$(curl_parallel_put)")
done
"$TOOL" put s3://bench dl "$file" >/dev/null # the object both downloads read
for rep in $(seq "$REPS"); do  # alternating which goes first
  if ((rep % 2)); then
    dl_dtrain+=("$(dtrain get s3://bench dl "$file")")
    dl_par+=("$(curl_parallel_get)")
  else
    dl_par+=("$(curl_parallel_get)")
    dl_dtrain+=("$(dtrain get s3://bench dl "$file")")
  fi
done
echo "runs (s): dtrain put ${up_dtrain[*]} | dtrain put unsigned ${up_unsigned[*]} | curl single ${up_single[*]} | curl parallel ${up_par[*]}" \
  "| dtrain get ${dl_dtrain[*]} | curl ranged ${dl_par[*]}" | tee "$OUT/runs.txt"

m() { printf '%s\n' "$@" | median; }
awk -v size="$SIZE" -v p="$P" -v part="$PART_MB" -v reps="$REPS" -v ud="$(m "${up_dtrain[@]}")" -v uu="$(m "${up_unsigned[@]}")" \
  -v us="$(m "${up_single[@]}")" -v up="$(m "${up_par[@]}")" -v dd="$(m "${dl_dtrain[@]}")" \
  -v dp="$(m "${dl_par[@]}")" 'BEGIN {
  mb = size / 1e6
  printf "object %.0f MB, parts/ranges of %d MiB, %d in flight, median of %d\n", mb, part, p, reps
  printf "upload   dtrain Put (multipart, SHA-256 signed)   %7.2f s  %6.0f MB/s\n", ud, mb / ud
  printf "upload   dtrain Put, UNSIGNED-PAYLOAD             %7.2f s  %6.0f MB/s\n", uu, mb / uu
  printf "upload   curl single PUT                          %7.2f s  %6.0f MB/s\n", us, mb / us
  printf "upload   curl %2d parallel part PUTs               %7.2f s  %6.0f MB/s\n", p, up, mb / up
  printf "download dtrain GetInto (ranged GETs)             %7.2f s  %6.0f MB/s\n", dd, mb / dd
  printf "download curl %2d parallel ranged GETs             %7.2f s  %6.0f MB/s\n", p, dp, mb / dp
  printf "ratio upload   dtrain / curl single PUT    %.2f  (target >= 1.5)\n", us / ud
  printf "ratio upload   dtrain / curl parallel      %.2f  (target >= 0.9)\n", up / ud
  printf "ratio upload   dtrain unsigned / curl single PUT  %.2f,  / curl parallel  %.2f\n", us / uu, up / uu
  printf "ratio download dtrain / curl parallel      %.2f  (target >= 0.9)\n", dp / dd
}' | tee "$OUT/summary.txt"
