#!/usr/bin/env bash
# Configures and builds dtrain into ${BUILD_DIR:-build}. Extra arguments go to cmake, e.g.
#   scripts/build.sh -DDT_WITH_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@"
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
