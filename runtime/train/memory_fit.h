#pragma once
// The run's memory plan and the memory check before the first step (issue 36).
//
// PlanRunMemory: one rank's plan (models/memory_plan.h): the model's part from its ModelSpec::memory_plan, plus the
// optimizer state (the optim.name algorithm's state tensors x parameters x state dtype; dist.zero1 divides it by the
// world size; optim.offload cpu moves it to host memory, leaving a ring of chunks on the GPU), the bf16 gradient wire
// (dist.bf16_compress), the input batches and the trainer's few scalars.
//
// FitMemory: the check `dtrain launch` runs before any rank starts (also with --dry-run, which prints the plan) and
// every worker runs again on its device. The limit is train.memory_budget_gib when set, else (CUDA runs) the GPU's
// memory less kCudaReservedBytes for the CUDA context, and never more than that GPU holds (a budget above it, e.g. a
// config written for a larger GPU, is capped to it and the limit says so); CPU runs without a budget are not checked.
// When the model's activation checkpointing is left open (ModelSpec::activation_policies) and a budget is set, the
// cheapest policy whose plan fits is written into *cfg, and then optim.offload auto is resolved into *cfg (none, or cpu
// with optim.offload_keep_gib set to what the limit leaves; see config.proto) — with auto, of the policies that fit the
// one of least estimated recompute + PCIe time (ActivationPolicy::recompute against the streamed state). A plan over
// the limit is InvalidArgument with the plan's table and each knob that would make it fit, with its figure (activation
// checkpointing, data.batch_size, the model's memory knobs (ModelSpec::memory_knobs: the chunked loss),
// optim.state_dtype bf16, optim.offload cpu, dist.zero1 on more GPUs). Thread-safe; reads the config only.

#include <cstdint>
#include <string>

#include "core/status.h"
#include "models/memory_plan.h"
#include "proto/config.pb.h"

namespace dtrain::runtime {

// What the CUDA context, cuBLAS/cuDNN handles and the driver hold outside the caching allocator, left out of a GPU's
// memory when there is no budget (a rough figure: ~0.5-1 GiB on an H100/H200).
constexpr int64_t kCudaReservedBytes = int64_t{1} << 30;

// The plan inputs the config implies for a run of `world_size` ranks on CUDA (`cuda`) or the CPU: dist.zero1, the
// optimizer's state count, fp32 masters and state. (The dtypes are the lines the precision options set.)
Status MemoryPlanInputsOf(const proto::Config& cfg, int world_size, bool cuda, models::MemoryPlanInputs* in);

// One rank's plan. Unimplemented when the model kind has no memory_plan; the model's errors as they are.
Status PlanRunMemory(const proto::Config& cfg, const models::MemoryPlanInputs& in, models::MemoryPlan* plan);

struct MemoryFit {
  bool planned = false;     // the model has a plan (else nothing below is set and nothing was checked)
  models::MemoryPlan plan;  // the run's plan (under the chosen policy)
  std::string chosen;       // the policy the budget picked; "" when none was picked
  int64_t limit = 0;        // the bytes the plan had to fit; 0 = not checked
  std::string limit_what;   // "train.memory_budget_gib 40", "the GPU's 139.7 GiB less 1 GiB for the CUDA context", or
                            // "train.memory_budget_gib 138.7, capped at the GPU's 79.2 GiB less 1 GiB for ..."
  std::string offload;      // what optim.offload auto was resolved to, for the plan's line; "" when not auto
};

// `gpu_bytes`: the memory of the GPU a rank uses (0 = unknown, or a CPU run). InvalidArgument when the plan does not
// fit (see above) or train.memory_budget_gib is set for a model (or a configuration: Unimplemented from its
// memory_plan, e.g. gpt2's fp8) without a plan; without a budget such a run is not checked (planned false).
Status FitMemory(proto::Config* cfg, int world_size, bool cuda, int64_t gpu_bytes, MemoryFit* out);

// optim.offload cpu keeps the optimizer state in page-locked host memory (plan.host_state per rank): InvalidArgument,
// naming the figures and the knobs, when `ranks` ranks' state exceeds `available` bytes (HostMemoryAvailable: the
// machine's MemAvailable), before any rank pins it — page-locked memory cannot be swapped, and the kernel's OOM
// killer ends a process that takes too much. OK when nothing is offloaded or `available` is 0 (unknown).
Status CheckHostMemory(const proto::Config& cfg, const models::MemoryPlan& plan, int ranks, int64_t available);
// /proc/meminfo's MemAvailable in bytes; 0 when it cannot be read.
int64_t HostMemoryAvailable();

// "memory plan: ... (policy ...)\n<table>": the lines `dtrain launch --dry-run` prints and `dtrain train` logs.
std::string DescribeMemoryFit(const MemoryFit& fit);

}  // namespace dtrain::runtime
