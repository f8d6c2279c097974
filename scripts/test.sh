#!/usr/bin/env bash
# The test suite, from a fresh machine: install dependencies, build, run every test with ctest.
# GPU tests skip with a reason when no GPU is visible. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
