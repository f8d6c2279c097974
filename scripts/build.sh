#!/usr/bin/env bash
# Configures and builds dtrain into ${BUILD_DIR:-build}. Extra arguments go to cmake, e.g.
#   scripts/build.sh -DDT_WITH_CUDA=OFF
# Env: BUILD_TYPE, JOBS, CMAKE_ARGS (more cmake arguments, e.g. -DDT_UNITY_BUILD=ON), BUILD_TARGETS (build only
# these, space-separated; default all).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
export PATH="/usr/local/cuda/bin:$PATH"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} ${CMAKE_ARGS:-} "$@"
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
