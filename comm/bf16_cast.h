#pragma once
// Device conversions between f32 and bf16 buffers (gradient compression for all-reduce).
// Host-only API; the kernels live in bf16_cast.cu, built only with DT_HAVE_CUDA.
// Both launchers are asynchronous: they enqueue one kernel on `stream` and check the launch.
// Rounding is round-to-nearest-even (matches core/bf16.h on the host).

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/status.h"

namespace dtrain::comm {

// out[i] = bf16(in[i]) for i < n; `out` holds n 16-bit values. n == 0 launches nothing.
Status LaunchF32ToBf16(const float* in, uint16_t* out, int64_t n, cudaStream_t stream);
// out[i] = float(in[i]) for i < n.
Status LaunchBf16ToF32(const uint16_t* in, float* out, int64_t n, cudaStream_t stream);

}  // namespace dtrain::comm
