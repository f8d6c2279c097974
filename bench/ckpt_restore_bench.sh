#!/usr/bin/env bash
# Restore through the trainer — read + verify + copy into the model (the GPU on a CUDA build) — vs `cat` and
# `dd bs=16M` of the same files to /dev/null, warm (page cache) and cold (after drop_caches, when this user may write
# it), in one run.
# A first run of CONFIG saves a checkpoint at step 1 (GPT-2 124M: 1.49 GB of params + AdamW moments); then each
# repetition resumes from it (max_steps 2: one step after the restore) and reads the `restore` record of its
# metrics.jsonl (restore_s: listing to state in the model; read_s: read + CRC32C, the parameter copies overlapping
# it; copy_s: the copies left after it). Ratios are cat (dd) time / restore time (>= 0.9 is the target of issue 22).
# Usage: bench/ckpt_restore_bench.sh [BUILD_DIR]   env: CONFIG (configs/gpt2_124m.yaml with synthetic tokens),
#        DEVICE (cuda), OUT (a new directory under ./runs), REPS (3)
set -euo pipefail
BUILD=${1:-build}
BIN=$BUILD/dtrain
DEVICE=${DEVICE:-cuda}
REPS=${REPS:-3}
OUT=${OUT:-$(mkdir -p runs && mktemp -d "$PWD/runs/restore-bench.XXXXXX")}
CONFIG=${CONFIG:-configs/gpt2_124m.yaml --set data.dataset=synthetic_tokens --set train.grad_accum_steps=1}
[[ -x $BIN ]] || { echo "no $BIN (build the dtrain target)" >&2; exit 2; }
rm -rf "$OUT/run"
mkdir -p "$OUT"
# shellcheck disable=SC2206
cfg=($CONFIG)
common=("${cfg[@]}" --set train.device="$DEVICE" --set train.eval=false --set train.log_every=1
        --set checkpoint.every_steps=1 --set checkpoint.async=false --set checkpoint.keep_last=1
        --set schedule.warmup_steps=1 --set run.dir="$OUT/run")
"$BIN" train "${common[@]}" --set train.max_steps=1 >"$OUT/save.log" 2>&1 || { tail -5 "$OUT/save.log"; exit 1; }
step_dir=$OUT/run/checkpoints/step-00000001
files=("$step_dir"/*.bin)
bytes=$(cat "${files[@]}" | wc -c)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.3f\n", b - a}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m() { printf '%s\n' "$@" | median; }
field() { grep '"kind":"restore"' "$OUT/run/metrics.jsonl" | tail -1 | sed "s/.*\"$1\":\([0-9.e+-]*\).*/\1/"; }
can_drop=0
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then can_drop=1; fi
drop() { sync && echo 3 >/proc/sys/vm/drop_caches; }
# One resume from step 1 that saves nothing (so every resume reads step 1): restore_s read_s copy_s.
resume() {
  "$BIN" train "${common[@]}" --set train.max_steps=2 --set checkpoint.every_steps=1000 \
    --set checkpoint.at_end=false >"$OUT/resume.log" 2>&1 || { tail -5 "$OUT/resume.log" >&2; exit 1; }
  echo "$(field restore_s) $(field read_s) $(field copy_s)"
}
ddread() { for f in "$@"; do dd if="$f" of=/dev/null bs=16M status=none; done; }
rw=() rdw=() cw=() dw=() rc=() rdc=() cc=() dc=()
for rep in $(seq "$REPS"); do
  cat "${files[@]}" >/dev/null
  read -r r rd _ <<<"$(resume)"
  rw+=("$r") rdw+=("$rd")
  t0=$(now)
  cat "${files[@]}" >/dev/null
  cw+=("$(since "$t0")")
  t0=$(now)
  ddread "${files[@]}"
  dw+=("$(since "$t0")")
  if ((can_drop)); then
    drop
    read -r r rd _ <<<"$(resume)"
    rc+=("$r") rdc+=("$rd")
    drop
    t0=$(now)
    cat "${files[@]}" >/dev/null
    cc+=("$(since "$t0")")
    drop
    t0=$(now)
    ddread "${files[@]}"
    dc+=("$(since "$t0")")
  fi
done
echo "runs (s): restore warm ${rw[*]} (read ${rdw[*]}) | cat warm ${cw[*]} | dd warm ${dw[*]} | restore cold ${rc[*]:-}" \
  "(read ${rdc[*]:-}) | cat cold ${cc[*]:-} | dd cold ${dc[*]:-}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs; device $DEVICE; $(grep -m1 'restored ' "$OUT/resume.log" | sed 's/.*restored/restored/')"
awk -v mb="$(awk -v b="$bytes" 'BEGIN {print b / 1e6}')" -v rw="$(m "${rw[@]}")" -v rdw="$(m "${rdw[@]}")" \
  -v cw="$(m "${cw[@]}")" -v dw="$(m "${dw[@]}")" -v cold="$can_drop" -v rc="$( ((can_drop)) && m "${rc[@]}" || echo 0)" \
  -v rdc="$( ((can_drop)) && m "${rdc[@]}" || echo 0)" -v cc="$( ((can_drop)) && m "${cc[@]}" || echo 0)" \
  -v dc="$( ((can_drop)) && m "${dc[@]}" || echo 0)" 'BEGIN {
  printf "state %.0f MB, median of the runs\n", mb
  printf "restore warm: dtrain %.3f s (read + verify %.3f s), cat %.3f s, dd %.3f s: ratio cat %.2f, dd %.2f\n", rw, rdw,
    cw, dw, cw / rw, dw / rw
  if (cold) printf "restore cold: dtrain %.3f s (read + verify %.3f s), cat %.3f s, dd %.3f s: ratio cat %.2f, dd %.2f\n",
    rc, rdc, cc, dc, cc / rc, dc / rc
  else print "restore cold: not measured (cannot write /proc/sys/vm/drop_caches as this user)"
}'
