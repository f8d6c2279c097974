#!/usr/bin/env bash
# Installs dtrain's system dependencies from Debian/Ubuntu packages (Debian 12, Ubuntu 24.04): what the
# build and the main job need, and with --test also the test suite's fixtures (Ceph, Slurm, Prometheus, clang).
# Idempotent: installs only what is missing, and runs `apt-get update` only when it must.
# CUDA (nvcc, cuBLAS, cuDNN, NCCL) comes from NVIDIA's CUDA toolkit, not from here: when
# /usr/local/cuda/bin/nvcc exists the GPU path is built, otherwise a CPU-only build is made.
set -euo pipefail

# What building dtrain and running its main job need (scripts/run.sh).
PKGS=(cmake ninja-build g++ pkg-config zlib1g-dev
      libopenmpi-dev openmpi-bin
      libprotobuf-dev protobuf-compiler
      libspdlog-dev libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libcli11-dev
      sentencepiece  # its tools (spm_train, spm_encode, ...): SentencePiece models, `dtrain data train-tokenizer`
      dataset-fashion-mnist)
# --test: what the test suite adds (scripts/test.sh): its fixtures and tools.
TEST_PKGS=(libgtest-dev iproute2 python3
      ceph-mon ceph-osd radosgw ceph-common  # the S3 test server (scripts/s3_test_server.sh)
      prometheus  # the Prometheus server that scrapes a training run (scripts/prometheus_test_server.sh)
      # The Slurm test cluster (scripts/slurm_test_cluster.sh). Slurm's mpi_pmix plugin dlopens the
      # unversioned libpmix.so, which only libpmix-dev ships: without it `srun --mpi=pmix` cannot start
      # Open MPI workers (docs/slurm.md).
      slurm-wlm munge libpmix-dev
      # Sanitizer builds and libFuzzer targets (scripts/sanitize.sh, scripts/fuzz.sh): clang-14 only
      # recommends the package holding libclang_rt.fuzzer, and recommends are not installed here.
      clang-14 libclang-rt-14-dev
      lld)  # the linker of the test and fuzz executables when present (CMakeLists.txt): ~3x faster than GNU ld
case "${1:-}" in
  "") ;;
  --test) PKGS+=("${TEST_PKGS[@]}") ;;
  *) echo "usage: scripts/install_deps.sh [--test]" >&2; exit 2 ;;
esac

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; then
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
  fi
else
  echo "install_deps: all ${#PKGS[@]} packages present"
fi

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install_deps: CUDA $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') found: GPU path will be built"
else
  echo "install_deps: no CUDA toolkit at /usr/local/cuda: CPU-only build (install NVIDIA's CUDA toolkit for GPUs)"
fi
