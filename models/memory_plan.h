#pragma once
// MemoryPlan: what one rank's training step will hold at its peak, per category, computed from the config before
// anything is allocated (`dtrain launch --dry-run` prints it, `dtrain train` logs it at start, and a run whose plan
// does not fit the GPU or train.memory_budget_gib is refused: runtime/train/memory_fit.h).
//
// A model fills the model's part through its ModelSpec::memory_plan (models/model_spec.h): parameters, gradients,
// the 16-bit working copy, activations under the run's activation-checkpointing policy, backward scratch, logits and
// loss buffers, and the transient workspaces its kernels take from the allocator. The runtime adds the optimizer's
// state (runtime/optim: state names x numel x state dtype; ZeRO-1 divides it by the world size), master copies,
// communication buffers and the input batches. Every figure counts bytes as the run's allocator hands them out
// (MemoryPlanInputs::Round: CPU 64-byte granules, CUDA's caching allocator 512 B / 2 MiB), tensor by tensor, so it
// compares with the allocator's peak_bytes_in_use.
//
// Plain data; thread-compatible.

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace dtrain::models {

// What the plan depends on beyond the config. Each dtype is one line for the precision options to set.
struct MemoryPlanInputs {
  bool cuda = false;  // the run's device: CUDA (the caching allocator's rounding, cuBLAS workspaces) or the CPU
  int64_t world_size = 1;
  bool zero1 = false;                     // dist.zero1: the optimizer state is sharded over world_size ranks
  DType master_dtype = DType::kF32;       // the parameters the optimizer updates (params())
  DType grad_dtype = DType::kF32;         // their gradients (train.gradients; a model with f32 grads plans f32)
  DType optim_state_dtype = DType::kF32;  // each optimizer state tensor's element type
  int64_t optim_state_tensors = 0;        // the optimizer's state tensors (its spec's state_names.size())
  bool split_masters = false;      // train.master_weights split: bf16 masters plus their low halves beside the state
  bool offload_state = false;      // optim.offload cpu: the state in host memory, a ring of chunks on the GPU
  int64_t offload_keep_bytes = 0;  // of which this many bytes' worth stays on the GPU (optim.offload_keep_gib)

  // Bytes the run's allocator hands out for a request of `bytes`.
  int64_t Round(int64_t bytes) const;
  // Round(numel x the size of dt).
  int64_t Bytes(int64_t numel, DType dt) const;
};

// One rank's planned peak, in bytes per category (each already rounded as the allocator rounds).
struct MemoryPlan {
  std::string activation_policy;  // the policy the activations are planned for ("selective", "full")
  int64_t num_params = 0;         // the model's parameter count (the optimizer state is planned from it)
  int64_t params = 0;             // the model's parameters in the master dtype (params())
  int64_t grads = 0;              // their gradients
  int64_t working_copy = 0;       // a 16-bit copy of the parameters for the GEMMs (bf16/fp16 runs)
  int64_t fp8 = 0;                // fp8 runs: the FP8 weights, kept activations and scratch (models/fp8_linears.h)
  int64_t master_copy = 0;        // an fp32 master copy kept beside 16-bit parameters (0 when params() are fp32)
  int64_t optimizer_state = 0;    // the optimizer's state on this rank
  int64_t activations = 0;        // what the forward keeps for backward, under activation_policy
  int64_t backward_scratch = 0;   // the backward's gradient buffers (activation-sized)
  int64_t logits = 0;             // logits / dlogits and the loss buffers
  int64_t workspace = 0;          // model buffers (RoPE tables ...), the largest transient kernel workspace, cuBLAS
  int64_t outside_allocator = 0;  // of workspace, what is cudaMalloc'ed outside the allocator (cuBLASLt's workspace)
  int64_t comm = 0;               // communication buffers (bf16 gradient wire, ZeRO-1 padding)
  int64_t data = 0;               // input batches on the device (the loader's buffers)
  int64_t host_state = 0;         // optim.offload cpu: the optimizer state in page-locked host memory (not in total())

  int64_t model_total() const;  // everything but optimizer_state, master_copy, comm and data
  int64_t total() const;
  int64_t allocator_total() const { return total() - outside_allocator; }  // what the allocator's peak should show
  // One line per non-zero category and the total, in GiB (MiB below 1 GiB), e.g. "  activations  12.3 GiB  (...)";
  // then host_state's line when it is non-zero.
  std::string Table() const;
};

// "1.23 GiB" / "45.6 MiB" / "789 KiB": a byte count for the plan's lines and messages.
std::string FormatBytes(int64_t bytes);

}  // namespace dtrain::models
