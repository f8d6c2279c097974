#pragma once
// The optimizer-algorithm seam. An algorithm (SGD, AdamW, ...) is one registered record, OptimAlgorithmSpec (its
// optim.name, the names of its state tensors, a factory), and one implementation of OptimAlgorithm: the host part
// of a step (this update's constants) and the fused update of one range of the flat parameter buffer. Optimizer
// (replicated: the whole buffer) and Zero1Optimizer (ZeRO-1: each range this rank owns) hold an OptimAlgorithm and
// call it the same way, with state tensors they allocate from the spec's names; neither asks which algorithm it
// holds, and checkpoints, the trainer and ParameterUpdater know only the state names.
//
// Adding an algorithm:
//   1. its fused update, kernels/<name>_update.{h,cc,cu} (CPU reference, CUDA kernel that can read its constants
//      from a staged device buffer; the checks of ops::CheckUpdateTensors);
//   2. runtime/optim/<name>_algorithm.cc: the OptimAlgorithm and `const OptimAlgorithmSpec& <Name>Algorithm()`;
//   3. its line in the list in runtime/optim/optim_algorithm.cc;
//   4. its name in optim.name's choices, and which optim fields it reads, in proto/config.proto.
//
// Per step: Prepare(lr, t, &staged) once on the host, then Update(...) once per range (the same constants for every
// range: the update is elementwise, so any cut of the buffer into ranges gives the same result). The per-step
// constants reach the CUDA kernels either as kernel arguments (staged == nullptr) or from device memory that the
// caller filled with Prepare's *staged (runtime/optim/staged_args.h), which a replayed CUDA graph needs.
//
// Thread-safety: specs are immutable; an OptimAlgorithm is used by one optimizer from one thread.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/optim_update.h"
#include "runtime/optim/optimizer_options.h"

namespace dtrain::runtime {

// The kernel form of one update's constants (the algorithm's f32 kernel-args struct, as bytes), for a staging
// buffer of ops::kStagedArgsBytes.
struct StagedConstants {
  alignas(16) unsigned char bytes[ops::kStagedArgsBytes];
  size_t size = 0;

  template <typename Args>
  void Set(const Args& args) {
    static_assert(sizeof(Args) <= ops::kStagedArgsBytes, "kernel args must fit a StagedArgs buffer");
    static_assert(std::is_trivially_copyable_v<Args>, "kernel args are copied as bytes");
    std::memcpy(bytes, &args, sizeof(Args));
    size = sizeof(Args);
  }
};

class OptimAlgorithm {
 public:
  virtual ~OptimAlgorithm() = default;

  // The host part of update number `t` (>= 1; with a loss scaler it counts applied updates only) with the
  // scheduled `lr`: keeps this update's constants for Update and, when `staged` is non-null, writes their kernel
  // form there.
  virtual void Prepare(double lr, int64_t t, StagedConstants* staged) = 0;

  // The fused update of one range with the constants of the last Prepare. `params`, `grads` and `state` (one
  // tensor per spec state name, in order, then with split_masters the masters' low halves) are views of the same range:
  // same numel, on ctx's device; grads f32, params and state f32 or (bf16_storage algorithms) the options' param_dtype
  // / state_dtype; grads are not modified. `scale`, `skip` (nullable 1-element device tensors): the gradient multiplier
  // and the skip flag of kernels/optim_update.h. `staged` (nullable): a device buffer that holds Prepare's *staged by
  // the time the kernel runs; the CUDA kernel then reads its constants there (the CPU ignores it). Queued on
  // ctx.stream(). `offset`: the index in the whole flat buffer of the range's element 0 (bf16 storage draws its
  // stochastic rounding bits by that index, so a cut into ranges rounds as the whole buffer does; ignored otherwise).
  virtual Status Update(DeviceContext& ctx, Tensor* params, const Tensor& grads, const std::vector<Tensor*>& state,
                        const Tensor* scale, const Tensor* skip, const Tensor* staged, int64_t offset = 0) const = 0;
};

// The registered record of one algorithm.
struct OptimAlgorithmSpec {
  std::string name;  // optim.name
  // Its state tensors, each as large as the parameters and zero at the start. These are the checkpoint's state
  // files (name + ".bin", PyTorch's names): renaming one stops old checkpoints from resuming.
  std::vector<std::string> state_names;
  // Checks the fields of `opts` the algorithm reads (InvalidArgument naming them) and makes it.
  Status (*create)(const OptimizerOptions& opts, std::unique_ptr<OptimAlgorithm>* out);
  // Its update takes bf16 storage (OptimizerOptions::state_dtype / param_dtype kBF16): state tensors and params of
  // either dtype, f32 math, stochastic rounding. Without it both must be f32 (CreateOptimAlgorithm refuses).
  bool bf16_storage = false;
  // Its update takes split masters (OptimizerOptions::split_masters): the state tensors Update gets end with the
  // masters' low halves. Without it CreateOptimAlgorithm refuses them.
  bool split_masters = false;
};

// The dtypes of the state tensors an optimizer with `opts` keeps for `spec`: its state names' (opts.state_dtype),
// then the split masters' low halves (kBF16 storage) with opts.split_masters.
std::vector<DType> OptimizerStateDTypes(const OptimAlgorithmSpec& spec, const OptimizerOptions& opts);
// The same from the counts a memory plan carries (runtime/train/memory_fit.cc): `state_tensors` of `state_dtype`,
// then with split_masters the low halves.
std::vector<DType> OptimizerStateDTypes(size_t state_tensors, DType state_dtype, bool split_masters);

// The spec registered as `name`, or nullptr.
const OptimAlgorithmSpec* FindOptimAlgorithm(const std::string& name);
// The registered names, in list order.
std::vector<std::string> OptimAlgorithmNames();
// Checks the fields every algorithm shares (lr, weight_decay, grad_clip, state_dtype and param_dtype: f32, or bf16
// for a bf16_storage algorithm), finds opts.name and makes the algorithm:
// *spec (never null on success) and *out. InvalidArgument for an unknown name or a bad hyper-parameter.
Status CreateOptimAlgorithm(const OptimizerOptions& opts, const OptimAlgorithmSpec** spec,
                            std::unique_ptr<OptimAlgorithm>* out);

}  // namespace dtrain::runtime
