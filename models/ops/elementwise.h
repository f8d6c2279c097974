#pragma once
// Shared argument checks and device/dtype dispatch of the elementwise ops (relu, gelu): each op
// supplies its CPU reference for f32 and f64 and its CUDA launcher (f32). Internal to models/ops.

#include <cstdint>

#include "runtime/core/device_context.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace dtrain::ops::detail {

// A CUDA launcher's address in CUDA builds, nullptr otherwise (the symbol does not exist there).
#if DT_HAVE_CUDA
#define DT_CUDA_FN(f) (f)
#else
#define DT_CUDA_FN(f) nullptr
#endif

struct UnaryOp {  // y = f(x)
  const char* name;
  void (*cpu_f32)(float*, const float*, int64_t);
  void (*cpu_f64)(double*, const double*, int64_t);
  Status (*cuda_f32)(float*, const float*, int64_t, cudaStream_t);
};

struct BinaryOp {  // out = f(a, b), e.g. dx = f'(x) * dy
  const char* name;
  void (*cpu_f32)(float*, const float*, const float*, int64_t);
  void (*cpu_f64)(double*, const double*, const double*, int64_t);
  Status (*cuda_f32)(float*, const float*, const float*, int64_t, cudaStream_t);
};

// Checks that x and *y have one shape and dtype on ctx's device (CPU f32/f64, CUDA f32), then runs.
Status RunUnary(DeviceContext& ctx, const UnaryOp& op, const Tensor& x, Tensor* y);
Status RunBinary(DeviceContext& ctx, const BinaryOp& op, const Tensor& a, const Tensor& b, Tensor* out);

}  // namespace dtrain::ops::detail
