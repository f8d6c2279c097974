#!/usr/bin/env bash
# The test suite, from a fresh machine (CI runs exactly this: .ci/run). Stages, in this order:
#   main   the README's first command as a newcomer runs it: scripts/run.sh --set train.epochs=1 (installs
#          only the main job's packages, builds without tests, trains the MLP with `dtrain launch`)
#   plain  install the test packages too, build with the tests, check the layering and the paths comments name
#          (scripts/check_layers.py, scripts/check_comment_paths.py), run the tests with ctest; GPU tests skip
#          with a reason when no GPU is visible. Extra arguments go to this ctest.
#   asan   scripts/sanitize.sh asan: the unit tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   fuzz   scripts/fuzz.sh 10: every libFuzzer target for 10 s, two at a time (on the ASan build; longer runs:
#          scripts/fuzz.sh 300)
#   tsan   scripts/sanitize.sh tsan: data loader, checkpoint writer, launcher supervision, Prometheus exporter under TSan
# STAGES="plain" (or any space-separated subset) runs only those; default: all five. Every stage runs even when
# an earlier one failed; the exit code is non-zero when any failed, and a table of each stage's result and
# wall time ends the output.
#
# Each test runs once, in its strongest setting. PLAIN=rest: the plain stage builds and runs only what the asan
# stage does not (scripts/sanitize.sh plain-targets / plain-tests: the end-to-end runs asan leaves out for their
# cost, the Ceph RGW and Slurm tests, the docs' commands, the files with GPU cases, and the single cases asan
# skips); a unit test that passes under ASan + UBSan gains nothing from a second, unsanitized run, and building
# and running them twice cost CI about 8 minutes. PLAIN=all: every test, plain. Default: rest when asan is
# among STAGES, else all (so STAGES=plain still runs the whole suite plain, as a developer wants).
#
# UNITY=ON (default): the libraries compile in unity batches (-DDT_UNITY_BUILD=ON, in all three build trees),
# which cuts a from-scratch build's CPU time by a third; for a tree you then edit file by file, UNITY=OFF.
# (CMAKE_ARGS reaches every configure: scripts/build.sh and scripts/sanitizers/config.sh.)
set -euo pipefail
cd "$(dirname "$0")/.."
STAGES=${STAGES:-main plain asan fuzz tsan}
if [[ " $STAGES " == *" asan "* ]]; then PLAIN=${PLAIN:-rest}; else PLAIN=${PLAIN:-all}; fi
[[ $PLAIN == rest || $PLAIN == all ]] || { echo "test.sh: PLAIN must be rest or all, not '$PLAIN'" >&2; exit 2; }
export CMAKE_ARGS="-DDT_UNITY_BUILD=${UNITY:-ON} ${CMAKE_ARGS:-}"
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# Open MPI ranks waiting in a collective yield the core instead of spinning on it. Tests run two at a time on
# CI's 2 cores, each with 2-4 ranks: spinning ranks took the CPU from the ranks doing work (seven of the longest
# end-to-end tests, two at a time: 163 s spinning, 124 s yielding).
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}

# (Inside `if`, bash ignores set -e: each stage chains its steps with &&.)
main() { scripts/run.sh --set train.epochs=1; }
plain() {
  scripts/install_deps.sh --test && python3 scripts/check_layers.py && python3 scripts/check_comment_paths.py ||
    return 1
  if [[ $PLAIN == all ]]; then
    scripts/build.sh -DDT_BUILD_TESTS=ON &&
      ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
  else
    local tests
    BUILD_TARGETS="dtrain $(scripts/sanitize.sh plain-targets | tr '\n' ' ')" scripts/build.sh -DDT_BUILD_TESTS=ON &&
      tests=$(scripts/sanitize.sh plain-tests "${BUILD_DIR:-build}") &&
      ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" -R "$tests" "$@"
  fi
}
asan() { scripts/sanitize.sh asan; }
fuzz() { scripts/fuzz.sh 10; }
tsan() { scripts/sanitize.sh tsan; }

summary=()
failed=0
for stage in $STAGES; do
  case "$stage" in
    main | plain | asan | fuzz | tsan) ;;
    *) echo "test.sh: unknown stage '$stage' (main plain asan fuzz tsan)" >&2; exit 2 ;;
  esac
  if [[ $stage == plain ]]; then echo "=== test.sh: stage plain (PLAIN=$PLAIN)"; else echo "=== test.sh: stage $stage"; fi
  start=$(date +%s)
  if "$stage" "$@"; then result=ok; else result=FAILED; failed=1; fi
  seconds=$(($(date +%s) - start))
  echo "=== test.sh: stage $stage $result in ${seconds} s"
  summary+=("$(printf '%-6s %-7s %5d s' "$stage" "$result" "$seconds")")
done

echo "=== test.sh: summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
