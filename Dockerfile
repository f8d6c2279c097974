# dtrain's container image: built on NVIDIA's CUDA "devel" image (nvcc, cuBLAS, cuDNN, NCCL headers), shipped on its
# "runtime" image (the same libraries, no compiler toolkit). Every RUN step is a script that CI runs on every commit
# (scripts/install_deps.sh, scripts/build.sh), so this recipe cannot drift from the tested one; no container
# registry is reachable from CI, so tests/docs/readme_commands_test.py checks this file (each RUN line calls such a
# script), not an image.
#
#   docker build -t dtrain:0.1.0 .                                             # sm_80 and sm_90 (A100, H100/H200)
#   docker build --build-arg CUDA_ARCHITECTURES="90;100" -t dtrain:0.1.0 .     # other GPUs
#   docker run --rm --gpus all dtrain:0.1.0 dtrain doctor
#   docker run --rm --gpus all --shm-size=16g dtrain:0.1.0 dtrain launch --nproc-per-node gpu configs/fashion_mnist_mlp.yaml
#
# The image's working directory is /opt/dtrain, holding configs/ and examples/; dtrain is /usr/local/bin/dtrain.
# Kubernetes: examples/k8s/README.md.

# NVIDIA's tag: CUDA version, then cuDNN, then the OS; the toolkit dtrain is developed and tested with is 13.0.
ARG CUDA_TAG=13.0.0-cudnn
ARG OS_TAG=ubuntu24.04

FROM nvidia/cuda:${CUDA_TAG}-devel-${OS_TAG} AS build
# The GPU generations the binary holds code for (CMake's CUDA_ARCHITECTURES; a plain scripts/build.sh builds 90 only).
ARG CUDA_ARCHITECTURES="80;90"
WORKDIR /src
COPY scripts/install_deps.sh scripts/
RUN scripts/install_deps.sh
COPY . .
RUN BUILD_DIR=build BUILD_TARGETS=dtrain scripts/build.sh -DDT_BUILD_TESTS=OFF "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}"

FROM nvidia/cuda:${CUDA_TAG}-runtime-${OS_TAG}
WORKDIR /opt/dtrain
# The same packages as the build stage (their -dev packages pull the shared libraries dtrain links to, Open MPI's
# mpirun and Debian's Fashion-MNIST): one list, in scripts/install_deps.sh.
COPY scripts/install_deps.sh scripts/
RUN scripts/install_deps.sh
COPY --from=build /src/build/dtrain /usr/local/bin/dtrain
COPY configs configs/
COPY examples examples/
CMD ["dtrain", "--help"]
