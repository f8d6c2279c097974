#!/usr/bin/env bash
# One device call: build with the project's CMake, run the whole test suite (GPU tests included),
# `dtrain doctor`, and the Fashion-MNIST MLP benchmarks (dtrain vs PyTorch, GPU and CPU).
# Usage (on the GPU machine, from the repo root): OUT=/some/dir bench/device_session.sh
# Expects the Fashion-MNIST .gz files in $FMNIST (default: .device-carry/fashion-mnist) when the
# Debian package is not installed. Writes logs and JSON under $OUT; prints a short table last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
FINAL_OUT=${OUT:?set OUT}
OUT=/tmp/dtrain_device_logs; rm -rf $OUT; mkdir -p $OUT
# Everything is packed into $FINAL_OUT/logs.tgz at the end (the device returns at most 8 files).
trap 'tar czf $FINAL_OUT/logs.tgz -C $OUT .' EXIT
FMNIST=${FMNIST:-.device-carry/fashion-mnist}
DATA=/usr/share/datasets/fashion-mnist
if [[ ! -f $DATA/train-images-idx3-ubyte.gz ]]; then mkdir -p $DATA && cp $FMNIST/*.gz $DATA/; fi
nvidia-smi -L | tee $OUT/gpus.txt

t0=$(date +%s)
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/build.log 2>&1 &&
  ninja -C build-dev -j$(nproc) >> $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
BIN=build-dev/launcher/dtrain

$BIN doctor 2>&1 | tee $OUT/doctor.txt

ompi_info --all 2>/dev/null | grep -i "forward_signals" > $OUT/ompi_signals.txt
if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  ctest --test-dir build-dev -j4 --output-on-failure --timeout 300 > $OUT/ctest.log 2>&1
  echo "ctest rc=$?"; grep -E "tests passed|tests failed|Failed|\*\*\*" $OUT/ctest.log | tail -15
  # Which GPU tests actually ran (not skipped) — the proof that CUDA code executed.
  ctest --test-dir build-dev -N | grep -ci cuda | sed 's/^/gpu-named tests: /'
  grep -c "Skipped" $OUT/ctest.log | sed 's/^/skipped lines: /'
  # The multi-rank GPU tests print per case only when run directly: show which ran (not skipped).
  for t in comm_nccl_communicator_mpi_test runtime_gradient_reducer_mpi_test; do
    mpirun -np 2 --oversubscribe -x NCCL_NVLS_ENABLE build-dev/tests/$t > $OUT/$t.log 2>&1
    echo "$t rc=$? ok=$(grep -c '\[       OK' $OUT/$t.log) skipped=$(grep -c '\[  SKIPPED \]' $OUT/$t.log)"
  done
fi

CFG=configs/fashion_mnist_mlp.yaml
$BIN train $CFG --set train.device=cuda --set run.dir=$OUT/gpu_run > $OUT/train_gpu.log 2>&1; echo "gpu train rc=$?"
grep -h '"kind":"checkpoint"' $OUT/gpu_run/metrics.jsonl | tail -2
# The exported weights load in PyTorch through the safetensors package, equal to dtrain's checkpoint.
$BIN ckpt export $OUT/gpu_run/checkpoints --out $OUT/ckpt_export.safetensors --format safetensors > $OUT/ckpt_export.log 2>&1
python3 -c "
from safetensors.torch import load_file
a = load_file('$OUT/gpu_run/final.safetensors'); b = load_file('$OUT/ckpt_export.safetensors')
print('safetensors in python:', {k: tuple(v.shape) for k, v in a.items()}, 'equal to ckpt export:', all((a[k] == b[k]).all().item() for k in a))
" 2>&1 | tail -2
$BIN train $CFG --set train.device=cpu --set train.epochs=1 --set run.dir=$OUT/cpu_run > $OUT/train_cpu.log 2>&1
echo "cpu train rc=$?"
if [[ $(nvidia-smi -L | wc -l) -ge 2 ]]; then
  # Same global batch as the 1-GPU run (2 x 32 = 64): the same optimization, so the same accuracy.
  $BIN launch --nproc-per-node gpu $CFG --set data.batch_size=32 --set run.dir=$OUT/gpu2_b32_run \
    > $OUT/train_gpu2_b32.log 2>&1; echo "2-gpu launch (2x32) rc=$?"
  # Same per-GPU batch (2 x 64): throughput scaling.
  $BIN launch --nproc-per-node gpu $CFG --set run.dir=$OUT/gpu2_run > $OUT/train_gpu2.log 2>&1
  echo "2-gpu launch (2x64) rc=$?"
  grep -E "done:|eval \|" $OUT/train_gpu2_b32.log $OUT/train_gpu2.log
  grep -E "step 2800/|step 1400/" $OUT/train_gpu2_b32.log $OUT/train_gpu2.log
  OUT=$OUT/allreduce bash bench/allreduce.sh build-dev > $OUT/allreduce.log 2>&1; echo "allreduce bench rc=$?"
  tail -8 $OUT/allreduce.log
fi
python3 bench/mlp_torch.py --device cuda --data-on-gpu --json $OUT/torch_gpu_resident.json > $OUT/torch_gpu_resident.log 2>&1
python3 bench/mlp_torch.py --device cuda --json $OUT/torch_gpu.json > $OUT/torch_gpu.log 2>&1
python3 bench/mlp_torch.py --device cpu --epochs 1 --json $OUT/torch_cpu.json > $OUT/torch_cpu.log 2>&1
grep -E "done:|eval \|" $OUT/train_gpu.log $OUT/train_cpu.log
cat $OUT/torch_gpu.json $OUT/torch_gpu_resident.json $OUT/torch_cpu.json; echo
