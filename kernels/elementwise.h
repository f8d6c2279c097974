#pragma once
// Elementwise ops over flat tensors of any shape:
//   Add:  out = a + b            CPU f32/f64; CUDA f32, bf16 and f16 (16-bit summed in fp32, rounded once). `out`
//                                may alias `a` or `b` (in-place residual adds).
//   Cast: out = convert(in)      CUDA f32 -> bf16 / f16 (round-to-nearest-even, NaN stays NaN: the rounding of
//                                core/bf16.h; f16 overflows to +-inf past 65504) and bf16 / f16 -> f32 (exact);
//                                the CPU reference f32 <-> bf16 (kernels/bf16_round.h: the same bits but a NaN's
//                                payload); equal dtypes copy. Same numel, any shapes.
// bf16 and f16 are the GPU's activation types (on the CPU only Cast takes bf16): they cross the raw-pointer API as
// uint16_t (the raw bits). CUDA launchers
// use 128-bit loads when every pointer is 16-byte aligned and are queued on `stream`.
//
// Also the shared argument checks and device/dtype dispatch of the unary/binary elementwise ops (relu, gelu):
// each op supplies its CPU reference for f32 and f64 and its CUDA launcher (f32). Internal to kernels.

#include <cstdint>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

template <typename T>
void AddCpu(T* out, const T* a, const T* b, int64_t n);

// CUDA builds only.
Status AddCuda(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
Status AddCudaBf16(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n, cudaStream_t stream);
Status CastF32ToBf16Cuda(uint16_t* out, const float* in, int64_t n, cudaStream_t stream);
Status CastBf16ToF32Cuda(float* out, const uint16_t* in, int64_t n, cudaStream_t stream);
Status AddCudaF16(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n, cudaStream_t stream);
Status CastF32ToF16Cuda(uint16_t* out, const float* in, int64_t n, cudaStream_t stream);
Status CastF16ToF32Cuda(float* out, const uint16_t* in, int64_t n, cudaStream_t stream);

// a, b, out: one shape and dtype on ctx's device.
Status Add(DeviceContext& ctx, const Tensor& a, const Tensor& b, Tensor* out);
// in, out: same numel on ctx's device; f32 <-> bf16, on CUDA also f32 <-> f16, or equal dtypes (a copy).
Status Cast(DeviceContext& ctx, const Tensor& in, Tensor* out);

}  // namespace dtrain::ops

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

// a and b match out in shape and dtype, all on ctx's device (any dtype: callers check which they support).
Status CheckSameShapeDtype(const DeviceContext& ctx, const char* op, const Tensor& a, const Tensor& b,
                           const Tensor& out);

// Checks that x and *y have one shape and dtype on ctx's device (CPU f32/f64, CUDA f32), then runs.
Status RunUnary(DeviceContext& ctx, const UnaryOp& op, const Tensor& x, Tensor* y);
Status RunBinary(DeviceContext& ctx, const BinaryOp& op, const Tensor& a, const Tensor& b, Tensor* out);

}  // namespace dtrain::ops::detail
