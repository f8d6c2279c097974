// Embedding kernels. Forward gathers f32 table rows into f32, bf16 or fp16 rows. Backward is deterministic: the ids are
// stably sorted (CUB radix sort of (id, position) pairs), then one warp per distinct id sums its dout rows in
// increasing position order and adds the total to dtable once: no float atomics, bitwise reproducible. dtable is f32,
// or bf16 beside bf16 rows (bf16 gradients, train.gradients: the f32 total added to the widened entry, rounded once).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/embedding.h"

namespace dtrain::ops {

namespace {

using detail::FromF32;
using detail::LoadV;
using detail::StoreV;
using detail::ToF32;

constexpr int kThreads = 256;
constexpr size_t kAlign = 256;

// V consecutive elements of one output row per step (C % V == 0 keeps them in one row).
// TT: the table's type, f32 or bf16 (bf16 master weights: widened, then rounded back to the same bf16 value).
template <int V, typename T, typename TT>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* ids, const TT* table, int64_t n, int64_t v, int64_t c) {
  detail::GridStrideVec<V>(n * c, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const int64_t id = ids[i / c];
    float f[W];
    if (id >= 0 && id < v) {
      LoadV<W>(table + id * c + i % c, f);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) f[k] = NAN;
    }
    StoreV<W>(out + i, f);
  });
}

// Sort keys: the id, or v (sorted last, then skipped) for an id outside [0, v); values: the position.
__global__ void SortInputKernel(int32_t* keys, int32_t* positions, const int32_t* ids, int64_t n, int64_t v) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t id = ids[i];
    keys[i] = id >= 0 && id < v ? id : static_cast<int32_t>(v);
    positions[i] = static_cast<int32_t>(i);
  }
}

// One warp per sorted index i that starts a run of equal ids: lanes stride over the columns, each summing the
// run's dout rows in sorted (= position) order, then dtable[id] += total.
template <typename D, typename T>
__global__ void SegmentSumKernel(D* dtable, const int32_t* keys, const int32_t* positions, const T* dout, int64_t n,
                                 int64_t v, int64_t c) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= n) return;
  const int32_t id = keys[i];
  if (id == v || (i > 0 && keys[i - 1] == id)) return;
  int64_t end = i + 1;
  while (end < n && keys[end] == id) ++end;
  for (int64_t col = lane; col < c; col += 32) {
    float sum = 0.f;
    for (int64_t j = i; j < end; ++j) sum += ToF32(dout[positions[j] * c + col]);
    dtable[id * c + col] = FromF32<D>(ToF32(dtable[id * c + col]) + sum);
  }
}

size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

int EndBit(int64_t v) {  // bits that hold every key in [0, v]
  int bits = 1;
  while ((int64_t{1} << bits) <= v) ++bits;
  return bits;
}

template <typename T, typename TT>
Status LaunchForward(T* out, const int32_t* ids, const TT* table, int64_t n, int64_t v, int64_t c,
                     cudaStream_t stream) {
  if (n == 0 || c == 0) return Status::OK();
  // 8 elements per step: 16 bytes of bf16 / fp16 output, two 128-bit accesses of f32.
  if (c % 8 == 0 && detail::Aligned16({out, table})) {
    EmbeddingForwardKernel<8><<<detail::GridFor(n * c / 8, kThreads), kThreads, 0, stream>>>(out, ids, table, n, v, c);
  } else {
    EmbeddingForwardKernel<1><<<detail::GridFor(n * c, kThreads), kThreads, 0, stream>>>(out, ids, table, n, v, c);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename D, typename T>
Status LaunchBackward(D* dtable, const int32_t* ids, const T* dout, int64_t n, int64_t v, int64_t c, void* scratch,
                      size_t scratch_bytes, cudaStream_t stream) {
  if (n == 0 || c == 0) return Status::OK();
  size_t need = 0;
  DT_RETURN_IF_ERROR(EmbeddingBackwardScratchBytes(n, v, &need));
  DT_CHECK_ARG(scratch != nullptr && scratch_bytes >= need,
               "EmbeddingBackwardCuda: scratch of " << scratch_bytes << " bytes, need " << need);
  auto* base = static_cast<char*>(scratch);
  const size_t ids_bytes = AlignUp(static_cast<size_t>(n) * sizeof(int32_t));
  auto* keys_in = reinterpret_cast<int32_t*>(base);
  auto* keys = reinterpret_cast<int32_t*>(base + ids_bytes);
  auto* pos_in = reinterpret_cast<int32_t*>(base + 2 * ids_bytes);
  auto* pos = reinterpret_cast<int32_t*>(base + 3 * ids_bytes);
  void* temp = base + 4 * ids_bytes;
  size_t temp_bytes = need - 4 * ids_bytes;
  SortInputKernel<<<detail::GridFor(n, kThreads), kThreads, 0, stream>>>(keys_in, pos_in, ids, n, v);
  DT_CUDA_CHECK_LAUNCH();
  // Radix sort is stable: equal ids keep increasing positions, which fixes the summation order.
  DT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys, pos_in, pos, static_cast<int>(n), 0,
                                                EndBit(v), stream));
  constexpr int kWarps = kThreads / 32;
  SegmentSumKernel<<<static_cast<unsigned>((n + kWarps - 1) / kWarps), kThreads, 0, stream>>>(dtable, keys, pos, dout,
                                                                                              n, v, c);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

Status EmbeddingBackwardScratchBytes(int64_t n, int64_t v, size_t* bytes) {
  DT_CHECK_ARG(n >= 0 && n <= INT_MAX && v >= 0 && v < INT_MAX,
               "EmbeddingBackward: N=" << n << " ids and V=" << v << " rows must fit in int32");
  size_t temp = 0;
  DT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, EndBit(v)));
  *bytes = 4 * AlignUp(static_cast<size_t>(n) * sizeof(int32_t)) + AlignUp(temp);
  return Status::OK();
}

Status EmbeddingForwardCuda(float* out, const int32_t* ids, const float* table, int64_t n, int64_t v, int64_t c,
                            cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(out, ids, table, n, v, c, stream);
}

Status EmbeddingForwardCudaBf16(uint16_t* out, const int32_t* ids, const float* table, int64_t n, int64_t v, int64_t c,
                                cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsBf16(out), ids, table, n, v, c, stream);
}

Status EmbeddingBackwardCuda(float* dtable, const int32_t* ids, const float* dout, int64_t n, int64_t v, int64_t c,
                             void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dtable, ids, dout, n, v, c, scratch, scratch_bytes, stream);
}

Status EmbeddingBackwardCudaBf16(float* dtable, const int32_t* ids, const uint16_t* dout, int64_t n, int64_t v,
                                 int64_t c, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dtable, ids, detail::AsBf16(dout), n, v, c, scratch, scratch_bytes, stream);
}

Status EmbeddingBackwardCudaBf16Grad(uint16_t* dtable, const int32_t* ids, const uint16_t* dout, int64_t n, int64_t v,
                                     int64_t c, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsBf16(dtable), ids, detail::AsBf16(dout), n, v, c, scratch, scratch_bytes, stream);
}

Status EmbeddingForwardCudaBf16Table(uint16_t* out, const int32_t* ids, const uint16_t* table, int64_t n, int64_t v,
                                     int64_t c, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsBf16(out), ids, detail::AsBf16(table), n, v, c, stream);
}

Status EmbeddingForwardCudaF16(uint16_t* out, const int32_t* ids, const float* table, int64_t n, int64_t v, int64_t c,
                               cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsF16(out), ids, table, n, v, c, stream);
}

Status EmbeddingBackwardCudaF16(float* dtable, const int32_t* ids, const uint16_t* dout, int64_t n, int64_t v,
                                int64_t c, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dtable, ids, detail::AsF16(dout), n, v, c, scratch, scratch_bytes, stream);
}

}  // namespace dtrain::ops
