#pragma once
// Rotary position embedding (RoPE), Hugging Face's rotate_half convention (LlamaRotaryEmbedding /
// apply_rotary_pos_emb): within each head of size hs, element i pairs with i + hs/2 (i < hs/2), and at position t
//   out[i]        = x[i] * cos(t, i) - x[i + hs/2] * sin(t, i)
//   out[i + hs/2] = x[i + hs/2] * cos(t, i) + x[i] * sin(t, i),     angle(t, i) = t * inv_freq_i.
// The backward is the transpose rotation (sin -> -sin), which is also the inverse.
//
// Layout: applied IN PLACE to a fused projection qkv[B, T, (NH + 2 NKV) * hs] whose row (one token) is q (NH heads)
// | k (NKV heads) | v (NKV heads). q and k heads are rotated by the token's position t in 0..T-1 within its sequence
// (every sequence starts at 0); v is never touched. Grouped-query attention: NKV <= NH, any NKV >= 1.
//
// The table: cos, sin f32 [max_seq_len, hs/2], computed on the host in HF's fp32 order so that dtrain and
// transformers rotate by the same fp32 angles: inv_freq_i = fl(1 / fl(theta^fl(2i / hs))) and
// angle = fl(float(t) * inv_freq_i) (fl: rounded to f32; theta^e and 1/p as torch does them in fp32, computed
// here in double and rounded once), then cos/sin of that f32 angle in double, rounded to f32. Against HF's own fp32
// table: the same f32 angles wherever torch's fp32 pow rounds as this does (glibc's powf or Sleef's, on the CPU, where
// HF builds inv_freq unless told a device; one ulp off would move an angle by up to angle * 2^-23), and cos/sin within
// torch's few-ulp fp32 errors (< 3e-7 absolute). Against the exact angles t * theta^(-2i/hs) both carry the same fp32
// angle error, up to 3 * 2^-24 * angle rad (HF's behaviour, reproduced on purpose). No rope_scaling variants (Llama
// 3.1/3.2's "llama3" frequency scaling is not applied).
//
// CPU references take qkv of T = float or double (math in T, the table f32); CUDA launchers are f32, bf16 and fp16
// (16-bit as uint16_t raw bits, fp32 math, rounded once per element), one thread per V pairs (128-bit accesses of
// x and of the table when hs/2 % V == 0 and the pointers are aligned: V = 8 for 16-bit, 4 for f32), queued on
// `stream` with no host synchronisation. The Tensor entry points check shapes/dtypes/devices (InvalidArgument naming
// the shapes) and dispatch CPU f32/f64 -> *Cpu, CUDA f32 -> *Cuda, bf16 -> *CudaBf16, f16 -> *CudaF16.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// cos, sin: [max_seq_len * hs/2] floats (see above).
void RopeTableCpu(float* cos, float* sin, int64_t max_seq_len, int64_t head_size, double theta);
// qkv[b, t, (n_head + 2 n_kv_head) * hs] in place; `backward` rotates by -angle.
template <typename T>
void RopeCpu(T* qkv, const float* cos, const float* sin, int64_t b, int64_t t, int64_t n_head, int64_t n_kv_head,
             int64_t head_size, bool backward);

// CUDA builds only.
Status RopeCuda(float* qkv, const float* cos, const float* sin, int64_t b, int64_t t, int64_t n_head, int64_t n_kv_head,
                int64_t head_size, bool backward, cudaStream_t stream);
Status RopeCudaBf16(uint16_t* qkv, const float* cos, const float* sin, int64_t b, int64_t t, int64_t n_head,
                    int64_t n_kv_head, int64_t head_size, bool backward, cudaStream_t stream);
Status RopeCudaF16(uint16_t* qkv, const float* cos, const float* sin, int64_t b, int64_t t, int64_t n_head,
                   int64_t n_kv_head, int64_t head_size, bool backward, cudaStream_t stream);

// Allocates *cos and *sin (f32 [max_seq_len, head_size / 2]) from ctx's allocator and fills them. head_size even and
// > 0, max_seq_len > 0, theta > 0. On CUDA the table is copied from the host and ctx's stream is synchronized once:
// call it when the model is built, not inside a step (or a CUDA graph capture).
Status RopeTable(DeviceContext& ctx, int64_t max_seq_len, int64_t head_size, double theta, Tensor* cos, Tensor* sin);
// qkv [B, T, (n_head + 2 n_kv_head) * hs]: f32/f64 on the CPU, f32/bf16/f16 on CUDA; cos, sin: f32 [rows, hs/2] with
// T <= rows (hs follows from the table), on ctx's device. n_head >= n_kv_head >= 1.
Status RopeForward(DeviceContext& ctx, const Tensor& cos, const Tensor& sin, int64_t n_head, int64_t n_kv_head,
                   Tensor* qkv);
// dqkv: the gradient of the rotated qkv, in place -> the gradient of the unrotated one (dq, dk rotated by -angle;
// dv untouched).
Status RopeBackward(DeviceContext& ctx, const Tensor& cos, const Tensor& sin, int64_t n_head, int64_t n_kv_head,
                    Tensor* dqkv);

}  // namespace dtrain::ops
