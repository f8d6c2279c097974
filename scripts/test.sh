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

# The sanitizer builds run in the background from the plain stage on (BG_BUILDS=1, the default when the plain
# stage and a sanitizer stage both run), at nice 19: the plain stage's end-to-end tests leave a core idle much of
# the time (processes starting, ranks waiting on each other, timeouts running out), and the clang builds fill it
# without taking a core the tests want. The asan and tsan stages then wait for their build (its log is printed
# there) and run the tests. BG_BUILDS=0: each stage builds for itself, as scripts/sanitize.sh does alone.
BG_BUILDS=${BG_BUILDS:-1}
BG_DIR=$(mktemp -d)
BG_PID=
# The trap must not fail: under set -e a failing command in it (kill of a group that already ended) would make
# the script's exit status 1 after every stage passed.
stop_bg() {
  if [[ -n $BG_PID ]]; then kill -- -"$BG_PID" 2>/dev/null || true; fi
  rm -rf "$BG_DIR"
}
trap stop_bg EXIT
start_bg_builds() {
  [[ $BG_BUILDS == 1 && -z $BG_PID ]] || return 0
  local what=()
  [[ " $STAGES " == *" asan "* ]] && what+=(asan)
  [[ " $STAGES " == *" tsan "* ]] && what+=(tsan)
  ((${#what[@]})) || return 0
  set -m  # the builds in a process group of their own, so that the EXIT trap can stop all of them
  (for w in "${what[@]}"; do
    nice -n 19 scripts/sanitize.sh "$w-build" > "$BG_DIR/$w.log" 2>&1
    echo "$? $(date +%s)" > "$BG_DIR/$w.rc"
  done) &
  BG_PID=$!
  set +m
  echo "=== test.sh: building ${what[*]} in the background (nice 19)"
}
# wait_bg asan|tsan: waits for that background build (none: returns 0 at once), prints its log, returns its status.
# A build not done BG_WAIT_S (default 3000) seconds after the first stage began fails the stage with its log's tail
# and the busiest processes (so a starved or stuck build says why instead of running into CI's time limit).
wait_bg() {
  [[ -n $BG_PID ]] || return 0
  while [[ ! -e $BG_DIR/$1.rc ]] && kill -0 "$BG_PID" 2>/dev/null; do
    if (($(date +%s) - T0 > ${BG_WAIT_S:-3000})); then
      echo "test.sh: the background $1 build is not done ${BG_WAIT_S:-3000} s after the first stage began; its log's" \
        "tail and the busiest processes:" >&2
      tail -n 20 "$BG_DIR/$1.log" >&2
      ps -eo pid,ni,etime,pcpu,args --sort=-pcpu | head -n 12 | cut -c1-200 >&2
      return 1
    fi
    sleep 1
  done
  cat "$BG_DIR/$1.log" 2>/dev/null
  [[ -e $BG_DIR/$1.rc ]] || { echo "test.sh: the background $1 build died" >&2; return 1; }
  local rc done_at
  read -r rc done_at < "$BG_DIR/$1.rc"
  echo "=== test.sh: $1 build (background) ended $((done_at - T0)) s after the first stage began, rc $rc"
  return "$rc"
}

# (Inside `if`, bash ignores set -e: each stage chains its steps with &&.)
main() { scripts/run.sh --set train.epochs=1; }
plain() {
  scripts/install_deps.sh --test && python3 scripts/check_layers.py && python3 scripts/check_comment_paths.py ||
    return 1
  start_bg_builds  # clang and the other test packages are installed now
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
asan() { wait_bg asan && scripts/sanitize.sh asan; }
fuzz() { scripts/fuzz.sh 10; }
tsan() { wait_bg tsan && scripts/sanitize.sh tsan; }

# leftovers: a stage's tests must not leave processes behind (a test killed by ctest's timeout skips its cleanup;
# its ranks could then spin on both cores for the rest of the run and starve the background builds). Lists every
# process still running a binary of this tree's build directories 2 s after the stage, ends it, and fails the stage.
leftovers() {
  local e p left=()
  sleep 2
  for e in /proc/[0-9]*/exe; do
    p=${e#/proc/} && p=${p%/exe}
    [[ $(readlink "$e" 2>/dev/null) == "$PWD"/build* ]] && left+=("$p")
  done
  ((${#left[@]})) || return 0
  echo "test.sh: the stage left ${#left[@]} process(es) running; ending them:" >&2
  ps -o pid,etime,args -p "$(IFS=,; echo "${left[*]}")" >&2 || true
  kill -KILL "${left[@]}" 2>/dev/null || true
  return 1
}

summary=()
failed=0
T0=$(date +%s)
for stage in $STAGES; do
  case "$stage" in
    main | plain | asan | fuzz | tsan) ;;
    *) echo "test.sh: unknown stage '$stage' (main plain asan fuzz tsan)" >&2; exit 2 ;;
  esac
  if [[ $stage == plain ]]; then echo "=== test.sh: stage plain (PLAIN=$PLAIN)"; else echo "=== test.sh: stage $stage"; fi
  start=$(date +%s)
  if "$stage" "$@" && leftovers; then result=ok; else leftovers || true; result=FAILED; failed=1; fi
  seconds=$(($(date +%s) - start))
  echo "=== test.sh: stage $stage $result in ${seconds} s"
  summary+=("$(printf '%-6s %-7s %5d s' "$stage" "$result" "$seconds")")
done

echo "=== test.sh: summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
