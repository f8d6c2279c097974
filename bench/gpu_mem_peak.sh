#!/usr/bin/env bash
# Runs a command while nvidia-smi samples the GPU's used memory every 100 ms, then prints the idle reading before the
# command and the largest one during it (MiB). One meter for both sides of a comparison: it sees everything a process
# holds on the device (CUDA context, cuBLAS/cuDNN workspaces, the caching allocator's reserve), where allocator
# counters (dtrain's `peak`, torch.cuda.max_memory_allocated) each count a different part of it.
# Usage (GPU machine, one GPU visible, nothing else on it): bench/gpu_mem_peak.sh CMD [ARGS...]
set -uo pipefail
command -v nvidia-smi >/dev/null || { echo "gpu_mem_peak: no nvidia-smi on this machine" >&2; exit 2; }
idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
log=$(mktemp)
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$log" &
smi=$!
"$@"
rc=$?
kill $smi 2>/dev/null
wait $smi 2>/dev/null
echo "gpu_mem_peak: $(sort -n "$log" | tail -1) MiB used at most, $idle MiB before (nvidia-smi every 100 ms; rc=$rc)"
rm -f "$log"
exit $rc
