#!/usr/bin/env bash
# Sanitizer builds of dtrain (CPU only, clang-14) running the unit tests; any report fails the run.
#
#   scripts/sanitize.sh [asan|tsan|all]     (default all)   extra arguments after it go to ctest
#   scripts/sanitize.sh asan-build|tsan-build                only build what asan / tsan runs (scripts/test.sh
#                                                            builds them in the background during the plain stage)
#
# asan  build-asan: AddressSanitizer + LeakSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover:
#       the first UB report aborts the test). The same build as scripts/fuzz.sh (libFuzzer coverage
#       included), so CI compiles the tree once for both. Runs every test except ASAN_SKIP_* below.
# tsan  build-tsan: ThreadSanitizer. Builds and runs the data loader, checkpoint writer, launcher
#       supervision and Prometheus exporter tests only (none of them links the models, kernels or trainer:
#       launcher/CMakeLists.txt).
# What the asan run leaves out, for scripts/test.sh's plain stage (which then runs only that, PLAIN=rest):
#   scripts/sanitize.sh plain-targets        the test targets to build: the files asan skips or runs in part
#   scripts/sanitize.sh plain-tests DIR      a ctest -R regex of the tests of build DIR that asan does not run
# Build flags: scripts/sanitizers/config.sh (-O1, line tables only).
#
# Suppressions (each one justified in its file): scripts/sanitizers/lsan.supp, scripts/sanitizers/tsan.supp.
# Env: ASAN_BUILD_DIR, TSAN_BUILD_DIR, CMAKE_ARGS (e.g. a compiler launcher), JOBS (ctest -j).
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}
shift || true
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc)}
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# shellcheck source=scripts/sanitizers/config.sh
source scripts/sanitizers/config.sh

# Left out of the ASan run, each for its cost; none of them parses input or runs threads that the
# tests kept here do not also cover under ASan (the plain ctest run in CI still runs them all).
# Whole test files (not even built, which saves their compile and link):
#   launcher_resume_e2e_test, launcher_preempt_e2e_test, launcher_spot_simulation_e2e_test,
#   launcher_multinode_netns_test
#                               train Fashion-MNIST in 2+ ASan ranks under mpirun, several times each:
#                               15-110 s each under ASan on 2 cores (x1.5-6 with fast_unwind_on_malloc=0)
#   launcher_secret_leak_e2e_test  the same, and it also starts a Ceph RGW
#   comm_watchdog_e2e_test      asserts a 2 s collective timeout fires at step 4; under ASan on a busy
#                               2-core machine a healthy step 1 all-reduce already takes > 2 s
#   launcher_zero1_resume_e2e_test  the same (resumes across world sizes and the zero1 switch)
#   launcher_custom_model_e2e_test  installs dtrain and builds examples/custom_model with cmake: a
#                               compiler run, no dtrain code beyond what the other tests run
#   launcher_slurm_e2e_test     starts a real Slurm cluster (slurmctld/slurmd, not sanitized) per case: next to
#                               the ASan tests' load slurmctld failed to come up in two of three runs here
#                               ("High latency for 1000 calls to gettimeofday()", then exit); the plain
#                               stage runs all three Slurm tests, and the Slurm variables' parsing is
#                               unit-tested here (comm_dist_env_test)
#   storage_s3_storage_test, launcher_s3_checkpoint_e2e_test, data_s3_remote_cache_test
#                               start a Ceph RGW cluster each (scripts/s3_test_server.sh, ~20 s and
#                               1 GB); the S3 client's parsing and retries are covered here by
#                               storage_s3_xml_test and storage_s3_retry_test (a fake server) and by
#                               fuzz/s3_xml_fuzzer.cc
#   train_prometheus_feed_e2e_test  trains Fashion-MNIST in 2 ASan ranks under a real Prometheus server; the
#                               endpoint's code runs under ASan here in observe_prometheus_exporter_test (sockets,
#                               malformed and stuck clients) and train_prometheus_feed_test
#   docs_readme_commands        runs the documented commands (tests/docs/readme_commands_test.py): a test of the
#                               docs, not of memory safety; the plain stage runs it, and under ASan its
#                               trainings and the spot simulation take many minutes
# Single cases of files that are otherwise run:
#   TrainE2E.FashionMnistMlp*   3 epochs of real training: 37 s plain, several minutes under ASan
#   Ranks/LaunchEquivalence     trains in 1, 2 and 4 ASan ranks
#   LaunchFailureE2E.KillNine*  must see training steps within 60 s to kill a rank: under ASan with the full
#                               unwind it did not
#   CheckpointFaultWalkE2E      relaunches training through the binary 13 times (54 s plain); the same
#                               phases and storage faults run in-process here (CheckpointPhases.*)
ASAN_SKIP_BINARIES=(launcher_resume_e2e_test launcher_preempt_e2e_test launcher_spot_simulation_e2e_test
  launcher_multinode_netns_test launcher_secret_leak_e2e_test comm_watchdog_e2e_test storage_s3_storage_test
  launcher_s3_checkpoint_e2e_test data_s3_remote_cache_test launcher_zero1_resume_e2e_test
  launcher_custom_model_e2e_test launcher_slurm_e2e_test docs_readme_commands train_prometheus_feed_e2e_test)
# (GoogleTest filter patterns, ':'-separated: the asan build runs each test file whole, GTEST_FILTER=-<these>.)
ASAN_SKIP_CASES='TrainE2E.FashionMnistMlp*:Ranks/LaunchEquivalence.*:LaunchFailureE2E.KillNine*:CheckpointFaultWalkE2E.*'
# The files asan builds that hold those cases (plain-targets builds them for the plain stage).
ASAN_SKIP_CASES_IN=(launcher_train_e2e_test checkpoint_checkpoint_fault_walk_test)
TSAN_TESTS='^(FashionLoaderTest|LoaderTest|RandomCropFlipTest|CheckpointManager|CheckpointWriter|SuperviseTest|PrometheusExporter)\.'

# End-to-end tests of the real binary (*_e2e_test, *_netns_test) start several ASan dtrain processes each and
# cost most of this stage's time; only those feeding it bad input (the crash-prone paths) run here:
# (launcher_run_dir_safety_e2e_test is left to the plain stage: its concurrent launches and refused resumes
# test what is kept on disk, not memory, and under ASan they took 5 minutes of this stage's test time)
ASAN_KEEP_E2E=(launcher_input_errors_e2e_test launcher_cli_e2e_test launcher_train_e2e_test)

# The test executables of tests/[runtime/]<dir>/<name>_test.cc (named <dir>_<name>_test), minus ASAN_SKIP_BINARIES
# and the end-to-end tests not in ASAN_KEEP_E2E; `asan_test_targets 1`: those left out instead.
asan_test_targets() {
  local f t skip
  for f in tests/*/*_test.cc tests/runtime/*/*_test.cc; do
    t=$(basename "$(dirname "$f")")_$(basename "$f" .cc)
    skip=0
    for s in "${ASAN_SKIP_BINARIES[@]}"; do [[ $t == "$s" ]] && skip=1; done
    if [[ $t == *_e2e_test || $t == *_netns_test ]]; then
      skip=1
      for k in "${ASAN_KEEP_E2E[@]}"; do [[ $t == "$k" ]] && skip=0; done
    fi
    ((skip == ${1:-0})) && echo "$t"
  done
  return 0
}

build_asan() {
  configure_asan "${ASAN_BUILD_DIR:-build-asan}"
  # shellcheck disable=SC2046
  JOBS=$(nproc) scripts/cmake_build.sh "${ASAN_BUILD_DIR:-build-asan}" dtrain $(asan_test_targets)
}

run_asan() {
  local dir=${ASAN_BUILD_DIR:-build-asan}
  build_asan
  # Each test file is one ctest test named after its target (DT_TEST_WHOLE_BINARIES, config.sh): one ASan
  # process start per file instead of per case.
  local skip_bins
  skip_bins=$(asan_test_targets 1 | paste -sd'|')"|docs_readme_commands"
  # fast_unwind_on_malloc=0: Open MPI 4.1 dlclose()s its components in MPI_Finalize, so at exit the
  # frame-pointer unwinder's one-frame stacks of their allocations name an unmapped module and no
  # suppression can match them; the full (slower) unwind reaches libopen-pal/libmpi/libevent frames,
  # which lsan.supp names. Costs ~1.5x on allocation-heavy tests.
  ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_init_order=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0" \
    LSAN_OPTIONS="suppressions=$ROOT/scripts/sanitizers/lsan.supp:print_suppressions=0" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" GTEST_FILTER="-$ASAN_SKIP_CASES" \
    ctest --test-dir "$dir" --output-on-failure -j "$JOBS" -E "^($skip_bins)\$" "$@"
}

build_tsan() {
  configure_tsan "${TSAN_BUILD_DIR:-build-tsan}"
  JOBS=$(nproc) scripts/cmake_build.sh "${TSAN_BUILD_DIR:-build-tsan}" data_loader_test checkpoint_checkpoint_test \
    launcher_supervise_test observe_prometheus_exporter_test
}

run_tsan() {
  local dir=${TSAN_BUILD_DIR:-build-tsan}
  build_tsan
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/scripts/sanitizers/tsan.supp" \
    ctest --test-dir "$dir" --output-on-failure -j "$JOBS" -R "$TSAN_TESTS" "$@"
}

# The test files with code under DT_HAVE_CUDA: the asan build (CPU only) lacks their GPU cases, so the plain
# stage builds and runs them whole (on a machine without a GPU those cases skip, but still compile).
cuda_test_targets() {
  local f
  for f in $(grep -l DT_HAVE_CUDA tests/*/*_test.cc tests/runtime/*/*_test.cc); do
    echo "$(basename "$(dirname "$f")")_$(basename "$f" .cc)"
  done
}

# The test targets that the plain stage must build so that every test runs once: asan's skipped files, the
# files holding ASAN_SKIP_CASES and those with GPU cases.
plain_targets() {
  { asan_test_targets 1; printf '%s\n' "${ASAN_SKIP_CASES_IN[@]}"; cuda_test_targets; } | sort -u
}

# plain_tests DIR: the names of DIR's tests (case by case) that the asan run leaves out (docs_readme_commands, the
# tests of skipped files and of files with GPU cases, ASAN_SKIP_CASES) as one anchored ctest -R regex. Fails when an
# ASAN_SKIP_CASES pattern matches none of them (a renamed case would otherwise silently run nowhere).
plain_tests() {
  ctest --test-dir "$1" --show-only=json-v1 | python3 -c '
import fnmatch, json, os, re, sys
bins, cases = set(sys.argv[1].split()), sys.argv[2].split(":")
names = []
for t in json.load(sys.stdin)["tests"]:
    cmd = [os.path.basename(c) for c in t.get("command", [])]
    if (t["name"] == "docs_readme_commands" or bins & set(cmd)
            or any(fnmatch.fnmatchcase(t["name"], c) for c in cases)):
        names.append(t["name"])
for c in cases:
    if not any(fnmatch.fnmatchcase(n, c) for n in names):
        sys.exit("sanitize.sh plain-tests: no test in %s matches %r (ASAN_SKIP_CASES)" % (sys.argv[3], c))
print("^(" + "|".join(re.escape(n) for n in names) + ")$")
'  "$({ asan_test_targets 1; cuda_test_targets; } | tr '\n' ' ')" "$ASAN_SKIP_CASES" "$1"
}

case "$WHAT" in
  plain-targets) plain_targets ;;
  plain-tests) plain_tests "${1:?usage: scripts/sanitize.sh plain-tests BUILD_DIR}" ;;
  asan) run_asan "$@" ;;
  tsan) run_tsan "$@" ;;
  asan-build) build_asan ;;
  tsan-build) build_tsan ;;
  all) run_asan "$@" && run_tsan "$@" ;;
  *) echo "usage: scripts/sanitize.sh [asan|tsan|all] [ctest args...] | asan-build | tsan-build | plain-targets | plain-tests BUILD_DIR" >&2; exit 2 ;;
esac
