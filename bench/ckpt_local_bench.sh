#!/usr/bin/env bash
# Checkpoint save and restore on a local disk vs dd/cat of the same bytes on the same disk, in one run.
# State of SIZE bytes (default 1,493,277,696: GPT-2 124M's params + two AdamW moments, f32) as NFILES files:
#   save     dtrain CheckpointManager::Save (files written, fsynced, renamed; CRC32C; manifest; `latest`)
#            vs `dd if=/dev/zero bs=16M conv=fsync` of SIZE bytes (one file, one fsync)
#   restore  dtrain CheckpointManager::Load into the trainer's RestoreSink (every file read in chunks on a few
#            threads straight into a state tensor of its own, each chunk's CRC32C right after its read:
#            `ckpt_io_bench load`; LOAD=load-device on a CUDA build: device tensors, each chunk through the sink's
#            pinned staging buffers and copied on to the GPU, timed until the copies are done — the GPU trainer's
#            path). As the trainer's parameters and optimizer state, those tensors exist and are written BEFORE
#            the timing (no page is faulted in by the restore); with FRESH=1 also
#            `load-fresh` (tensors allocated in the timing, untouched: not the trainer's case)
#            vs `cat` of the same files to /dev/null and `dd bs=16M` of them to /dev/null; warm (page cache) and,
#            when this user may drop the page cache (/proc/sys/vm/drop_caches), cold. With BEFORE=<an older
#            ckpt_io_bench>, that binary's `load` is measured in the same runs (before/after in one table).
# Each figure is the median of REPS runs; ratios are throughput ratios (>= 1: dtrain at least as fast).
# Usage: bench/ckpt_local_bench.sh [BUILD_DIR]   env: DIR (on the disk to measure; default a new dir under
#        ./runs, where checkpoints go by default), SIZE, NFILES (3), REPS (3), BEFORE, FRESH, LOAD (load), and
#        ckpt_io_bench's DT_BENCH_THREADS / DT_BENCH_PART_MB
set -euo pipefail
BUILD=${1:-build}
TOOL=$BUILD/bench/ckpt_io_bench
SIZE=${SIZE:-1493277696}
NFILES=${NFILES:-3}
REPS=${REPS:-3}
own_dir=0
[[ -n ${DIR:-} ]] || own_dir=1
DIR=${DIR:-$(mkdir -p runs && mktemp -d "$PWD/runs/ckpt-bench.XXXXXX")}
[[ -x $TOOL ]] || { echo "no $TOOL (build the ckpt_io_bench target)" >&2; exit 2; }
mkdir -p "$DIR"
trap 'rm -rf "$DIR/ckpt" "$DIR/dd.bin"; ((own_dir)) && rm -rf "$DIR"' EXIT
src=$DIR/state.src
[[ -f $src && $(stat -c %s "$src") == "$SIZE" ]] || head -c "$SIZE" /dev/urandom >"$src"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.3f\n", b - a}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m() { printf '%s\n' "$@" | median; }
can_drop=0
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then can_drop=1; fi
drop() { sync && echo 3 >/proc/sys/vm/drop_caches; }

BEFORE=${BEFORE:-}
FRESH=${FRESH:-0}
LOAD=${LOAD:-load}
save=() dd_s=() load_w=() cat_w=() ddr_w=() load_c=() cat_c=() ddr_c=() before_w=() before_c=() fresh_w=() fresh_c=()
# dd of the files to /dev/null (one after the other, 16 MiB reads): the other reference reader.
ddread() { for f in "$@"; do dd if="$f" of=/dev/null bs=16M status=none; done; }
for rep in $(seq "$REPS"); do
  rm -rf "$DIR/ckpt" "$DIR/dd.bin"
  sync
  save+=("$("$TOOL" save "file://$DIR/ckpt" 1 "$src" "$NFILES" | awk '{print $4}')")
  t0=$(now)
  dd if=/dev/zero of="$DIR/dd.bin" bs=16M count=$((SIZE / (16 << 20))) conv=fsync status=none
  dd_s+=("$(since "$t0")")
  files=("$DIR"/ckpt/step-00000001/*.bin)
  cat "${files[@]}" >/dev/null  # warm the cache (a cold load reads with O_DIRECT: it leaves the cache as it was)
  load_w+=("$("$TOOL" "$LOAD" "file://$DIR/ckpt" 1 | awk '{print $4}')")
  t0=$(now)
  cat "${files[@]}" >/dev/null
  cat_w+=("$(since "$t0")")
  t0=$(now)
  ddread "${files[@]}"
  ddr_w+=("$(since "$t0")")
  [[ -z $BEFORE ]] || before_w+=("$("$BEFORE" load "file://$DIR/ckpt" 1 | awk '{print $4}')")
  ((FRESH == 0)) || fresh_w+=("$("$TOOL" load-fresh "file://$DIR/ckpt" 1 | awk '{print $4}')")
  if ((can_drop)); then
    if [[ -n $BEFORE ]]; then
      drop
      before_c+=("$("$BEFORE" load "file://$DIR/ckpt" 1 | awk '{print $4}')")
    fi
    if ((FRESH)); then
      drop
      fresh_c+=("$("$TOOL" load-fresh "file://$DIR/ckpt" 1 | awk '{print $4}')")
    fi
    drop
    load_c+=("$("$TOOL" "$LOAD" "file://$DIR/ckpt" 1 | awk '{print $4}')")
    drop
    t0=$(now)
    cat "${files[@]}" >/dev/null
    cat_c+=("$(since "$t0")")
    drop
    t0=$(now)
    ddread "${files[@]}"
    ddr_c+=("$(since "$t0")")
  fi
done
echo "runs (s): save ${save[*]} | dd ${dd_s[*]} | load warm ${load_w[*]} | cat warm ${cat_w[*]}" \
  "| dd-read warm ${ddr_w[*]} | load cold ${load_c[*]:-} | cat cold ${cat_c[*]:-} | dd-read cold ${ddr_c[*]:-}" \
  "${BEFORE:+ | before warm ${before_w[*]} | before cold ${before_c[*]:-}}" \
  "$( ((FRESH)) && echo "| fresh warm ${fresh_w[*]} | fresh cold ${fresh_c[*]:-}")"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs; dtrain = ckpt_io_bench $LOAD," \
  "threads ${DT_BENCH_THREADS:-4}, chunk ${DT_BENCH_PART_MB:-16} MiB"
awk -v size="$SIZE" -v n="$NFILES" -v reps="$REPS" -v dir="$DIR" -v s="$(m "${save[@]}")" -v d="$(m "${dd_s[@]}")" \
  -v lw="$(m "${load_w[@]}")" -v cw="$(m "${cat_w[@]}")" -v dw="$(m "${ddr_w[@]}")" -v cold="$can_drop" \
  -v lc="$( ((can_drop)) && m "${load_c[@]}" || echo 0)" -v cc="$( ((can_drop)) && m "${cat_c[@]}" || echo 0)" \
  -v dc="$( ((can_drop)) && m "${ddr_c[@]}" || echo 0)" \
  -v fw="$( ((FRESH)) && m "${fresh_w[@]}" || echo 0)" -v fc="$( ((FRESH && can_drop)) && m "${fresh_c[@]}" || echo 0)" \
  -v bw="$([[ -n $BEFORE ]] && m "${before_w[@]}" || echo 0)" \
  -v bc="$([[ -n $BEFORE ]] && ((can_drop)) && m "${before_c[@]}" || echo 0)" 'BEGIN {
  mb = size / 1e6
  printf "state %.0f MB in %d files under %s, median of %d\n", mb, n, dir, reps
  printf "save     dtrain Save (fsync, manifest, latest)   %7.3f s  %6.0f MB/s\n", s, mb / s
  printf "save     dd bs=16M conv=fsync                    %7.3f s  %6.0f MB/s\n", d, mb / d
  print "restore  dtrain: into state tensors allocated and written before the timing, as the trainer state is"
  printf "restore  dtrain Load, warm (read + CRC32C)       %7.3f s  %6.0f MB/s\n", lw, mb / lw
  if (bw > 0) printf "restore  BEFORE Load, warm                      %7.3f s  %6.0f MB/s\n", bw, mb / bw
  if (fw > 0) printf "restore  load-fresh (tensors faulted in), warm  %7.3f s  %6.0f MB/s\n", fw, mb / fw
  printf "restore  cat, warm                               %7.3f s  %6.0f MB/s\n", cw, mb / cw
  printf "restore  dd bs=16M, warm                         %7.3f s  %6.0f MB/s\n", dw, mb / dw
  if (cold) {
    printf "restore  dtrain Load, cold                       %7.3f s  %6.0f MB/s\n", lc, mb / lc
    if (bc > 0) printf "restore  BEFORE Load, cold                      %7.3f s  %6.0f MB/s\n", bc, mb / bc
    if (fc > 0) printf "restore  load-fresh, cold                       %7.3f s  %6.0f MB/s\n", fc, mb / fc
    printf "restore  cat, cold                               %7.3f s  %6.0f MB/s\n", cc, mb / cc
    printf "restore  dd bs=16M, cold                         %7.3f s  %6.0f MB/s\n", dc, mb / dc
  } else {
    printf "restore  cold: not measured (cannot write /proc/sys/vm/drop_caches as this user)\n"
  }
  printf "ratio save    dtrain / dd      %.2f  (target >= 0.95)\n", d / s
  printf "ratio restore dtrain / cat     %.2f warm", cw / lw
  if (cold) printf ", %.2f cold", cc / lc
  printf "  (target >= 0.9)\n"
  printf "ratio restore dtrain / dd      %.2f warm", dw / lw
  if (cold) printf ", %.2f cold", dc / lc
  printf "  (target >= 0.9)\n"
  if (bw > 0) {
    printf "ratio restore BEFORE / cat     %.2f warm", cw / bw
    if (bc > 0) printf ", %.2f cold", cc / bc
    printf "\n"
  }
}'
