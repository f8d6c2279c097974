#pragma once
// Causal self-attention from a fused projection qkv to out[B, T, NH*hs], multi-head (GPT-2's: NKV = NH) or
// grouped-query (Llama's: NKV < NH key/value heads, NKV dividing NH; NKV = 1 is multi-query).
//
// Layout: row (b, t) of qkv is q (NH*hs) | k (NKV*hs) | v (NKV*hs), so qkv is [B, T, (NH + 2 NKV) hs] (for NKV = NH
// the familiar [B, T, 3C]); head h of q is columns [h*hs, (h+1)*hs), kv head g of k (of v) starts at column
// (NH + g) hs ((NH + NKV + g) hs). Query head h reads kv head g(h) = h / (NH / NKV) (consecutive query heads share
// one). With s_ij = (q_i . k_j) / sqrt(hs) for j <= i (causal mask: keys after the query are excluded), per query head
// h (k, v those of kv head g(h)):
//   forward:  lse_i = log sum_{j<=i} exp(s_ij)            (per b, h, i: saved for backward, shape [B, NH, T])
//             out_i = sum_{j<=i} exp(s_ij - lse_i) v_j      (written to columns h*hs.. of out's row)
//   backward: P_ij = exp(s_ij - lse_i),  D_i = dout_i . out_i,  dS_ij = P_ij (dout_i . v_j - D_i)
//             dq_i = sum_j dS_ij k_j / sqrt(hs),  dk_j = sum_i dS_ij q_i / sqrt(hs),  dv_j = sum_i P_ij dout_i
//             and a kv head's dk, dv are the sums of those over its group's NH / NKV query heads.
//             dqkv is SET (not accumulated), in qkv's layout.
// Nothing T x T outlives a call: backward recomputes P from qkv and lse.
//
// CPU references take T = float or double and accumulate in double. CUDA *Cuda* (sm_90): flash-attention style on
// fp32 FMAs, one block per (b, h, 32-row query tile) streaming 32-key tiles of K/V (of h's kv head) through shared
// memory with an online softmax; fp32 or bf16 inputs/outputs, always fp32 accumulation and fp32 lse. CUDA backward is
// two deterministic kernels (dK/dV per (key tile, kv head), summed over the group's query heads in order in registers;
// dQ per query tile; no atomics), after a pass computing D into a [B, NH, T] f32 workspace. Head size
// hs <= kAttentionMaxHeadSize on CUDA. Queued on `stream`; asynchronous w.r.t. the host.
//
// CUDA bf16 also has a tensor-core path through cuBLAS (*GemmBf16, llm.c's pre-cuDNN scheme): qkv is permuted into
// head-major Q [B, NH, T, hs], K, V [B, NKV, T, hs]; S = Q K^T / sqrt(hs) (strided-batched GEMM per (b, kv head), the
// group's query heads stacked as G T rows; bf16 in, fp32 accumulate and fp32 S); a causal softmax per row writes lse
// and P (bf16, 0 above the diagonal); O = P V; O is permuted into out. Backward recomputes S from Q, K, then
// P = exp(S - lse) and dS = P (dP - D) / sqrt(hs) with dP = dO V^T (fp32), dV = P^T dO, dQ = dS K, dK = dS^T Q (the
// group sum of dK, dV is the GEMM's reduction over the stacked rows). It materializes T x T matrices per query head
// in a caller-provided workspace (AttentionGemmWorkspaceBytes: 6 B per score in forward, 12 B in backward, plus the
// head-major copies).
//
// CUDA 16-bit (bf16 and fp16) tensor-core flash attention (FlashAttention-2; flash_attention_{fwd,bwd}.cu), for
// hs in {64, 128} (FlashAttentionSupportsHeadSize) and 16-byte aligned buffers: one CTA of 4 warps per (64-query tile,
// head, batch), each warp owning 16 query rows; S = Q K^T on mma.sync m16n8k16 (fp32 accumulation) over 64-key tiles
// from the diagonal down (cp.async double-buffered), causal mask on the diagonal tile only, online softmax in fp32
// (exp2 with log2 e folded into the scale), P rounded to 16 bits for O += P V; a query head's CTAs read its kv head's
// tiles. Backward: D_i = dout_i . out_i (fp32, into `delta`), then dK/dV per (64-key tile, kv head): K and V loaded
// once, summed over the group's query heads in order and their query tiles from the diagonal on, in registers; and
// dQ per 64-query tile; both recompute P from lse; dS is rounded to 16 bits for its GEMMs. Deterministic: fixed
// order, no atomics.
//
// CUDA 16-bit also runs cuDNN's fused attention (CudnnAttention*: the graph API's SDPA node through NVIDIA's
// cudnn-frontend, third_party/cudnn_frontend): bf16 and fp16, hs 64 or 128, T >= 128 (shorter ones did not replay
// correctly in a CUDA graph), causal, forward with stats (the same lse, natural log, f32) and backward; GQA as cuDNN's
// own (K, V given with NKV heads). Plans are built once per (cuDNN handle, direction, dtype, shape with NH and NKV)
// and cached; the workspace comes from ctx.allocator(). It is the fastest path on the H200 (bench/results), but its
// backward is not guaranteed bitwise reproducible run to run; dtrain's flash kernels are (DTRAIN_ATTENTION=flash).
//
// Tensor entry points check shapes/dtypes/devices (InvalidArgument naming the shapes) and dispatch:
// CPU f32/f64 -> *Cpu (lse of qkv's dtype), CUDA f32 -> *Cuda; CUDA bf16/fp16 -> CudnnAttention* when cuDNN supports
// the call (else, logged once, as follows); CUDA bf16 -> FlashAttention*Bf16 when the head size is supported and
// the buffers are 16-byte aligned, else *GemmBf16; CUDA fp16 -> FlashAttention*Fp16 (other head sizes are
// InvalidArgument). Every path runs NKV < NH natively. lse is f32 on CUDA. Knob, read once per process: env
// DTRAIN_ATTENTION = auto (or unset: the order above) | cudnn (cuDNN or Unavailable) | flash (skip cuDNN:
// deterministic) | gemm (skip cuDNN, and CUDA bf16 to the cuBLAS path whatever the head size); other values make the
// CUDA 16-bit entry points return InvalidArgument. 16-bit buffers are uint16_t (raw bits) in the raw-pointer API.
// Outputs must not alias inputs.

#include <cstddef>
#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain {
class BlasHandles;  // core/cuda_handles.h
}  // namespace dtrain

namespace dtrain::ops {

constexpr int64_t kAttentionMaxHeadSize = 128;
// Head sizes the tensor-core flash kernels are built for.
constexpr bool FlashAttentionSupportsHeadSize(int64_t hs) { return hs == 64 || hs == 128; }

// nh query heads, nkv kv heads (nh % nkv == 0), in the layout above. Backward sums a kv head's dk, dv over its
// group's query heads in order (h = g * nh / nkv, ...), in double.
template <typename T>
void AttentionForwardCpu(T* out, T* lse, const T* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs);
template <typename T>
void AttentionBackwardCpu(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t b, int64_t t,
                          int64_t nh, int64_t nkv, int64_t hs);

#if DT_HAVE_CUDA
// Raw-pointer CUDA entry points: nh query heads, nkv kv heads (nh % nkv == 0; nkv = nh for multi-head), the layouts
// above. `delta`: a device workspace of b * nh * t floats (D_i), not in use by other work on `stream`.
Status AttentionForwardCuda(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                            int64_t hs, cudaStream_t stream);
Status AttentionBackwardCuda(float* dqkv, float* delta, const float* dout, const float* qkv, const float* out,
                             const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
                             cudaStream_t stream);
Status AttentionForwardCudaBf16(uint16_t* out, float* lse, const uint16_t* qkv, int64_t b, int64_t t, int64_t nh,
                                int64_t nkv, int64_t hs, cudaStream_t stream);
Status AttentionBackwardCudaBf16(uint16_t* dqkv, float* delta, const uint16_t* dout, const uint16_t* qkv,
                                 const uint16_t* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                 int64_t hs, cudaStream_t stream);

// `delta` as for AttentionBackwardCuda. hs in {64, 128}, B and NH < 2^16; qkv, out, dout, dqkv 16-byte aligned
// (InvalidArgument otherwise).
Status FlashAttentionForwardBf16(uint16_t* out, float* lse, const uint16_t* qkv, int64_t b, int64_t t, int64_t nh,
                                 int64_t nkv, int64_t hs, cudaStream_t stream);
Status FlashAttentionBackwardBf16(uint16_t* dqkv, float* delta, const uint16_t* dout, const uint16_t* qkv,
                                  const uint16_t* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                  int64_t hs, cudaStream_t stream);
Status FlashAttentionForwardFp16(uint16_t* out, float* lse, const uint16_t* qkv, int64_t b, int64_t t, int64_t nh,
                                 int64_t nkv, int64_t hs, cudaStream_t stream);
Status FlashAttentionBackwardFp16(uint16_t* dqkv, float* delta, const uint16_t* dout, const uint16_t* qkv,
                                  const uint16_t* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                  int64_t hs, cudaStream_t stream);

// cuDNN fused attention (dt bf16 or f16; hs 64 or 128; raw device pointers in the layouts above; K and V are given
// to cuDNN with nkv heads). Supported: both directions' plans build on ctx's GPU and cuDNN (cached, so later calls
// are cheap). The calls return Unavailable when cuDNN cannot run the shape.
bool CudnnAttentionSupported(const DeviceContext& ctx, DType dt, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                             int64_t hs);
Status CudnnAttentionForward(DeviceContext& ctx, DType dt, void* out, float* lse, const void* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t nkv, int64_t hs);
Status CudnnAttentionBackward(DeviceContext& ctx, DType dt, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                              int64_t hs);

// Device workspace bytes AttentionForwardGemmBf16 (backward = false) / AttentionBackwardGemmBf16 need.
size_t AttentionGemmWorkspaceBytes(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs, bool backward);
// `blas` must be bound to `stream`; `workspace` (AttentionGemmWorkspaceBytes, 256-byte aligned) must not be in use
// by other work on `stream`. B * NH < 2^31.
Status AttentionForwardGemmBf16(const BlasHandles& blas, uint16_t* out, float* lse, const uint16_t* qkv, int64_t b,
                                int64_t t, int64_t nh, int64_t nkv, int64_t hs, void* workspace, cudaStream_t stream);
Status AttentionBackwardGemmBf16(const BlasHandles& blas, uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                                 const uint16_t* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                 int64_t hs, void* workspace, cudaStream_t stream);
#endif

// qkv [B, T, (NH + 2 NKV) hs], out [B, T, NH hs] (qkv's dtype), lse [B, NH, T] (f64 for f64 qkv, else f32), with
// NH = n_head, NKV = n_kv_head: 0 < NKV <= NH, NH % NKV == 0, and qkv's last dim a multiple of NH + 2 NKV.
Status AttentionForward(DeviceContext& ctx, const Tensor& qkv, int64_t n_head, int64_t n_kv_head, Tensor* out,
                        Tensor* lse);
// dout [B, T, NH hs] and dqkv (qkv's shape) in qkv's dtype; qkv, out, lse as saved by AttentionForward (by the same
// CUDA path: the flash and cuBLAS lse agree to fp32 rounding only). On CUDA the workspaces (D for f32 and flash;
// the T x T buffers of the bf16 cuBLAS path, forward too) are taken from ctx.allocator() (the caching allocator: no
// cudaMalloc once warm).
Status AttentionBackward(DeviceContext& ctx, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                         const Tensor& dout, int64_t n_head, int64_t n_kv_head, Tensor* dqkv);

// Multi-head attention (n_kv_head = n_head): qkv [B, T, 3C], out and dout [B, T, C], C % n_head == 0.
Status AttentionForward(DeviceContext& ctx, const Tensor& qkv, int64_t n_head, Tensor* out, Tensor* lse);
Status AttentionBackward(DeviceContext& ctx, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                         const Tensor& dout, int64_t n_head, Tensor* dqkv);

}  // namespace dtrain::ops
