#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (CPU only, ASan + UBSan + coverage) and runs each
# for SECONDS (default 60), two at a time. Fails when any target crashes, leaks, hangs or breaks a
# round trip; the input that did it is kept under $BUILD_DIR/fuzz-crashes/<target>/ and the log in
# $BUILD_DIR/fuzz-logs/<target>.log. Every crash found must become a regression test in tests/.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]        e.g. scripts/fuzz.sh 300 config_fuzzer
#
# The seeds in fuzz/corpus/<target>/ are read-only here: each run mutates a copy under
# $BUILD_DIR/fuzz-corpus/, which is kept (a longer run starts from what the last one found).
# Replay one input:  $BUILD_DIR/fuzz/<target> <file>
# The build shares build-asan with scripts/sanitize.sh (scripts/sanitizers/config.sh), so CI compiles
# the tree once for both. Env: FUZZ_BUILD_DIR, JOBS (parallel targets, default 2), CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
BUILD_DIR=${FUZZ_BUILD_DIR:-build-asan}
ALL_TARGETS=(config_fuzzer hostfile_fuzzer dataset_fuzzer checkpoint_manifest_fuzzer safetensors_fuzzer s3_xml_fuzzer
  node_link_fuzzer rendezvous_fuzzer)
if (($#)); then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi

# shellcheck source=scripts/sanitizers/config.sh
source scripts/sanitizers/config.sh
configure_asan "$BUILD_DIR"
JOBS=$(nproc) scripts/cmake_build.sh "$BUILD_DIR" "${TARGETS[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# Runs one target; prints "<target>: ok|FAILED ..." and returns non-zero on a finding.
fuzz_one() {
  local t=$1 corpus="$BUILD_DIR/fuzz-corpus/$1" crashes="$BUILD_DIR/fuzz-crashes/$1" log="$BUILD_DIR/fuzz-logs/$1.log"
  mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: a parser allocating 2 GB is a bug.
  if "$BUILD_DIR/fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
      -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1; then
    echo "$t: ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs," \
      "corpus $(find "$corpus" -type f | wc -l) inputs)"
  else
    echo "$t: FAILED, input kept in $crashes/ (replay: $BUILD_DIR/fuzz/$t <input>):"
    grep -E 'ERROR:|fuzz property failed|runtime error|SUMMARY' "$log" | head -5 | sed 's/^/  /'
    return 1
  fi
}
export -f fuzz_one
export BUILD_DIR SECONDS_PER_TARGET

echo "fuzz: ${#TARGETS[@]} targets, ${SECONDS_PER_TARGET}s each, ${JOBS:-2} at a time"
if printf '%s\n' "${TARGETS[@]}" | xargs -P "${JOBS:-2}" -I{} bash -c 'fuzz_one {}'; then
  echo "fuzz: ${#TARGETS[@]} passed, 0 failed"
else
  echo "fuzz: a target failed (see above; logs in $BUILD_DIR/fuzz-logs/)" >&2
  exit 1
fi
