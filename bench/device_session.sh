#!/usr/bin/env bash
# One device call: build with the project's CMake, then the stages named in $STAGES (default: all):
#   tests   the whole ctest suite (GPU tests run here, not skipped) and the 2-rank NCCL tests
#   gputests  only the GPU cases of the test binaries (no full ctest; $GPU_TEST_BINS: those binaries only), and the
#           CUDA-graph e2e tests ($E2E_FILTER: a gtest filter for them) and those of $GPU_E2E_BINS
#   mlp     Fashion-MNIST MLP on 1 GPU through the loader: accuracy, samples/s, data wait share
#   loader  bench/loader.sh: dtrain's loader alone vs PyTorch DataLoader (pinned, to the GPU)
#   cnn     Fashion-MNIST CNN on 1 and 2 GPUs vs PyTorch (bench/cnn_torch.py); dtrain in each of $CNN_PRECISIONS
#   convs   bench/conv_algos and bench/conv_fe: cuDNN's legacy API vs its graph API on the CNN's convolutions
#   gpt2    GPT-2 124M tokens/s, MFU, memory: dtrain 1 and 2 GPUs vs PyTorch eager / torch.compile / DDP
#   gpt2big GPT-2 350M on 1 GPU: dtrain vs torch.compile
#   graphs  the MLP with and without CUDA graphs (step time, data wait over every interval; $MLP_PREFETCH: also
#           with each of these data.prefetch depths)
#   pernode GPT-2 124M on 2 GPUs: two per-node launchers (--node-rank 0/1, one GPU each, no mpirun) vs `dtrain
#           launch`, tokens/s side by side; then node 1's worker is killed and both launchers must stop (issue 23)
#   gpt2probe  kernels of a GPT-2 step by total time (ncu) and PyTorch's (torch.profiler)
#   lnprobe    bench/layernorm_bench (bf16 layer norm at GPT-2's shapes vs a device copy), then the layer-norm
#           kernels of 3 GPT-2 steps by total time (ncu, those kernels only)
#   kprobe     the kernels of 3 GPT-2 steps whose names match $KREGEX, by total time (ncu)
#   cnnprobe   kernels of a Fashion-MNIST CNN step by total time (ncu; 20 graphed steps after warm-up)
#   gpt2loss   GPT-2 loss curves, dtrain vs PyTorch, same init and tokens: 200 steps, PNG to $OUT
#   gpt2comm   GPT-2 124M on 1 GPU, then 2 GPUs under NCCL CTA limits, bucket sizes and bf16 gradient compression
#   zero1   GPT-2 124M on 2 GPUs with and without dist.zero1: optimizer memory and tokens/s
#   telemetry  NVML telemetry in metrics.jsonl vs nvidia-smi in the same run; the idle-GPU warning
#   idleexit  --idle-exit on a GPU kept idle by a starved host (loader and trainer share a core with a busy loop):
#           checkpoint + exit 75, then the resume finishes
#   prometheus  GPT-2 on up to 2 GPUs with run.prometheus_port: /metrics scraped every second; GPU series vs nvidia-smi
#   hf      `dtrain ckpt export --format hf` loaded by transformers, logits vs dtrain's (bench/hf_export_check.sh)
#   llama   Llama shapes ($LLAMA_SHAPES: smollm2_360m llama3_1b) at B x T = 16 x 1024: dtrain in each of
#           $LLAMA_PRECISIONS (default bf16; fp8, fp8:LAYERS) vs PyTorch in the same call: bench/llama_torch.py for
#           each of $LLAMA_TORCH (impl:mode[:float8 recipe]; default hand:default hand:reduce-overhead hf:default
#           hf:reduce-overhead), tokens/s, step ms, peak memory
#   llamaprobe  kernels of 2 Llama steps ($PROBE_SHAPE, default llama3_1b; synthetic tokens) by total time (ncu), and
#           the hand-written Llama's under torch.compile (torch.profiler)
#   fp8probe  kernels of 2 GPT-2 steps at each of $PROBE_SIZES (default 1.5b) with train.precision $PROBE_PRECISION
#           (default fp8) by total time (ncu)
#   llamaloss  loss curves of the SmolLM2-360M shape from the same imported weights (transformers' random init,
#           save_pretrained) on the same byte-level tokens of real text, 200 steps: dtrain vs two PyTorch runs (the
#           hand-written Llama and transformers' LlamaForCausalLM, eager; $LLAMALOSS_TORCH names others), every
#           pair's distance, PNG to $OUT
#   gpt2fp8 train.precision fp8 (issue 35): the FP8 GPU tests, then for each of $FP8_SIZES (default 124m 350m; also 774m 1.5b) GPT-2
#           at B x T = 16 x 1024 (synthetic tokens): dtrain bf16, dtrain fp8 with each of $FP8_LAYERS (default auto
#           all), and (FP8_TORCH=1, the default) torch.compile in each of $TORCH_MODES (default default
#           reduce-overhead) x $TORCH_FLOAT8 (torchao float8 recipes, default none) in the same call; with FP8_LOSS=1 also $LOSS_STEPS (300) steps of
#           GPT-2 $LOSS_SIZE (default 124m) on byte-level tokens of real text ($LOSS_TEXT, default the repo's README
#           and docs): $LOSS_RUNS (default bf16, fp8 and bf16 with another train.seed), compared by bench/loss_diff.py
#           over the last 200 steps (curves: fp8_loss_SIZE.png, each run alone: fp8_loss_SIZE_NAME.png)
#   tb      TensorBoard's own reader over a run's event file (tests/tools/read_tensorboard.py)
#   restore the restore path on this GPU (issue 22): its tests (the CUDA staging case among them), then
#           ckpt_io_bench load-device (reads + CRC32C + copies to the GPU) vs cat/dd (bench/ckpt_local_bench.sh), and a
#           resume of GPT-2 124M through the trainer vs cat/dd (bench/ckpt_restore_bench.sh)
# Usage (on the GPU machine, from the repo root): OUT=/some/dir STAGES="tests gpt2" bench/device_session.sh
# (BUILD_TARGETS="dtrain ..." builds only those targets, for stages that need no test binaries.)
# Logs go to $OUT/logs.tgz (the device returns few files); a summary is printed.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
FINAL_OUT=${OUT:?set OUT}
mkdir -p "$FINAL_OUT"  # (a missing one lost a whole call's logs: the EXIT trap's tar had nowhere to write)
OUT=/tmp/dtrain_device_logs; rm -rf $OUT; mkdir -p $OUT
trap 'tar czf $FINAL_OUT/logs.tgz --exclude=checkpoints --exclude="*.safetensors" -C $OUT .' EXIT
STAGES=${STAGES:-"tests mlp loader cnn gpt2 zero1 tb"}
has() { [[ " $STAGES " == *" $1 "* ]]; }
source bench/torchao_env.sh  # torchao from .device-carry/torchao.tgz, for --float8 of the torch scripts (issue 35)
FMNIST=${FMNIST:-.device-carry/fashion-mnist}
DATA=/usr/share/datasets/fashion-mnist
if [[ ! -f $DATA/train-images-idx3-ubyte.gz ]]; then mkdir -p $DATA && cp $FMNIST/*.gz $DATA/; fi
NGPU=$(nvidia-smi -L | wc -l)
nvidia-smi -L | tee $OUT/gpus.txt

t0=$(date +%s)
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/build.log 2>&1 &&
  ninja -C build-dev -j$(nproc) ${BUILD_TARGETS:-} >> $OUT/build.log 2>&1 || { grep -B2 -A12 'error' $OUT/build.log | head -80; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
BIN=build-dev/dtrain
step_line() { grep -E "step [0-9]+/" "$1" | tail -1 | sed 's/.*\] //'; }

if has tests; then
  ctest --test-dir build-dev -j8 --output-on-failure --timeout 300 -E "${CTEST_EXCLUDE:-slurm|fuzz}" > $OUT/ctest.log 2>&1
  echo "ctest rc=$?"; grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|\*\*\*" $OUT/ctest.log | tail -20
  # GPU test cases that ran (not skipped): the proof that the CUDA code executed.
  for b in build-dev/tests/{core,comm,kernels,models,data,optim,checkpoint,train,observe}_*_test; do
    [[ $b == *_mpi_test ]] && continue
    $b --gtest_filter='*Cuda*:*Gpu*:*GPU*:*CUDA*' > $OUT/$(basename $b).gpu.log 2>&1
    ok=$(grep -c '\[       OK' $OUT/$(basename $b).gpu.log); sk=$(grep -c '\[  SKIPPED \]' $OUT/$(basename $b).gpu.log)
    [[ $ok -gt 0 || $sk -gt 0 ]] && echo "$(basename $b): gpu cases ok=$ok skipped=$sk"
  done
  for t in comm_nccl_communicator_mpi_test optim_gradient_reducer_mpi_test optim_zero1_mpi_test; do
    [[ -x build-dev/tests/$t ]] || continue
    mpirun -np 2 --oversubscribe -x NCCL_NVLS_ENABLE build-dev/tests/$t > $OUT/$t.log 2>&1
    echo "$t rc=$? ok=$(grep -c '\[       OK' $OUT/$t.log) skipped=$(grep -c '\[  SKIPPED \]' $OUT/$t.log)"
  done
fi

if has gputests; then
  bins=(build-dev/tests/{core,comm,kernels,models,data,optim,checkpoint,train,observe}_*_test)
  [[ -n ${GPU_TEST_BINS:-} ]] && read -ra bins <<< "$GPU_TEST_BINS"
  for b in "${bins[@]}"; do
    [[ $b == *_mpi_test || $b == *_e2e_test ]] && continue
    # (HalfOps: the typed 16-bit op tests, every one of them on the GPU.)
    $b --gtest_filter='*Cuda*:*Gpu*:*GPU*:*CUDA*:HalfOps*' > $OUT/$(basename $b).gpu.log 2>&1
    rc=$?; ok=$(grep -c '\[       OK' $OUT/$(basename $b).gpu.log); sk=$(grep -c '\[  SKIPPED \]' $OUT/$(basename $b).gpu.log)
    [[ $ok -gt 0 || $sk -gt 0 || $rc -ne 0 ]] && echo "$(basename $b): rc=$rc gpu cases ok=$ok skipped=$sk"
    grep -E "^\[  FAILED|Failure|Expected|Which is|actual" $OUT/$(basename $b).gpu.log | head -8
  done
  [[ -f $OUT/models_attention_op_test.gpu.log ]] && grep -h "^\[attention" $OUT/models_attention_op_test.gpu.log
  build-dev/tests/train_step_graph_e2e_test ${E2E_FILTER:+--gtest_filter=$E2E_FILTER} > $OUT/step_graph_e2e.log 2>&1
  echo "train_step_graph_e2e_test rc=$? ok=$(grep -c '\[       OK' $OUT/step_graph_e2e.log) skipped=$(grep -c '\[  SKIPPED \]' $OUT/step_graph_e2e.log)"
  grep -E "^\[  FAILED|Failure|Expected|Which is|max \|" $OUT/step_graph_e2e.log | head -12
  # The e2e tests whose every case needs a GPU ($GPU_E2E_BINS, default the split masters').
  for t in ${GPU_E2E_BINS:-launcher_llama_split_masters_e2e_test}; do
    [[ -x build-dev/tests/$t ]] || continue
    DTRAIN_BIN=$PWD/$BIN build-dev/tests/$t > $OUT/$t.log 2>&1
    echo "$t rc=$? ok=$(grep -c '\[       OK' $OUT/$t.log) skipped=$(grep -c '\[  SKIPPED \]' $OUT/$t.log)"
    grep -E "^\[  FAILED|Failure|Expected|Which is|final loss" $OUT/$t.log | head -12
  done
fi

if has graphs; then
  for g in true false; do
    $BIN train configs/fashion_mnist_mlp.yaml --set train.device=cuda --set train.cuda_graphs=$g --set run.dir=$OUT/mlp_g$g > $OUT/mlp_g$g.log 2>&1
    echo "mlp 1 GPU cuda_graphs=$g rc=$?: $(step_line $OUT/mlp_g$g.log)"; grep -E "eval \|" $OUT/mlp_g$g.log | tail -1 | sed 's/.*\] //'
  done
  # The data wait over every interval of the runs, not only the last progress line's (bench/data_share.py).
  for p in ${MLP_PREFETCH:-}; do
    $BIN train configs/fashion_mnist_mlp.yaml --set train.device=cuda --set data.prefetch=$p --set run.dir=$OUT/mlp_p$p > $OUT/mlp_p$p.log 2>&1
    echo "mlp 1 GPU data.prefetch=$p rc=$?: $(step_line $OUT/mlp_p$p.log)"
  done
  python3 bench/data_share.py $OUT/mlp_gtrue $OUT/mlp_gfalse $(for p in ${MLP_PREFETCH:-}; do echo $OUT/mlp_p$p; done)
fi

if has mlp; then
  $BIN train configs/fashion_mnist_mlp.yaml --set train.device=cuda --set run.dir=$OUT/mlp_gpu > $OUT/mlp_gpu.log 2>&1
  echo "mlp 1 GPU rc=$?: $(step_line $OUT/mlp_gpu.log)"; grep -E "eval \|" $OUT/mlp_gpu.log | tail -1 | sed 's/.*\] //'
fi

if has loader; then
  for th in 1 4; do
    THREADS=$th DEVICE=cuda BATCHES=400 OUT=/tmp/loader_shards bash bench/loader.sh build-dev > $OUT/loader_t$th.log 2>&1
    echo "loader bench threads=$th rc=$?: $(grep -aE 'samples/s' $OUT/loader_t$th.log | sed 's/.*\] //' | tr '\n' ' ')"
  done
fi

if has convs; then
  build-dev/bench/conv_algos 128 50 > $OUT/conv_algos.log 2>&1; echo "conv_algos rc=$?"; tail -4 $OUT/conv_algos.log
  build-dev/bench/conv_fe 128 > $OUT/conv_fe.log 2>&1; echo "conv_fe rc=$?"; tail -1 $OUT/conv_fe.log
fi

if has cnn; then
  for prec in ${CNN_PRECISIONS:-auto fp32}; do  # auto: bf16 channels-last on a GPU
    $BIN train configs/fashion_mnist_cnn.yaml --set train.device=cuda --set train.precision=$prec \
      --set run.dir=$OUT/cnn_gpu_$prec > $OUT/cnn_gpu_$prec.log 2>&1
    echo "cnn 1 GPU precision=$prec rc=$?: $(step_line $OUT/cnn_gpu_$prec.log)"
    grep -E "eval \||done:" $OUT/cnn_gpu_$prec.log | tail -3 | sed 's/.*\] //'
  done
  if [[ $NGPU -ge 2 ]]; then
    $BIN launch --nproc-per-node gpu configs/fashion_mnist_cnn.yaml --set run.dir=$OUT/cnn_gpu2 > $OUT/cnn_gpu2.log 2>&1
    echo "cnn 2 GPU rc=$?: $(step_line $OUT/cnn_gpu2.log)"; grep -E "eval \|" $OUT/cnn_gpu2.log | tail -1 | sed 's/.*\] //'
  fi
  for mode in ${CNN_TORCH_MODES:-none default reduce-overhead}; do
    python3 bench/cnn_torch.py --compile $mode --epochs ${CNN_TORCH_EPOCHS:-8} --json $OUT/cnn_torch_$mode.json \
      > $OUT/cnn_torch_$mode.log 2>&1
    echo "cnn torch 1 GPU $mode rc=$?: $(cat $OUT/cnn_torch_$mode.json 2>/dev/null || tail -3 $OUT/cnn_torch_$mode.log)"
  done
  if [[ $NGPU -ge 2 ]]; then
    torchrun --standalone --nproc-per-node 2 bench/cnn_torch.py --json $OUT/cnn_torch_ddp.json > $OUT/cnn_torch_ddp.log 2>&1
    echo "cnn torch DDP 2 GPU rc=$?: $(cat $OUT/cnn_torch_ddp.json 2>/dev/null || tail -3 $OUT/cnn_torch_ddp.log)"
  fi
fi

mfu_of() {  # MODEL LOG: the dtrain run's last tokens/s through bench/mfu.py
  local tps; tps=$(grep -oE "[0-9.]+ tokens/s" "$2" | tail -1 | cut -d" " -f1)
  [[ -n $tps ]] && python3 bench/mfu.py "$1" "$tps"
}
GPT2="configs/gpt2_124m.yaml --set data.dataset=synthetic_tokens --set train.max_steps=${GPT2_STEPS:-60} --set train.log_every=20 --set train.grad_accum_steps=1 --set schedule.warmup_steps=10 --set checkpoint.enabled=false --set train.eval=false"
if has gpt2; then
  $BIN train $GPT2 --set run.dir=$OUT/gpt2_1 > $OUT/gpt2_1.log 2>&1
  echo "gpt2 dtrain 1 GPU rc=$?: $(step_line $OUT/gpt2_1.log)"; mfu_of 124m $OUT/gpt2_1.log
  grep -hE "CUDA graph|attention:" $OUT/gpt2_1.log | head -3 | sed 's/.*\] //'
  $BIN train $GPT2 --set train.cuda_graphs=false --set run.dir=$OUT/gpt2_1e > $OUT/gpt2_1e.log 2>&1
  echo "gpt2 dtrain 1 GPU eager rc=$?: $(step_line $OUT/gpt2_1e.log)"
  DTRAIN_ATTENTION=flash $BIN train $GPT2 --set run.dir=$OUT/gpt2_1f > $OUT/gpt2_1f.log 2>&1
  echo "gpt2 dtrain 1 GPU graphs + flash attention rc=$?: $(step_line $OUT/gpt2_1f.log)"
  python3 bench/gpt2_torch.py --steps 40 --json $OUT/gpt2_torch_eager.json > $OUT/gpt2_torch_eager.log 2>&1
  echo "gpt2 torch eager: $(tail -1 $OUT/gpt2_torch_eager.log)"
  for mode in ${TORCH_MODES:-default}; do
    python3 bench/gpt2_torch.py --compile --mode $mode --steps 40 --json $OUT/gpt2_torch_compile_$mode.json \
      > $OUT/gpt2_torch_compile_$mode.log 2>&1
    echo "gpt2 torch.compile $mode: $(tail -1 $OUT/gpt2_torch_compile_$mode.log)"
  done
  if [[ $NGPU -ge 2 ]]; then
    $BIN launch --nproc-per-node gpu $GPT2 --set run.dir=$OUT/gpt2_2 > $OUT/gpt2_2.log 2>&1
    echo "gpt2 dtrain 2 GPU rc=$?: $(step_line $OUT/gpt2_2.log)"
    torchrun --standalone --nproc-per-node 2 bench/gpt2_torch.py --compile --steps 40 > $OUT/gpt2_torch_ddp.log 2>&1
    echo "gpt2 torch DDP compile: $(grep tokens_per_s $OUT/gpt2_torch_ddp.log | tail -1)"
  fi
fi

if has gpt2big; then
  BIG="${GPT2/gpt2_124m/gpt2_350m} --set data.batch_size=${BIG_BATCH:-16}"
  $BIN train $BIG --set run.dir=$OUT/gpt2big > $OUT/gpt2big.log 2>&1
  echo "gpt2 350M dtrain 1 GPU rc=$?: $(step_line $OUT/gpt2big.log)"; mfu_of 350m $OUT/gpt2big.log
  python3 bench/gpt2_torch.py --model 350m --batch ${BIG_BATCH:-16} --compile --steps 30 --json $OUT/gpt2big_torch.json \
    > $OUT/gpt2big_torch.log 2>&1
  echo "gpt2 350M torch.compile: $(tail -1 $OUT/gpt2big_torch.log)"
fi

# shellcheck source=bench/gpt2_shapes.sh
source bench/gpt2_shapes.sh
# shellcheck disable=SC2086
gpt2_check_sizes ${FP8_SIZES:-} ${LOSS_SIZE:-} ${PROBE_SIZES:-} || exit 2

if has gpt2fp8; then
  for t in kernels_fp8_test kernels_matmul_fp8_test models_gpt2_fp8_test models_gpt2_test; do
    f=""; [[ $t == models_gpt2_test ]] && f="--gtest_filter=Gpt2Cuda*"  # (its CPU cases run in CI)
    build-dev/tests/$t $f > $OUT/$t.log 2>&1
    echo "$t rc=$? ok=$(grep -c '\[       OK' $OUT/$t.log) skipped=$(grep -c '\[  SKIPPED \]' $OUT/$t.log)"
    grep -hE "^\[  FAILED|Failure|Expected|Which is|^\[fp8\]" $OUT/$t.log | head -10
  done
  if [[ ${FP8_LOSS:-0} == 1 ]]; then
    # $LOSS_SIZE (default 124m) on $LOSS_TEXT (default: the repo's README and docs), curves in $FINAL_OUT.
    L=/tmp/fp8loss; rm -rf $L; mkdir -p $L
    if [[ -n ${LOSS_TEXT:-} ]]; then cp $LOSS_TEXT $L/corpus.txt; else cat README.md docs/*.md > $L/corpus.txt; fi
    $BIN data convert-text --out $L/shards --seq-len 1024 $L/corpus.txt > $OUT/fp8loss_data.log 2>&1
    echo "convert-text rc=$?: $(tail -1 $OUT/fp8loss_data.log)"
    LCFG="configs/gpt2_124m.yaml $(gpt2_shape ${LOSS_SIZE:-124m}) --set data.train_shards=$L/shards --set data.shuffle=false --set train.grad_accum_steps=1 --set schedule.kind=constant --set schedule.warmup_steps=0 --set checkpoint.enabled=false --set train.eval=false --set train.log_every=1 --set optim.lr=3e-4 --set train.epochs=100000"
    # $LOSS_RUNS: NAME:PRECISION:SEED[:STEPS[:KEY=VALUE]] (STEPS default $LOSS_STEPS); the first is the reference.
    # LOSS_PARALLEL=1 runs them side by side on the GPU (losses do not depend on timing), bounded by $LOSS_TIMEOUT s.
    runs=(); names=()
    for r in ${LOSS_RUNS:-bf16:bf16:1234 fp8:fp8:1234 bf16b:bf16:1235}; do
      IFS=: read -r name prec seed steps extra <<< "$r"
      names+=($name)
      cmd="$BIN train $LCFG --set train.max_steps=${steps:-${LOSS_STEPS:-300}} --set train.precision=$prec --set train.seed=$seed ${extra:+--set $extra} --set run.dir=$OUT/fp8loss_$name"
      if [[ ${LOSS_PARALLEL:-0} == 1 ]]; then
        timeout ${LOSS_TIMEOUT:-3000} $cmd > $OUT/fp8loss_$name.log 2>&1 &
      else
        $cmd > $OUT/fp8loss_$name.log 2>&1
      fi
    done
    wait
    for name in "${names[@]}"; do echo "loss run $name: $(step_line $OUT/fp8loss_$name.log)"; done
    python3 bench/loss_diff.py 200 "${names[@]/#/$OUT/fp8loss_}" --png $FINAL_OUT/fp8_loss_${LOSS_SIZE:-124m}.png
    # Every run alone over all its steps (a long run beyond the reference's), with its largest and last losses.
    for name in "${names[@]}"; do
      python3 bench/loss_diff.py 200 $OUT/fp8loss_$name --png $FINAL_OUT/fp8_loss_${LOSS_SIZE:-124m}_$name.png --summary
    done
  fi
  for size in ${FP8_SIZES:-124m 350m}; do
    shape=$(gpt2_shape $size)
    run() {  # NAME ARGS...: one dtrain run of this size, its last progress line
      local name=$1; shift
      $BIN train $GPT2 $shape --set data.batch_size=16 "$@" --set run.dir=$OUT/fp8_${size}_$name > $OUT/fp8_${size}_$name.log 2>&1
      echo "gpt2 $size dtrain $name rc=$?: $(step_line $OUT/fp8_${size}_$name.log)"
      grep -h "precision fp8\|cannot fuse" $OUT/fp8_${size}_$name.log | head -3 | sed 's/.*\] //'
    }
    run bf16 --set train.precision=bf16
    for layers in ${FP8_LAYERS:-auto all}; do run fp8_$layers --set train.precision=fp8 --set model.gpt2.fp8_layers=$layers; done
    if [[ ${FP8_TORCH:-1} == 1 ]]; then
      # $TORCH_FLOAT8: torchao float8 recipes (none: bf16) run under each mode; names mode or mode_recipe
      for mode in ${TORCH_MODES:-default reduce-overhead}; do
        for f8 in ${TORCH_FLOAT8:-none}; do
          n=$mode; [[ $f8 != none ]] && n=${mode}_$f8
          python3 bench/gpt2_torch.py --model $size --batch 16 --compile --mode $mode --float8 $f8 \
            --steps ${TORCH_STEPS:-30} --json $OUT/fp8_${size}_torch_$n.json > $OUT/fp8_${size}_torch_$n.log 2>&1
          echo "gpt2 $size torch.compile $mode float8 $f8: $(tail -1 $OUT/fp8_${size}_torch_$n.log)"
          grep -h "torchao float8" $OUT/fp8_${size}_torch_$n.log | head -1
        done
      done
    fi
  done
fi

if has pernode && [[ $NGPU -ge 2 ]]; then
  $BIN launch --nproc-per-node 2 $GPT2 --set run.dir=$OUT/pn_mpirun > $OUT/pn_mpirun.log 2>&1
  echo "pernode: dtrain launch (mpirun) 2 GPU rc=$?: $(step_line $OUT/pn_mpirun.log)"
  openssl rand -hex 32 > $OUT/pn_secret && chmod 600 $OUT/pn_secret  # the job secret both nodes share
  pn() {  # pn NODE EXTRA...: one per-node launcher on GPU NODE
    local node=$1; shift
    CUDA_VISIBLE_DEVICES=$node $BIN launch --nnodes 2 --node-rank $node --master-addr 127.0.0.1 --master-port 29600 \
      --secret-file $OUT/pn_secret --nproc-per-node 1 --grace-seconds 3 $GPT2 "$@" > $OUT/pn_node$node.log 2>&1
    echo "pernode: node $node rc=$?"
  }
  pn 1 --set run.dir=$OUT/pn_run & pn 0 --set run.dir=$OUT/pn_run; wait
  echo "pernode: per-node launchers 2 GPU: $(step_line $OUT/pn_node0.log)"
  # Failure agreement: 30 s into a long run, SIGKILL one worker (the newest); both launchers must stop within ~10 s.
  pn 1 --set run.dir=$OUT/pn_kill --set train.max_steps=100000 &
  pn 0 --set run.dir=$OUT/pn_kill --set train.max_steps=100000 &
  sleep 30
  t_kill=$(date +%s.%N); kill -9 $(pgrep -f "train .*pn_kill" | tail -1); wait; t_end=$(date +%s.%N)
  echo "pernode: after killing one worker both launchers ended in $(awk "BEGIN{print $t_end - $t_kill}") s"
  grep -h "failed first\|stopped because of node" $OUT/pn_node0.log $OUT/pn_node1.log | head -4
fi

if has gpt2probe; then
  # Where the step time goes: every kernel of 3 training steps timed by Nsight Compute (one metric, clocks left
  # alone), summed by name; PyTorch's kernels from its profiler for comparison.
  if command -v ncu >/dev/null; then
    timeout 280 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw --nvtx \
      --nvtx-include "train_step/" --log-file $OUT/ncu.csv $BIN train $GPT2 --set train.max_steps=3 --set schedule.warmup_steps=0 \
      --set run.dir=$OUT/gpt2_prof_run > $OUT/ncu_run.log 2>&1
    echo "ncu rc=$?"; python3 bench/kernel_profile.py $OUT/ncu.csv 3 | tee $OUT/kern_sum.txt | head -45
  else
    echo "no ncu on this machine"
  fi
  python3 bench/gpt2_torch.py --compile --steps 10 --profile > $OUT/torch_prof.log 2>&1
  echo "torch.compile profile rc=$?"; grep -E "Name|^ *[a-zA-Z_].*%" $OUT/torch_prof.log | head -34 | cut -c1-170
fi

# ncu over 3 GPT-2 steps, only the kernels whose names match $1 (a regex), summed by name into $OUT/kern_$2.txt.
kernel_probe() {
  if command -v ncu >/dev/null; then
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw -k regex:$1 \
      --nvtx --nvtx-include "train_step/" --log-file $OUT/ncu_$2.csv $BIN train $GPT2 --set train.max_steps=3 --set schedule.warmup_steps=0 \
      --set run.dir=$OUT/gpt2_$2_prof_run > $OUT/ncu_$2_run.log 2>&1
    echo "ncu rc=$?"; python3 bench/kernel_profile.py $OUT/ncu_$2.csv 3 | tee $OUT/kern_$2.txt | head -12
  else
    echo "no ncu on this machine"
  fi
}

if has lnprobe; then
  build-dev/bench/layernorm_bench | tee $OUT/layernorm_bench.txt
  kernel_probe LayerNorm ln
fi

if has kprobe; then
  kernel_probe "${KREGEX:?kprobe needs KREGEX}" kprobe
fi

if has cnnprobe; then
  if command -v ncu >/dev/null; then
    timeout 280 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw --nvtx \
      --nvtx-include "train_step/" --log-file $OUT/ncu_cnn.csv $BIN train configs/fashion_mnist_cnn.yaml \
      --set train.device=cuda --set train.max_steps=20 --set train.eval=false --set run.dir=$OUT/cnn_prof_run \
      > $OUT/ncu_cnn_run.log 2>&1
    echo "ncu cnn rc=$?"; python3 bench/kernel_profile.py $OUT/ncu_cnn.csv 20 | tee $OUT/kern_cnn.txt | head -30 | cut -c1-150
  else
    echo "no ncu on this machine"
  fi
fi

if has gpt2loss; then
  # Loss curves: dtrain and PyTorch from the same initial weights (dtrain's seeded init, exported through
  # safetensors) on the same byte-level tokens of real text, in order, constant lr, 200 steps.
  L=/tmp/gpt2loss; rm -rf $L; mkdir -p $L
  $BIN data convert-text --out $L/shards --seq-len 1024 ${TEXT:-.device-carry/text/corpus.txt} > $OUT/gpt2loss_data.log 2>&1
  echo "convert-text rc=$?: $(tail -1 $OUT/gpt2loss_data.log)"
  LCFG="configs/gpt2_124m.yaml --set data.train_shards=$L/shards --set data.shuffle=false --set train.grad_accum_steps=1 --set schedule.kind=constant --set schedule.warmup_steps=0 --set checkpoint.enabled=false --set train.eval=false --set train.log_every=1"
  $BIN train $LCFG --set train.max_steps=1 --set optim.lr=0 --set run.dir=$L/init > $OUT/gpt2loss_init.log 2>&1
  echo "init export rc=$?"
  $BIN train $LCFG --set train.max_steps=${LOSS_STEPS:-200} --set optim.lr=3e-4 --set model.init_from=$L/init/final.safetensors \
    --set run.dir=$OUT/gpt2loss_dtrain > $OUT/gpt2loss_dtrain.log 2>&1
  echo "dtrain rc=$?: $(step_line $OUT/gpt2loss_dtrain.log)"
  python3 bench/gpt2_torch.py --init $L/init/final.safetensors --tokens ${TEXT:-.device-carry/text/corpus.txt} \
    --losses $OUT/gpt2loss_torch.json --steps ${LOSS_STEPS:-200} --warmup 0 --lr 3e-4 > $OUT/gpt2loss_torch.log 2>&1
  echo "torch rc=$?: $(tail -1 $OUT/gpt2loss_torch.log)"
  python3 bench/plot_losses.py $OUT/gpt2loss_dtrain/metrics.jsonl $OUT/gpt2loss_torch.json $FINAL_OUT/gpt2_loss_curves.png
fi

if has gpt2comm && [[ $NGPU -ge 2 ]]; then
  # The 2-GPU step is longer than the 1-GPU one mostly because NCCL's kernels share the SMs with backward:
  # how the step moves with the CTAs NCCL may use, the bucket size and bf16 gradients.
  $BIN train $GPT2 --set run.dir=$OUT/gpt2c_1 > $OUT/gpt2c_1.log 2>&1
  echo "gpt2 1 GPU rc=$?: $(step_line $OUT/gpt2c_1.log)"
  for v in "NCCL_DEBUG=WARN bucket_mb=25" "NCCL_MAX_CTAS=2 bucket_mb=25" "NCCL_MAX_CTAS=4 bucket_mb=25" \
           "NCCL_MAX_CTAS=8 bucket_mb=25" "NCCL_MAX_CTAS=4 bucket_mb=100" "NCCL_DEBUG=WARN bucket_mb=100" \
           "NCCL_DEBUG=WARN bf16_compress=true" "NCCL_MAX_CTAS=4 bf16_compress=true"; do
    read -r ctas opt <<< "$v"; tag=$(echo "$v" | tr ' =' '__')
    env $ctas $BIN launch --nproc-per-node gpu $GPT2 --set dist.$opt --set run.dir=$OUT/gpt2c_$tag > $OUT/gpt2c_$tag.log 2>&1
    echo "gpt2 2 GPU $v rc=$?: $(step_line $OUT/gpt2c_$tag.log)"
  done
fi

if has zero1 && [[ $NGPU -ge 2 ]]; then
  for z in false true; do
    $BIN launch --nproc-per-node gpu $GPT2 --set dist.zero1=$z --set run.dir=$OUT/gpt2_zero1_$z > $OUT/gpt2_zero1_$z.log 2>&1
    echo "gpt2 2 GPU zero1=$z rc=$?: $(step_line $OUT/gpt2_zero1_$z.log)"
    grep -hE "optimizer state|peak" $OUT/gpt2_zero1_$z.log | tail -2 | sed 's/.*\] //'
  done
fi

if has hf; then
  # `dtrain ckpt export --format hf` loaded by transformers: logits against dtrain's forward of the same weights.
  DTRAIN_ARGS="--set train.device=cuda --set train.precision=bf16" bash bench/hf_export_check.sh build-dev $OUT/hf \
    > $OUT/hf.log 2>&1
  echo "hf export check rc=$?: $(tail -1 $OUT/hf.log)"
fi

if has telemetry; then
  # GPU telemetry (NVML) in metrics.jsonl next to nvidia-smi sampled during the same run, then an under-used GPU:
  # the MLP's tiny steps with one reader thread keep the H200 50-76% busy, under an 80% threshold for over 1 s,
  # which must be warned about once.
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv,noheader,nounits -lms 500 \
    > $OUT/smi.csv 2>&1 & smi=$!
  $BIN train $GPT2 --set train.max_steps=200 --set run.dir=$OUT/gpt2_tel > $OUT/gpt2_tel.log 2>&1
  echo "telemetry gpt2 rc=$?: $(step_line $OUT/gpt2_tel.log)"
  kill $smi 2>/dev/null
  python3 - $OUT/gpt2_tel/metrics.jsonl $OUT/smi.csv <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l]
smi = [l.split(", ") for l in open(sys.argv[2]) if l.count(",") == 3]
util = [float(r[1]) for r in smi]; mem = [float(r[2]) for r in smi]
busy = [u for u in util if u > 0]
print("dtrain metrics.jsonl: gpu_util_pct per interval", [round(r.get("gpu_util_pct", -1)) for r in recs],
      "gpu_mem_used_mib", [round(r.get("gpu_mem_used_mib", -1)) for r in recs])
print("nvidia-smi (500 ms): %d samples, util while busy mean %.1f%% (max %.0f), memory used max %.0f MiB"
      % (len(util), sum(busy) / max(1, len(busy)), max(util or [0]), max(mem or [0])))
PY
  $BIN train configs/fashion_mnist_mlp.yaml --set train.device=cuda --set data.workers=1 --set train.epochs=10 \
    --set train.eval=false --set run.gpu_idle_util_pct=80 --set run.gpu_idle_s=1 --set run.dir=$OUT/mlp_idle > $OUT/mlp_idle.log 2>&1
  echo "idle GPU run rc=$?: $(grep -c 'paying for an idle GPU' $OUT/mlp_idle.log) idle warning(s):"
  grep -m1 'paying for an idle GPU' $OUT/mlp_idle.log | sed 's/.*\] //'
  grep -m2 'gpu [0-9]*%' $OUT/mlp_idle.log | sed 's/.*\] //'
fi

if has idleexit; then
  # --idle-exit on a GPU held idle on purpose: the MLP's input pipeline (one reader thread, one batch of prefetch) and
  # the trainer share CPU core 0 with a busy loop, so the GPU waits for the host most of the time. Under 50% busy for
  # 3 s, the job must say so, checkpoint and exit 75; the same command without the flag (and without the busy loop)
  # must resume from that checkpoint and finish.
  idle_run() {
    taskset -c 0 $BIN launch --nproc-per-node 1 configs/fashion_mnist_mlp.yaml --set train.device=cuda \
      --set data.workers=1 --set data.prefetch=1 --set train.epochs=300 --set train.eval=false \
      --set run.gpu_idle_util_pct=50 --set run.gpu_idle_s=3 --set train.log_every=2000 \
      --set run.dir=$OUT/mlp_idle_exit "$@"
  }
  taskset -c 0 sh -c 'while :; do :; done' & hog=$!
  nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 500 > $OUT/idle_smi.csv 2>&1 &
  smi=$!
  idle_run --idle-exit > $OUT/idle_exit.log 2>&1
  echo "idle-exit run rc=$? (expected 75)"
  kill $hog $smi
  grep -m1 'paying for an idle GPU' $OUT/idle_exit.log | sed 's/.*\] //'
  grep -m1 'checkpoint of step' $OUT/idle_exit.log | sed 's/.*\] //'
  grep -m3 'gpu [0-9]*%' $OUT/idle_exit.log | sed 's/.*\] //' | cut -c1-220
  echo "nvidia-smi util during it: $(cut -d, -f2 $OUT/idle_smi.csv | tr -d ' ' | tr '\n' ' ')"
  ls $OUT/mlp_idle_exit/checkpoints | tr '\n' ' '; echo
  idle_run > $OUT/idle_resume.log 2>&1
  echo "resume without --idle-exit rc=$? (expected 0): $(grep -m1 'resumed from' $OUT/idle_resume.log | sed 's/.*\] //')"
  step_line $OUT/idle_resume.log | cut -c1-200
fi

if has prometheus; then
  # The Prometheus endpoint on GPUs: GPT-2 on every GPU (at most 2) with run.prometheus_port; /metrics is scraped
  # every second (what a Prometheus server does) while nvidia-smi samples the same GPUs; the GPU series of the
  # node's endpoint (one per GPU, labelled gpu/rank) are set side by side with nvidia-smi's.
  n=$(( NGPU < 2 ? NGPU : 2 ))
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > $OUT/prom_smi.csv 2>&1 &
  smi=$!
  $BIN launch --nproc-per-node $n $GPT2 --set train.max_steps=300 --set train.log_every=10 \
    --set run.prometheus_port=9431 --set run.dir=$OUT/gpt2_prom > $OUT/gpt2_prom.log 2>&1 & job=$!
  mkdir -p $OUT/prom_scrapes; i=0
  while kill -0 $job 2>/dev/null; do
    python3 -c "import sys, urllib.request as u; sys.stdout.write(u.urlopen('http://127.0.0.1:9431/metrics', timeout=2).read().decode())" \
      > $OUT/prom_scrapes/$i.txt 2>/dev/null; i=$((i + 1)); sleep 1
  done
  wait $job; echo "prometheus gpt2 on $n GPU(s) rc=$?: $(step_line $OUT/gpt2_prom.log); $i scrapes"
  kill $smi 2>/dev/null
  python3 - $OUT/prom_scrapes $OUT/prom_smi.csv <<'PY'
import glob, re, sys
gpu = {}  # (gpu, rank) -> [util per scrape]
steps = []
for f in sorted(glob.glob(sys.argv[1] + "/*.txt"), key=lambda p: int(re.findall(r"(\d+)\.txt", p)[0])):
    text = open(f).read()
    for m in re.finditer(r'^dtrain_gpu_utilization_percent\{gpu="(\d+)",host="[^"]*",rank="(\d+)"\} (\S+)', text, re.M):
        gpu.setdefault((m[1], m[2]), []).append(float(m[3]))
    m = re.search(r"^dtrain_step_seconds\{[^}]*\} (\S+)", text, re.M)
    if m: steps.append(float(m[1]))
print("endpoint: dtrain_step_seconds over the scrapes", [round(s * 1e3, 1) for s in steps[-5:]], "ms (last 5)")
for (g, r), u in sorted(gpu.items()):
    busy = [x for x in u if x > 0]
    print("endpoint: gpu %s (rank %s) utilization mean %.1f%% over %d scrapes" % (g, r, sum(busy) / max(1, len(busy)), len(u)))
smi = [l.split(", ") for l in open(sys.argv[2]) if l.count(",") == 2]
for g in sorted({r[0] for r in smi}):
    busy = [float(r[1]) for r in smi if r[0] == g and float(r[1]) > 0]
    print("nvidia-smi: gpu %s utilization while busy mean %.1f%% over %d samples" % (g, sum(busy) / max(1, len(busy)), len(busy)))
PY
fi

if has llama; then
  for shape in ${LLAMA_SHAPES:-smollm2_360m llama3_1b}; do
    for prec in ${LLAMA_PRECISIONS:-bf16}; do  # bf16, fp8 (its auto layers) or fp8:LAYERS (model.llama.fp8_layers)
      p=${prec%%:*}; layers=""; [[ $prec == *:* ]] && layers="--set model.llama.fp8_layers=${prec#*:}"
      n=llama_${shape}_${prec/:/_}
      $BIN train configs/$shape.yaml --set data.dataset=synthetic_tokens --set data.batch_size=16 \
        --set train.grad_accum_steps=1 --set train.max_steps=${LLAMA_STEPS:-60} --set train.log_every=20 \
        --set schedule.warmup_steps=10 --set checkpoint.enabled=false --set train.eval=false \
        --set train.precision=$p $layers --set run.dir=$OUT/$n > $OUT/$n.log 2>&1
      echo "llama $shape dtrain $prec rc=$?: $(step_line $OUT/$n.log)"
      grep -hE "CUDA graph|attention:|peak|precision fp8" $OUT/$n.log | head -4 | sed 's/.*\] //' | cut -c1-200
    done
    # impl:mode[:float8 recipe] (torchao, bench/torchao_float8.py)
    for im in ${LLAMA_TORCH:-hand:default hand:reduce-overhead hf:default hf:reduce-overhead}; do
      IFS=: read -r impl mode f8 <<< "$im"
      n=llama_torch_${shape}_${im//:/_}
      python3 bench/llama_torch.py --shape $shape --impl $impl --compile --mode $mode --float8 ${f8:-none} \
        --json $OUT/$n.json > $OUT/$n.log 2>&1
      echo "llama $shape torch ${im} rc=$?: $(tail -1 $OUT/$n.log)"
    done
  done
fi

if has llamaprobe; then
  shape=${PROBE_SHAPE:-llama3_1b}
  if command -v ncu >/dev/null; then
    timeout ${PROBE_TIMEOUT:-280} ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw --nvtx \
      --nvtx-include "train_step/" --log-file $OUT/ncu_$shape.csv $BIN train configs/$shape.yaml \
      --set data.dataset=synthetic_tokens --set train.max_steps=2 --set schedule.warmup_steps=0 \
      --set checkpoint.enabled=false --set run.dir=$OUT/${shape}_prof_run > $OUT/ncu_${shape}_run.log 2>&1
    echo "ncu $shape rc=$?"; python3 bench/kernel_profile.py $OUT/ncu_$shape.csv 2 | tee $OUT/kern_$shape.txt | head -40 | cut -c1-170
  else
    echo "no ncu on this machine"
  fi
  python3 bench/llama_torch.py --shape $shape --impl hand --compile --steps 10 --profile > $OUT/torch_prof_$shape.log 2>&1
  echo "torch.compile $shape profile rc=$?"; grep -E "Name|^ *[a-zA-Z_].*%" $OUT/torch_prof_$shape.log | head -34 | cut -c1-170
fi

if has fp8probe; then
  # Where an fp8 step goes: every kernel of 2 GPT-2 steps at each of $PROBE_SIZES (train.precision fp8, the auto
  # layers) timed by Nsight Compute, summed by name.
  for size in ${PROBE_SIZES:-1.5b}; do
    timeout ${PROBE_TIMEOUT:-280} ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw --nvtx \
      --nvtx-include "train_step/" --log-file $OUT/ncu_fp8_$size.csv $BIN train $GPT2 $(gpt2_shape $size) \
      --set data.batch_size=16 --set train.precision=${PROBE_PRECISION:-fp8} --set train.max_steps=2 \
      --set schedule.warmup_steps=0 --set run.dir=$OUT/fp8probe_$size > $OUT/ncu_fp8_${size}_run.log 2>&1
    echo "ncu gpt2 $size rc=$?"; python3 bench/kernel_profile.py $OUT/ncu_fp8_$size.csv 2 | tee $OUT/kern_fp8_$size.txt | head -40 | cut -c1-170
  done
fi

if has llamaloss; then
  L=/tmp/llamaloss; rm -rf $L; mkdir -p $L
  python3 - $L/hf <<'PY' > $OUT/llamaloss_init.log 2>&1
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(1234)
cfg = LlamaConfig(hidden_size=960, num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5,
                  intermediate_size=2560, vocab_size=49152, rope_theta=100000.0, max_position_embeddings=8192,
                  rms_norm_eps=1e-5, tie_word_embeddings=True, torch_dtype=torch.float32)
LlamaForCausalLM(cfg).save_pretrained(sys.argv[1], safe_serialization=True)
PY
  echo "llamaloss init (transformers save_pretrained) rc=$?"
  $BIN data convert-text --out $L/shards --seq-len 1024 ${TEXT:-.device-carry/text/corpus.txt} > $OUT/llamaloss_data.log 2>&1
  echo "convert-text rc=$?: $(tail -1 $OUT/llamaloss_data.log)"
  $BIN train configs/smollm2_360m.yaml --set data.dataset=shards --set data.train_shards=$L/shards --set data.shuffle=false \
    --set data.batch_size=16 --set train.grad_accum_steps=1 --set schedule.kind=constant --set schedule.warmup_steps=0 \
    --set checkpoint.enabled=false --set train.eval=false --set train.log_every=1 --set train.max_steps=${LOSS_STEPS:-200} \
    --set optim.lr=3e-4 --set model.init_from=hf:$L/hf --set run.dir=$OUT/llamaloss_dtrain > $OUT/llamaloss_dtrain.log 2>&1
  echo "dtrain rc=$?: $(step_line $OUT/llamaloss_dtrain.log)"
  # $LLAMALOSS_TORCH: NAME[:IMPL[:FLAGS...]] (FLAGS: llama_torch.py flags joined by commas, e.g.
  # hand_bf16res:hand:--residual,bf16); default the hand-written model and transformers' (NAME = IMPL).
  names=()
  for r in ${LLAMALOSS_TORCH:-hand hf}; do
    IFS=: read -r name impl flags <<< "$r"
    names+=($name)
    python3 bench/llama_torch.py --shape smollm2_360m --impl ${impl:-$name} ${flags//,/ } --init $L/hf --tokens ${TEXT:-.device-carry/text/corpus.txt} \
      --losses $OUT/llamaloss_torch_$name.json --steps ${LOSS_STEPS:-200} --warmup 0 --lr 3e-4 > $OUT/llamaloss_torch_$name.log 2>&1
    echo "torch $name rc=$?: $(tail -1 $OUT/llamaloss_torch_$name.log)"
  done
  python3 bench/plot_losses.py $OUT/llamaloss_dtrain/metrics.jsonl $OUT/llamaloss_torch_${names[0]}.json $FINAL_OUT/llama_loss_curves.png "SmolLM2-360M shape"
  # Every pair (dtrain and each PyTorch run): mean and max |dloss| over the last 50 steps.
  python3 - $OUT/llamaloss_dtrain/metrics.jsonl "${names[@]/#/$OUT/llamaloss_torch_}" <<'PY'
import itertools, json, sys
runs = {"dtrain": [r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "train" and "loss" in r]}
for f in sys.argv[2:]:
    runs[f.rsplit("llamaloss_torch_", 1)[1]] = json.load(open(f + ".json"))
for (na, a), (nb, b) in itertools.combinations(runs.items(), 2):
    d = [abs(x - y) for x, y in zip(a, b)][-50:]
    print(json.dumps({"pair": f"{na} vs {nb}", "mean_abs_diff_last50": sum(d) / len(d), "max": max(d),
                      "final": [a[-1], b[-1]]}))
PY
fi

if has tb; then
  run=$(ls -d $OUT/mlp_gpu $OUT/gpt2_1 2>/dev/null | head -1)
  [[ -n $run ]] && python3 tests/tools/read_tensorboard.py $run > $OUT/tb.log 2>&1; echo "tensorboard read-back rc=$?: $(tail -3 $OUT/tb.log | tr '\n' ' ')"
fi

if has restore; then
  for t in train_restore_sink_test checkpoint_chunked_read_test checkpoint_checkpoint_test; do
    build-dev/tests/$t > $OUT/$t.log 2>&1
    echo "$t rc=$? ok=$(grep -c '\[       OK' $OUT/$t.log) skipped=$(grep -c '\[  SKIPPED \]' $OUT/$t.log)"
    grep -E "^\[  FAILED|Failure" $OUT/$t.log | head -8
  done
  echo "--- resume of GPT-2 124M through the trainer"
  REPS=${REPS:-3} OUT=$OUT/restore_trainer bench/ckpt_restore_bench.sh build-dev 2>&1 | tee $OUT/restore_trainer.log
  for th in ${RESTORE_THREADS:-4}; do
    echo "--- ckpt_io_bench load-device, $th threads"
    DT_BENCH_THREADS=$th LOAD=load-device REPS=${REPS:-3} bench/ckpt_local_bench.sh build-dev 2>&1 | tee $OUT/restore_local_$th.log
  done
fi
