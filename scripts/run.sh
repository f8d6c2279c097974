#!/usr/bin/env bash
# The main job, from a fresh machine: install dependencies, build, and train the Fashion-MNIST MLP
# with `dtrain launch` on all local GPUs (or 2 CPU ranks when there is no GPU).
# Extra arguments go to `dtrain launch`, e.g. scripts/run.sh --set train.epochs=1
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
# Only the dtrain binary is built here: the tests are built by scripts/test.sh in the same tree, the benchmarks
# (bench/) by scripts/build.sh.
BUILD_TARGETS=${BUILD_TARGETS:-dtrain} scripts/build.sh -DDT_BUILD_TESTS=OFF
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
exec "${BUILD_DIR:-build}/dtrain" launch --nproc-per-node auto configs/fashion_mnist_mlp.yaml "$@"
