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
// angle error, up to 3 * 2^-24 * angle rad (HF's behaviour, reproduced on purpose).
//
// Frequency scaling (RopeScaling; HF's rope_scaling / rope_parameters): kNone, or kLlama3, Llama 3.1/3.2's
// ("rope_type": "llama3", transformers' _compute_llama3_parameters; attention factor 1, cos/sin unscaled). With
// L = original_max_position_embeddings, wavelen_i = 2 pi / inv_freq_i, frequencies of wavelen > L / low_freq_factor
// are divided by factor, those of wavelen < L / high_freq_factor kept, and the ones between interpolated:
// s = (L / wavelen - low) / (high - low), inv_freq = (1 - s) inv_freq / factor + s inv_freq. Every torch op is one
// f32 rounding here, in transformers' order, as torch does them on the CPU: its Python scalars (2 pi, L, low,
// high - low and the two wavelength bounds, computed in double as Python does) are rounded to f32 by the op that
// takes them; scalar / tensor is torch's reciprocal() * scalar (wavelen = fl(fl(1 / inv_freq) * fl(2 pi)),
// L / wavelen = fl(fl(1 / wavelen) * fl(L))); tensor / scalar is a true fp32 division; the band tests compare f32.
// So the scaled inv_freq is bit for bit HF's wherever the unscaled one is (above), by that reading of torch's ops
// (no torch run checks it here). Where HF builds inv_freq on a GPU (not its default), torch's CUDA division by a
// scalar multiplies by the scalar's fp32 reciprocal: exact for factor 8 and 32 (powers of 2), possibly an ulp off in
// the medium band's division by high - low (3 for Llama 3), which moves inv_freq by about 2^-24 relative.
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

// RoPE frequency scaling (see above). The numbers are read for kLlama3 only; RopeTable checks them (factor >= 1,
// 0 < low_freq_factor < high_freq_factor, original_max_position_embeddings >= 1), as HF's config validation warns.
struct RopeScaling {
  enum class Kind { kNone, kLlama3 };
  Kind kind = Kind::kNone;
  double factor = 8.0;  // Llama 3.1's numbers; Llama 3.2's factor is 32
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// inv_freq: [hs/2] floats, the (scaled) frequencies of the table (see above).
void RopeInvFreqCpu(float* inv_freq, int64_t head_size, double theta, const RopeScaling& scaling = {});
// cos, sin: [max_seq_len * hs/2] floats (see above).
void RopeTableCpu(float* cos, float* sin, int64_t max_seq_len, int64_t head_size, double theta,
                  const RopeScaling& scaling = {});
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
// > 0, max_seq_len > 0, theta > 0, `scaling` as RopeScaling states (InvalidArgument naming the number). On CUDA the
// table is copied from the host and ctx's stream is synchronized once: call it when the model is built, not inside a
// step (or a CUDA graph capture).
Status RopeTable(DeviceContext& ctx, int64_t max_seq_len, int64_t head_size, double theta, Tensor* cos, Tensor* sin,
                 const RopeScaling& scaling = {});
// qkv [B, T, (n_head + 2 n_kv_head) * hs]: f32/f64 on the CPU, f32/bf16/f16 on CUDA; cos, sin: f32 [rows, hs/2] with
// T <= rows (hs follows from the table), on ctx's device. n_head >= n_kv_head >= 1.
Status RopeForward(DeviceContext& ctx, const Tensor& cos, const Tensor& sin, int64_t n_head, int64_t n_kv_head,
                   Tensor* qkv);
// dqkv: the gradient of the rotated qkv, in place -> the gradient of the unrotated one (dq, dk rotated by -angle;
// dv untouched).
Status RopeBackward(DeviceContext& ctx, const Tensor& cos, const Tensor& sin, int64_t n_head, int64_t n_kv_head,
                    Tensor* dqkv);

}  // namespace dtrain::ops
