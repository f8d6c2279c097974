#!/usr/bin/env bash
# One device call for a refactor that must change no speed (issue 33): this tree's GPU tests of what it touched, then
# bench/ab_base.sh (the base commit against this tree, same GPU, alternating runs: MLP, CNN, GPT-2 124M).
# Usage: here `mkdir -p .device-carry && git archive BASE | gzip > .device-carry/base.tgz` (and Fashion-MNIST's
#   four .gz in .device-carry/fashion-mnist/); on the GPU machine, carrying .device-carry:
#   OUT=/some/dir bench/ab_refactor.sh
# GPU_TESTS: the test binaries to run on the GPU (default: the optimizer kernels and updaters, the trainer, the step
# graph e2e); AB: the ab_base.sh parts (default "mlp cnn gpt2").
set -uo pipefail
export NCCL_NVLS_ENABLE=0
: "${OUT:?set OUT}"
DATA=/usr/share/datasets/fashion-mnist
[[ -f $DATA/train-images-idx3-ubyte.gz ]] || { mkdir -p $DATA && cp .device-carry/fashion-mnist/*.gz $DATA/; }
GPU_TESTS=${GPU_TESTS:-kernels_lion_update_op_test kernels_optim_update_op_test optim_optimizer_test \
optim_optim_algorithm_test optim_zero1_test optim_loss_scaler_test train_trainer_test train_step_graph_e2e_test}
t0=$(date +%s)
cmake -S . -B build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDT_BUILD_TESTS=ON \
  > /tmp/ab_refactor_build.log 2>&1 &&
  ninja -C build-ab dtrain $GPU_TESTS >> /tmp/ab_refactor_build.log 2>&1 || { tail -30 /tmp/ab_refactor_build.log; exit 1; }
echo "test build: $(( $(date +%s) - t0 )) s"
failed=0
for t in $GPU_TESTS; do
  if build-ab/tests/$t > "$OUT/$t.log" 2>&1; then r=ok; else r=FAILED; failed=1; fi
  echo "gputest $t: $r $(grep -cE '^\[ +OK ' "$OUT/$t.log") ok, $(grep -cE '^\[ +SKIPPED' "$OUT/$t.log") skipped"
done
OUT=$OUT BASE_TGZ=.device-carry/base.tgz NEW_BUILD=build-ab AB="${AB:-mlp cnn gpt2}" bash bench/ab_base.sh
exit $failed
