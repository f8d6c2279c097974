#pragma once
// OptimizerOptions: the optimizer's hyper-parameters, as the config's `optim` section gives them
// (runtime/optim/parameter_updater.h: OptimizerOptionsFromConfig). Which fields an algorithm reads, and the
// ranges it accepts, are stated in the algorithm's file (runtime/optim/*_algorithm.cc, listed in
// optim_algorithm.cc); lr, weight_decay and grad_clip are checked for every algorithm.

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace dtrain::runtime {

struct OptimizerOptions {
  std::string name = "adamw";  // a registered algorithm (FindOptimAlgorithm): sgd | adamw | ...
  double lr = 1e-3;            // the base LR; Step() takes the scheduled LR of each step
  double momentum = 0.9;       // sgd, in [0, 1]
  double beta1 = 0.9;          // moment coefficients, in [0, 1): adamw's, or those of an algorithm whose file
  double beta2 = 0.999;        // says it reads them
  double eps = 1e-8;           // adamw, >= 0
  double weight_decay = 0.0;   // >= 0; sgd: added to the gradient (coupled); adamw: p *= 1 - lr * wd (decoupled)
  bool nesterov = false;       // sgd; needs momentum > 0
  double grad_clip = 0.0;      // max global L2 norm of the gradient; 0 = off
  // Storage of the algorithm's state tensors (optim.state_dtype): kF32, or kBF16 for an algorithm whose spec has
  // bf16_storage (read into f32 for the math, stored stochastically rounded: kernels/optim_update.h).
  DType state_dtype = DType::kF32;
  // The params' dtype (train.master_weights): kF32, or kBF16 (bf16 master weights, stochastically rounded updates;
  // bf16_storage algorithms only).
  DType param_dtype = DType::kF32;
  // train.master_weights split (param_dtype kBF16; algorithms whose spec has split_masters): the params are the high
  // halves of fp32 masters whose low 16 bits the optimizer keeps as one more state tensor (master_low: bf16 storage of
  // raw bits, after the algorithm's state, no checkpoint file), and the update is the fp32 update of the exact master
  // (kernels/optim_update.h).
  bool split_masters = false;
  // The grads' dtype (train.gradients): kF32, or kBF16 (read exactly into the f32 math; bf16_storage algorithms only).
  DType grad_dtype = DType::kF32;
  // optim.offload cpu: the state lives in page-locked host memory and streams through the GPU for each update
  // (runtime/optim/offloaded_state.h), in chunks of offload_chunk elements (0: its default), except the part
  // offload_keep_bytes of device memory hold (optim.offload_keep_gib), which stays on the device.
  bool offload = false;
  int64_t offload_chunk = 0;
  int64_t offload_keep_bytes = 0;
  uint64_t seed = 0;  // of the stochastic rounding (train.seed): with the update number it fixes every rounding bit
};

}  // namespace dtrain::runtime
