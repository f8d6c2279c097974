#!/usr/bin/env bash
# One device call: an earlier commit (the base) against this tree, both built here, run alternately on the same GPU:
#   the Fashion-MNIST MLP with CUDA graphs (twice each; data share over every interval via bench/data_share.py) and
#   this tree's MLP without graphs; the bf16 CNN; GPT-2 on synthetic tokens at each of $AB_GPT2_SIZES (default 124m;
#   350m 774m 1.5b: bench/gpt2_shapes.sh) with the config's settings plus $AB_GPT2_SETS (e.g. "--set
#   data.batch_size=16 --set train.precision=fp8"), twice each: step time, peak memory; then bench/host_step_probe.
# Usage: here `git archive REV | gzip > .devbin/base.tgz`; on the GPU machine (carrying .devbin and .device-carry),
#   OUT=/some/dir BASE_TGZ=.devbin/base.tgz bench/ab_base.sh
# AB="mlp cnn gpt2 probe" (the default) picks the parts; add torch for PyTorch's torch.compile of the same GPT-2.
# NEW_BUILD=DIR takes this tree's dtrain from DIR (e.g. build-dev of bench/device_session.sh) instead of building it.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
: "${OUT:?set OUT}" "${BASE_TGZ:?set BASE_TGZ}"
DATA=/usr/share/datasets/fashion-mnist
[[ -f $DATA/train-images-idx3-ubyte.gz ]] || { mkdir -p $DATA && cp .device-carry/fashion-mnist/*.gz $DATA/; }
nvidia-smi -L
rm -rf /tmp/ab_base && mkdir -p /tmp/ab_base && tar xzf "$BASE_TGZ" -C /tmp/ab_base
AB=${AB:-mlp cnn gpt2 probe}
has() { [[ " $AB " == *" $1 "* ]]; }
NEW=${NEW_BUILD:-build-ab}
t0=$(date +%s)
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDT_BUILD_TESTS=OFF)
new_targets="dtrain$(has probe && echo ' host_step_probe')"
[[ -n ${NEW_BUILD:-} ]] ||
  (cmake -S . -B build-ab "${cmake_args[@]}" > /tmp/ab_new.log 2>&1 && ninja -C build-ab $new_targets >> /tmp/ab_new.log 2>&1) &
(cmake -S /tmp/ab_base -B /tmp/ab_base_build "${cmake_args[@]}" > /tmp/ab_old.log 2>&1 && ninja -C /tmp/ab_base_build dtrain >> /tmp/ab_old.log 2>&1) &
wait
[[ -x $NEW/dtrain && -x /tmp/ab_base_build/dtrain ]] || { tail -20 /tmp/ab_new.log /tmp/ab_old.log; exit 1; }
echo "builds: $(( $(date +%s) - t0 )) s"
bin() { [[ $1 == base ]] && echo /tmp/ab_base_build/dtrain || echo $NEW/dtrain; }
line() { grep -E "step [0-9]+/" "$1" | tail -1 | sed 's/.*\] //' | cut -c1-190; }
R=$OUT/runs; mkdir -p $R
if has mlp; then
  MLP="configs/fashion_mnist_mlp.yaml --set train.device=cuda --set run.tensorboard=false"
  for round in 1 2; do
    for v in base new; do
      $(bin $v) train $MLP --set run.dir=$R/mlp_${v}_$round > $R/mlp_${v}_$round.log 2>&1
      echo "mlp $v #$round rc=$?: $(line $R/mlp_${v}_$round.log)"
    done
  done
  $(bin new) train $MLP --set train.cuda_graphs=false --set run.dir=$R/mlp_new_eager > $R/mlp_new_eager.log 2>&1
  echo "mlp new eager rc=$?: $(line $R/mlp_new_eager.log)"
  python3 bench/data_share.py $R/mlp_base_1 $R/mlp_new_1 $R/mlp_base_2 $R/mlp_new_2 $R/mlp_new_eager
fi
if has cnn; then
  for v in base new; do
    $(bin $v) train configs/fashion_mnist_cnn.yaml --set run.tensorboard=false --set run.dir=$R/cnn_$v > $R/cnn_$v.log 2>&1
    echo "cnn $v rc=$?: $(line $R/cnn_$v.log)"; grep -E "eval \||\] done: " $R/cnn_$v.log | tail -2 | sed 's/.*\] //'
  done
  python3 bench/data_share.py $R/cnn_base $R/cnn_new
fi
if has gpt2; then
  G="configs/gpt2_124m.yaml --set data.dataset=synthetic_tokens --set train.max_steps=60 --set train.log_every=20 \
  --set train.grad_accum_steps=1 --set schedule.warmup_steps=10 --set checkpoint.enabled=false --set train.eval=false \
  --set run.tensorboard=false"
  # shellcheck source=bench/gpt2_shapes.sh
  source bench/gpt2_shapes.sh
  # shellcheck disable=SC2086
  gpt2_check_sizes ${AB_GPT2_SIZES:-} || exit 2
  for size in ${AB_GPT2_SIZES:-124m}; do
    for round in 1 2; do
      for v in base new; do
        n=gpt2_${size}_${v}_$round
        # shellcheck disable=SC2046,SC2086
        $(bin $v) train $G $(gpt2_shape $size) ${AB_GPT2_SETS:-} --set run.dir=$R/$n > $R/$n.log 2>&1
        echo "gpt2 $size $v #$round rc=$?: $(line $R/$n.log) | steps 1-20 $(grep -E 'step 20/' $R/$n.log | grep -oE 'peak [0-9]+ MiB') | graphs $(grep -c 'CUDA graph: step' $R/$n.log)"
      done
    done
  done
fi
if has torch; then  # the reference in the same call: PyTorch torch.compile (default mode) of the same GPT-2
  python3 bench/gpt2_torch.py --compile --steps 40 > $R/gpt2_torch_compile.log 2>&1
  echo "gpt2 torch.compile rc=$?: $(tail -1 $R/gpt2_torch_compile.log)"
fi
if has probe; then
  $NEW/bench/host_step_probe $DATA 20000
fi
