#pragma once
// The argument check the row normalizations share (kernels/layernorm.h, kernels/rmsnorm.h): x [..., C] with C > 0,
// normalized over its last dim.

#include <initializer_list>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// x: f32/f64 on the CPU, f32/bf16/f16 on CUDA, on ctx's device. `x_like` tensors have x's shape and dtype,
// `param_like` ones shape [C] and `row_like` ones x.shape[:-1], both of x's dtype, or f32 when x is bf16/f16. A null
// `param_like` entry is skipped (a weight the caller checks apart); x_like and row_like entries must not be null.
// InvalidArgument naming `op` and the tensor otherwise.
Status CheckRowNormArgs(const DeviceContext& ctx, const char* op, const Tensor& x,
                        std::initializer_list<const Tensor*> x_like, std::initializer_list<const Tensor*> param_like,
                        std::initializer_list<const Tensor*> row_like);

}  // namespace dtrain::ops
