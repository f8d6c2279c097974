#!/usr/bin/env bash
# The bf16 CNN killed mid-run and resumed from its checkpoint ends bit for bit where an uninterrupted run ends; then
# the same run through `dtrain launch`. GPU machine, repo root: OUT=/some/dir bash bench/cnn_resume_check.sh
# (builds build-dev/dtrain; Fashion-MNIST from /usr/share/datasets or .device-carry/fashion-mnist).
set -u
status=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
DATA=/usr/share/datasets/fashion-mnist
if [[ ! -f $DATA/train-images-idx3-ubyte.gz ]]; then mkdir -p $DATA && cp .device-carry/fashion-mnist/*.gz $DATA/; fi
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/build.log 2>&1 && ninja -C build-dev dtrain >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
B=build-dev/dtrain
C="configs/fashion_mnist_cnn.yaml --set train.device=cuda --set train.epochs=2 --set checkpoint.every_steps=300 --set train.log_every=300"
$B train $C --set run.dir=/tmp/a > $OUT/a.log 2>&1; echo "uninterrupted rc=$?"
DTRAIN_FAULT="step=500,action=kill" $B train $C --set run.dir=/tmp/b > $OUT/b1.log 2>&1; echo "killed at step 500 rc=$?"
$B train $C --set run.dir=/tmp/b > $OUT/b2.log 2>&1; echo "resumed rc=$?"
grep -hE "resum|restor" $OUT/b2.log | head -3 | sed 's/.*\] //'
if cmp /tmp/a/final.safetensors /tmp/b/final.safetensors; then echo "final.safetensors: BITWISE EQUAL"
else echo "final.safetensors: the resumed run DIFFERS from the uninterrupted one"; status=1; fi
grep -h "done:" $OUT/a.log $OUT/b2.log | sed 's/.*\] //'
$B launch --nproc-per-node gpu $C --set run.dir=/tmp/c > $OUT/c.log 2>&1; echo "dtrain launch rc=$?"
grep -hE "done:|eval \|" $OUT/c.log | tail -2 | sed 's/.*\] //'
exit $status
