// RoPE kernels, f32, bf16 and fp16 (fp32 math, f32 table), in place on the q and k heads of a fused qkv. A bandwidth-
// bound pass: grid (item blocks, token blocks), thread x of a block takes V pairs (i, i + hs/2) of one q or k head of
// the tokens blockIdx.y, blockIdx.y + gridDim.y, ... (V-wide, 128-bit when hs/2 % V == 0 and the pointers are
// aligned), with the table's V cos and sin values at the token's position (f32, L2-resident: T x hs/2 x 8 bytes).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/rope.h"

namespace dtrain::ops {

namespace {

using detail::LoadF32;
using detail::LoadV;
using detail::StoreV;

constexpr int kThreads = 256;

// qkv: `tokens` = B * T rows of `row_len` elements, the NH + NKV = `heads` rotated heads first. `sign` = -1 rotates
// by -angle (the backward). Each element is read, then written by the same thread: in place is safe.
template <int V, typename T>
__global__ void RopeKernel(T* qkv, const float* cos, const float* sin, int64_t tokens, int64_t t, int64_t row_len,
                           int heads, int head_size, float sign) {
  const int half = head_size / 2, vecs = half / V;
  const int item = blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= heads * vecs) return;
  const int head = item / vecs, i = (item - head * vecs) * V;
  for (int64_t token = blockIdx.y; token < tokens; token += gridDim.y) {
    const int64_t pos = token % t;
    T* x = qkv + token * row_len + head * head_size + i;
    float a[V], b[V], c[V], s[V];
    LoadV<V>(x, a);
    LoadV<V>(x + half, b);
    LoadF32<V>(cos + pos * half + i, c);
    LoadF32<V>(sin + pos * half + i, s);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float sk = sign * s[k], ak = a[k];
      a[k] = ak * c[k] - b[k] * sk;
      b[k] = b[k] * c[k] + ak * sk;
    }
    StoreV<V>(x, a);
    StoreV<V>(x + half, b);
  }
}

template <typename T>
Status Launch(T* qkv, const float* cos, const float* sin, int64_t b, int64_t t, int64_t n_head, int64_t n_kv_head,
              int64_t head_size, bool backward, cudaStream_t stream) {
  const int64_t tokens = b * t;
  if (tokens == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  const int64_t half = head_size / 2, heads = n_head + n_kv_head, row_len = (n_head + 2 * n_kv_head) * head_size;
  // 128-bit: x at multiples of V elements (16 bytes) and the table's V floats at multiples of 16 bytes.
  const bool vec = detail::VecWidth<T>(half, {qkv}) == kV && detail::Aligned16({cos, sin});
  const int v = vec ? kV : 1;
  // A token's items split evenly over the fewest blocks of at most kThreads threads (whole warps).
  const int64_t items = heads * half / v;
  DT_CHECK_ARG(items < (int64_t{1} << 31), "RopeCuda: " << heads << " heads of " << head_size << " is too many");
  const int64_t item_blocks = (items + kThreads - 1) / kThreads;
  const int64_t threads = ((items + item_blocks - 1) / item_blocks + 31) / 32 * 32;
  const dim3 grid(static_cast<unsigned>(item_blocks), static_cast<unsigned>(std::min<int64_t>(tokens, 65535)));
  const float sign = backward ? -1.f : 1.f;
  if (vec) {
    RopeKernel<kV><<<grid, static_cast<unsigned>(threads), 0, stream>>>(
        qkv, cos, sin, tokens, t, row_len, static_cast<int>(heads), static_cast<int>(head_size), sign);
  } else {
    RopeKernel<1><<<grid, static_cast<unsigned>(threads), 0, stream>>>(
        qkv, cos, sin, tokens, t, row_len, static_cast<int>(heads), static_cast<int>(head_size), sign);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

Status RopeCuda(float* qkv, const float* cos, const float* sin, int64_t b, int64_t t, int64_t n_head, int64_t n_kv_head,
                int64_t head_size, bool backward, cudaStream_t stream) {
  DT_NVTX_FN();
  return Launch(qkv, cos, sin, b, t, n_head, n_kv_head, head_size, backward, stream);
}

Status RopeCudaBf16(uint16_t* qkv, const float* cos, const float* sin, int64_t b, int64_t t, int64_t n_head,
                    int64_t n_kv_head, int64_t head_size, bool backward, cudaStream_t stream) {
  DT_NVTX_FN();
  return Launch(detail::AsBf16(qkv), cos, sin, b, t, n_head, n_kv_head, head_size, backward, stream);
}

Status RopeCudaF16(uint16_t* qkv, const float* cos, const float* sin, int64_t b, int64_t t, int64_t n_head,
                   int64_t n_kv_head, int64_t head_size, bool backward, cudaStream_t stream) {
  DT_NVTX_FN();
  return Launch(detail::AsF16(qkv), cos, sin, b, t, n_head, n_kv_head, head_size, backward, stream);
}

}  // namespace dtrain::ops
