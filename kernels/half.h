#pragma once
// The 16-bit floating types of mixed precision in kernels: bf16 and fp16 are CUDA-only activation types with
// fp32 math; every op that takes one takes the other through the same templated kernels (bf16_vec.cuh).

#include "core/dtype.h"

namespace dtrain::ops {

inline bool IsHalfFloat(DType t) { return t == DType::kBF16 || t == DType::kF16; }

}  // namespace dtrain::ops
