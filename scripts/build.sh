#!/usr/bin/env bash
# Configures and builds dtrain into ${BUILD_DIR:-build}. Extra arguments go to cmake, e.g.
#   scripts/build.sh -DDT_WITH_CUDA=OFF
# Env: BUILD_TYPE, JOBS, CMAKE_ARGS (more cmake arguments, e.g. -DDT_UNITY_BUILD=ON), BUILD_TARGETS (build only
# these, space-separated; default all).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
export PATH="/usr/local/cuda/bin:$PATH"
# (unity-off: a unity build of this tree failed once and scripts/cmake_build.sh fell back to file by file.)
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} ${CMAKE_ARGS:-} "$@" \
  $([[ -e $BUILD_DIR/unity-off ]] && echo -DDT_UNITY_BUILD=OFF)
# shellcheck disable=SC2086
scripts/cmake_build.sh "$BUILD_DIR" ${BUILD_TARGETS:-}
