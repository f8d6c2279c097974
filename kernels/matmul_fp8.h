#pragma once
// FP8 GEMM with per-tensor scales (issue 35):
//   C[M,N] = (a_scale_inv * A[M,K]) @ (b_scale_inv * B[N,K])^T  (+ C with accumulate)
// A and B are fp8 bytes (kernels/fp8.h), BOTH row-major with K contiguous ("NT" in row-major terms): that is the only
// layout Hopper's FP8 tensor-core GEMMs take, so a linear layer Y = X W^T runs its three GEMMs as
//   forward  Y[M,N]  = X[M,K]    . W[N,K]^T        A = X  (e4m3),  B = W   (e4m3)
//   dgrad    dX[M,K] = dY[M,N]   . (W^T[K,N])^T    A = dY (e5m2),  B = W^T (e4m3)   (W^T from CastToFp8's out_t)
//   wgrad    dW[N,K] = dY^T[N,M] . (X^T[K,M])^T    A = dY^T (e5m2), B = X^T (e4m3)
// Either operand may be e4m3 or e5m2, not both e5m2 (cuBLASLt has no e5m2 x e5m2 kernel). C is bf16 or f32, row-major.
//
// cuBLASLt is column-major: the row-major C = A B^T is the column-major C^T[N,M] = B A^T, so B is cuBLASLt's first
// operand with op T (stored [K,N] column-major, ld K) and A its second with op N (stored [K,M], ld K): the "TN"
// format that cuBLASLt requires for FP8 (as kernels/matmul.cu maps a row-major product with trans_b = true).
// Compute is CUBLAS_COMPUTE_32F with f32 scale type; a_scale_inv and b_scale_inv are 16-byte aligned DEVICE floats
// (packed neighbours of a float array are refused: cuBLASLt rejected them at run time on the H200) passed as
// CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER (cuBLASLt multiplies the product by both), so the GEMM reads the scales
// that fp8.h's Fp8ScaleCuda wrote without any host synchronization (CUDA-graph safe). alpha = 1; accumulate = true
// sets beta = 1 (C = A B^T + C), else beta = 0 and C is never read. Into an f32 C the sum is rounded once; into a bf16
// C cuBLASLt rounds the product to bf16 before it adds C (measured on the H200: a product cancelling C to within
// bf16 rounding came back exactly 0), so accumulating costs a second bf16 rounding.
//
// fast_accum (CUBLASLT_MATMUL_DESC_FAST_ACCUM): Hopper's FP8 tensor-core instructions accumulate with less than f32
// precision (DeepSeek-V3's report measured about 14 retained bits on H800). Without fast accumulation cuBLASLt
// promotes the partial sums into f32 registers at intervals along K; with it the sums stay in the tensor core's
// accumulator for the whole K loop: faster, but the error grows with K. torchao (use_fast_accum in the output GEMM's
// config only) and Transformer Engine (split accumulation for dgrad and wgrad only) use it in the forward (K = the
// hidden size, and the result only feeds the next layer) and not in the two backward GEMMs (wgrad's K is the token
// count, 16384 or more, and gradient errors add up across steps).
//
// Epilogues (MatmulFp8Args::bias / gelu_aux / residual; CUDA, bf16 C, not with accumulate), per COLUMN n of the
// row-major C as in kernels/matmul.h: bias (bf16 [N]) gives C = AB + bias; with gelu_aux (bf16 [M,N]) also
// aux = AB + bias and C = gelu(aux) (GELU_AUX_BIAS: the forward of an MLP's first layer); residual (bf16 [M,N], not
// C) gives C = AB + bias + residual (cuBLASLt's C operand with beta 1, D = our C). When cuBLASLt refuses a fused case
// the same math runs unfused (plain FP8 GEMM, then kernels/bias.h, gelu.h, elementwise.h), logged once per shape.
// Tried and left out (cuBLASLt of CUDA 13.0 on the H200; see
// bench/results/2026-12-05-fp8-epilogues-and-774m-torchao-h200.md): the DGELU epilogue (GPT-2's fc_proj dgrad with
// gelu' fused made the whole step 10-12% slower than the GEMM plus kernels/gelu.h's pass) and
// CUBLASLT_MATMUL_DESC_AMAX_D_POINTER into a bf16 C (refused with GELU_AUX_BIAS and with DGELU: "an unsupported value
// or parameter"), so the amax of a bf16 GEMM output still takes a pass.
//
// Requirements (checked, InvalidArgument naming the shapes): K % 16 == 0 (16-byte rows of fp8), N * sizeof(C) % 16 ==
// 0 (16-byte rows of C: N % 8 for bf16, N % 4 for f32), A, B and C 16-byte aligned, scale pointers non-null.
//
// Plan cache: the descriptors, layouts and algorithm are built once per (device, formats, C type, M, N, K,
// fast_accum, alignments) with kernels/cublaslt_plan.h's PlanMemo, like kernels/matmul.cu; thread-safe.
//
// MatmulFp8Cpu is the reference: A and B dequantized (Fp8ToFloat * scale_inv) to f32, MatmulCpu<float>, f32 out;
// for a bf16 C the result is that rounded to nearest even (what the GPU does with its f32 accumulator, up to the
// order of the f32 sums; tests/kernels/matmul_fp8_test.cc states the tolerance).

#include <cstdint>
#include <string>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/fp8.h"

namespace dtrain::ops {

// c[M,N] (f32) = (a_scale_inv * A[M,K]) (b_scale_inv * B[N,K])^T + (accumulate ? c : 0).
void MatmulFp8Cpu(float* c, const uint8_t* a, Fp8Format a_format, float a_scale_inv, const uint8_t* b,
                  Fp8Format b_format, float b_scale_inv, int64_t m, int64_t n, int64_t k, bool accumulate);

struct MatmulFp8Args {
  const uint8_t* a = nullptr;  // [M,K] row-major, device
  const uint8_t* b = nullptr;  // [N,K] row-major, device
  Fp8Format a_format = Fp8Format::kE4M3, b_format = Fp8Format::kE4M3;
  const float* a_scale_inv = nullptr;  // device floats
  const float* b_scale_inv = nullptr;
  void* c = nullptr;             // [M,N] row-major, device
  DType c_dtype = DType::kBF16;  // bf16 or f32
  int64_t m = 0, n = 0, k = 0;
  bool accumulate = false;  // beta = 1
  bool fast_accum = false;  // see the file comment
  // Epilogue (see the file comment); device pointers, null = not used.
  const void* bias = nullptr;      // bf16 [N]
  void* gelu_aux = nullptr;        // bf16 [M,N], written; needs bias
  const void* residual = nullptr;  // bf16 [M,N], read; must not be c
};
// One cuBLASLt FP8 GEMM on `stream` (CUDA builds only); `blas` as in MatmulCudaLt (kernels/matmul.h).
Status MatmulFp8Cuda(const BlasHandles& blas, const MatmulFp8Args& args, cudaStream_t stream);

struct MatmulFp8Options {
  bool accumulate = false;
  bool fast_accum = false;  // CUDA only (the CPU reference accumulates in f32 either way)
  // Epilogue (see the file comment), not with accumulate; tensors of c's dtype and device: bias [N], gelu_aux and
  // residual [M,N]. On the CPU (f32) the reference composes kernels/bias.h, gelu.h and elementwise.h's CPU ops.
  const Tensor* bias = nullptr;
  Tensor* gelu_aux = nullptr;
  const Tensor* residual = nullptr;
};
// Tensor entry point: a u8 [M,K], b u8 [N,K], scale_inv one-element f32 tensors, c [M,N] f32 (CPU, CUDA) or bf16
// (CUDA), all on ctx's device. CPU -> MatmulFp8Cpu, CUDA -> MatmulFp8Cuda.
Status MatmulFp8(DeviceContext& ctx, const Tensor& a, Fp8Format a_format, const Tensor& a_scale_inv, const Tensor& b,
                 Fp8Format b_format, const Tensor& b_scale_inv, Tensor* c, const MatmulFp8Options& opts = {});

// OK when ctx's GPU runs cuBLASLt's FP8 GEMMs (compute capability 8.9 or newer: Ada, Hopper); otherwise
// InvalidArgument naming `what` (the caller's config key), the device and its compute capability.
Status CheckFp8Device(const DeviceContext& ctx, const std::string& what);

}  // namespace dtrain::ops
