# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: the one configuration of the sanitizer builds.
#
# Both builds are CPU only, clang-14, at -O1 with line tables only (build type "Sanitize"): stack traces
# keep function, file and line, and the tree compiles about twice as fast as RelWithDebInfo's -O2 -g,
# which is what lets CI afford them (scripts/test.sh). No NDEBUG: assert()s stay on.
# Env: CMAKE_ARGS (extra cmake arguments, e.g. a compiler launcher). Build with scripts/cmake_build.sh (its
# fallback from a failed unity build leaves DIR/unity-off, honoured here by unity_off).

SAN_CMAKE_COMMON=(-G Ninja -DCMAKE_BUILD_TYPE=Sanitize
  -DCMAKE_C_FLAGS_SANITIZE="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only"
  -DCMAKE_EXE_LINKER_FLAGS_SANITIZE="" -DCMAKE_SHARED_LINKER_FLAGS_SANITIZE=""
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DDT_WITH_CUDA=OFF -DDT_BUILD_EXAMPLES=OFF)

# The symbolizer of clang-14's own LLVM (package llvm-14, a dependency of clang-14): the unversioned
# llvm-symbolizer is in another package, and without one the reports have addresses only.
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-14/bin/llvm-symbolizer}
export TSAN_SYMBOLIZER_PATH=${TSAN_SYMBOLIZER_PATH:-$ASAN_SYMBOLIZER_PATH}

# unity_off DIR: -DDT_UNITY_BUILD=OFF when DIR's unity build failed before (scripts/cmake_build.sh).
unity_off() { if [[ -e $1/unity-off ]]; then echo -DDT_UNITY_BUILD=OFF; fi; }

# configure_asan DIR: ASan + LSan + UBSan (-fno-sanitize-recover: the first UB report aborts), and the fuzz targets
# on (fuzz/CMakeLists.txt adds libFuzzer's coverage instrumentation to the libraries they fuzz). scripts/sanitize.sh
# (unit tests) and scripts/fuzz.sh share this build, so CI compiles the tree once for both. Each test file is one
# ctest test (DT_TEST_WHOLE_BINARIES).
configure_asan() {
  # shellcheck disable=SC2086
  cmake -S . -B "$1" "${SAN_CMAKE_COMMON[@]}" -DDT_SANITIZER="address;undefined" \
    -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=all" -DDT_BUILD_FUZZERS=ON -DDT_TEST_WHOLE_BINARIES=ON ${CMAKE_ARGS:-} $(unity_off "$1") >/dev/null
}

# configure_tsan DIR: ThreadSanitizer, Open MPI off (no TSan test uses it in-process: the supervision
# tests start the real mpirun as a process).
configure_tsan() {
  # shellcheck disable=SC2086
  cmake -S . -B "$1" "${SAN_CMAKE_COMMON[@]}" -DDT_WITH_MPI=OFF -DDT_SANITIZER=thread ${CMAKE_ARGS:-} $(unity_off "$1") >/dev/null
}
