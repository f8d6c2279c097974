// Matmul on the GPU through cuBLASLt (CUBLAS_COMPUTE_32F: no TF32), f32, bf16 or fp16 operands, with a plan cache and
// fused epilogues.
//
// cuBLASLt is column-major. A row-major [R,C] matrix is the column-major [C,R] matrix X^T, so the row-major
// product C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: B goes first, A second, and
// each keeps its own transpose flag. A bias per column of the row-major C is a bias per ROW of the column-major
// C^T, which is what cuBLASLt's epilogues broadcast; the GELU aux matrix has C's layout (leading dimension N).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "core/cuda_handles.h"
#include "core/cuda_lib_check.h"
#include "core/logging.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/bias.h"
#include "kernels/cublaslt_plan.h"
#include "kernels/gelu.h"
#include "kernels/half.h"
#include "kernels/matmul.h"

namespace dtrain::ops {

namespace {

using detail::LtAlignment;
using detail::LtDesc;
using detail::LtLayout;
using detail::LtMakeDesc;
using detail::LtMakeLayout;
using detail::LtPickAlgo;
using detail::LtSetAttr;
using detail::PlanMemo;

// C[i] *= beta (or = 0 when beta == 0): the K == 0 case, which cuBLASLt does not accept.
template <typename T>
__global__ void ScaleKernel(T* c, int64_t n, float beta) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    c[i] = detail::FromF32<T>(beta == 0.f ? 0.f : detail::ToF32(c[i]) * beta);
  }
}

cudaDataType_t LtType(DType t) { return t == DType::kBF16 ? CUDA_R_16BF : t == DType::kF16 ? CUDA_R_16F : CUDA_R_32F; }

// The cuBLASLt-level epilogues used here.
enum class LtEpi : uint8_t { kNone, kBias, kGeluAuxBias, kDGelu };

cublasLtEpilogue_t ToCublas(LtEpi e) {
  switch (e) {
    case LtEpi::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LtEpi::kGeluAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpi::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case LtEpi::kNone:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Everything the heuristic's choice depends on. Alignments are part of it: an algorithm picked for 256-byte
// aligned operands may not run on a view at a 4-byte offset.
struct PlanKey {
  int device;
  DType ab, c, bias;
  LtEpi epi;
  bool ta, tb;
  int64_t m, n, k;
  uint32_t align_a, align_b, align_c, align_bias, align_aux;
};

struct Plan {
  bool supported = false;  // false: cuBLASLt has no algorithm for this case (callers fall back)
  std::string refusal;     // why not, for the error message
  LtDesc desc;
  LtLayout first, second, out;
  cublasLtMatmulAlgo_t algo = {};
};

// Builds the descriptors and asks the heuristic once. `bias`/`aux` are only looked at for their alignment.
Status BuildPlan(const BlasHandles& blas, const PlanKey& key, const void* bias, const void* aux, Plan* plan) {
  DT_RETURN_IF_ERROR(LtMakeDesc(CUBLAS_COMPUTE_32F, CUDA_R_32F, &plan->desc));
  cublasLtMatmulDesc_t d = plan->desc.get();
  // First operand (row-major B), second operand (row-major A); see the file comment.
  DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_TRANSA, key.tb ? CUBLAS_OP_T : CUBLAS_OP_N));
  DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_TRANSB, key.ta ? CUBLAS_OP_T : CUBLAS_OP_N));
  DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_EPILOGUE, ToCublas(key.epi)));
  if (key.epi == LtEpi::kBias || key.epi == LtEpi::kGeluAuxBias) {
    DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(LtType(key.bias))));
    DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
  }
  if (key.epi == LtEpi::kGeluAuxBias || key.epi == LtEpi::kDGelu) {
    DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux));
    DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.n));
    DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, static_cast<int32_t>(LtType(key.c))));
  }
  // Stored (column-major) shapes: B^T is [N,K] (ld N) or, when trans_b, [K,N] (ld K); likewise for A.
  const cudaDataType_t ab = LtType(key.ab);
  DT_RETURN_IF_ERROR(key.tb ? LtMakeLayout(ab, key.k, key.n, key.k, &plan->first)
                            : LtMakeLayout(ab, key.n, key.k, key.n, &plan->first));
  DT_RETURN_IF_ERROR(key.ta ? LtMakeLayout(ab, key.m, key.k, key.m, &plan->second)
                            : LtMakeLayout(ab, key.k, key.m, key.k, &plan->second));
  DT_RETURN_IF_ERROR(LtMakeLayout(LtType(key.c), key.n, key.m, key.n, &plan->out));

  // Any refusal (NOT_SUPPORTED, INVALID_VALUE for a type combination, no algorithm) means "cannot fuse/run this
  // case": epilogue callers fall back to unfused kernels, plain GEMMs report it.
  DT_RETURN_IF_ERROR(LtPickAlgo(blas, d, plan->first.get(), plan->second.get(), plan->out.get(),
                                {key.align_b, key.align_a, key.align_c, key.align_c}, &plan->algo, &plan->refusal));
  plan->supported = plan->refusal.empty();
  return Status::OK();
}

// Process-wide memo of plans (see matmul.h and cublaslt_plan.h).
PlanMemo<PlanKey, Plan>& Cache() {
  static PlanMemo<PlanKey, Plan> cache;
  return cache;
}

// Runs one GEMM with the plan for `key` (built on first use). Sets *supported = false, running nothing, when
// cuBLASLt has no algorithm. The bias/aux pointers live in the shared descriptor, so they are set and the GEMM is
// enqueued under the memo's lock.
Status RunPlan(const BlasHandles& blas, const PlanKey& key, const MatmulCudaArgs& args, const void* bias,
               const void* aux, cudaStream_t stream, bool* supported, std::string* refusal) {
  auto build = [&](Plan* fresh) -> Status {
    DT_RETURN_IF_ERROR(BuildPlan(blas, key, bias, aux, fresh));
    if (!fresh->supported && key.epi != LtEpi::kNone) {
      // Once per shape: an unfused epilogue costs extra passes over C on every step.
      DT_LOG_INFO(
          kModel,
          "cuBLASLt cannot fuse epilogue {} for m={} n={} k={} ({} x {} -> {}, bias {}): {}; running it unfused",
          static_cast<int>(key.epi), key.m, key.n, key.k, DTypeName(key.ab), DTypeName(key.ab), DTypeName(key.c),
          DTypeName(key.bias), fresh->refusal);
    }
    return Status::OK();
  };
  auto run = [&](Plan& plan) -> Status {
    *supported = plan.supported;
    if (!plan.supported) {
      if (refusal != nullptr) *refusal = plan.refusal;
      return Status::OK();
    }
    cublasLtMatmulDesc_t d = plan.desc.get();
    if (key.epi == LtEpi::kBias || key.epi == LtEpi::kGeluAuxBias) {
      DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
    }
    if (key.epi == LtEpi::kGeluAuxBias || key.epi == LtEpi::kDGelu) {
      DT_RETURN_IF_ERROR(LtSetAttr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux));
    }
    // C is both the input C (scaled by beta) and the output D: in-place accumulation when beta = 1.
    const void* c_in = args.c_in != nullptr ? args.c_in : args.c;
    DT_CUBLAS_CHECK(DT_CUBLAS(cublasLtMatmul)(
        blas.lt(), d, &args.alpha, args.b, plan.first.get(), args.a, plan.second.get(), &args.beta, c_in,
        plan.out.get(), args.c, plan.out.get(), &plan.algo, blas.workspace(), blas.workspace_bytes(), stream));
    return Status::OK();
  };
  return Cache().With(key, build, run);
}

Status CheckTypes(const MatmulCudaArgs& a) {
  DT_CHECK_ARG(a.m >= 0 && a.n >= 0 && a.k >= 0, "MatmulCuda: negative size m=" << a.m << " n=" << a.n << " k=" << a.k);
  DT_CHECK_ARG((a.ab_dtype == DType::kF32 && a.c_dtype == DType::kF32) ||
                   (IsHalfFloat(a.ab_dtype) && (a.c_dtype == a.ab_dtype || a.c_dtype == DType::kF32)),
               "MatmulCuda: unsupported dtypes A/B " << DTypeName(a.ab_dtype) << ", C " << DTypeName(a.c_dtype));
  return Status::OK();
}

// Tries one GEMM with the cuBLASLt epilogue `epi`; *fused = false when cuBLASLt has no algorithm for it.
Status TryLt(const BlasHandles& blas, const MatmulCudaArgs& args, LtEpi epi, const void* bias, DType bias_dtype,
             const void* aux, cudaStream_t stream, bool* fused, std::string* refusal = nullptr) {
  int device = 0;
  DT_CUDA_CHECK(cudaGetDevice(&device));
  PlanKey key;
  std::memset(&key, 0, sizeof(key));  // padding bytes take part in the memcmp/hash
  key.device = device;
  key.ab = args.ab_dtype;
  key.c = args.c_dtype;
  key.bias = bias_dtype;
  key.epi = epi;
  key.ta = args.trans_a;
  key.tb = args.trans_b;
  key.m = args.m;
  key.n = args.n;
  key.k = args.k;
  key.align_a = LtAlignment(args.a);
  key.align_b = LtAlignment(args.b);
  key.align_c = std::min(LtAlignment(args.c), args.c_in != nullptr ? LtAlignment(args.c_in) : 256u);
  key.align_bias = bias != nullptr ? LtAlignment(bias) : 0;
  key.align_aux = aux != nullptr ? LtAlignment(aux) : 0;
  return RunPlan(blas, key, args, bias, aux, stream, fused, refusal);
}

Status ScaleC(const MatmulCudaArgs& args, cudaStream_t stream) {
  const int64_t total = args.m * args.n;
  const unsigned blocks = detail::GridFor(total, 256, 4096);
  if (args.c_dtype == DType::kBF16) {
    ScaleKernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(args.c), total, args.beta);
  } else if (args.c_dtype == DType::kF16) {
    ScaleKernel<<<blocks, 256, 0, stream>>>(static_cast<__half*>(args.c), total, args.beta);
  } else {
    ScaleKernel<<<blocks, 256, 0, stream>>>(static_cast<float*>(args.c), total, args.beta);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

// y [M,N] of c_dtype += bias [N] of bias_dtype.
Status AddBias(const MatmulCudaArgs& args, void* y, const void* bias, DType bias_dtype, cudaStream_t stream) {
  if (args.c_dtype == DType::kF32) {
    DT_CHECK_ARG(bias_dtype == DType::kF32, "MatmulEpilogueCuda: f32 C needs an f32 bias");
    return BiasAddCuda(static_cast<float*>(y), static_cast<const float*>(bias), args.m, args.n, stream);
  }
  auto* y16 = static_cast<uint16_t*>(y);
  if (args.c_dtype == DType::kF16) {
    return bias_dtype == DType::kF16 ? BiasAddCudaF16(y16, static_cast<const uint16_t*>(bias), args.m, args.n, stream)
                                     : BiasAddCudaF16(y16, static_cast<const float*>(bias), args.m, args.n, stream);
  }
  if (bias_dtype == DType::kBF16) {
    return BiasAddCudaBf16(y16, static_cast<const uint16_t*>(bias), args.m, args.n, stream);
  }
  return BiasAddCudaBf16(y16, static_cast<const float*>(bias), args.m, args.n, stream);
}

// c = gelu(aux) and dc = dc * gelu'(aux) (in place) in C's dtype: the unfused epilogue kernels.
Status Gelu(const MatmulCudaArgs& args, const void* aux, cudaStream_t stream) {
  const int64_t n = args.m * args.n;
  auto* c16 = static_cast<uint16_t*>(args.c);
  const auto* aux16 = static_cast<const uint16_t*>(aux);
  switch (args.c_dtype) {
    case DType::kBF16:
      return GeluForwardCudaBf16(c16, aux16, n, stream);
    case DType::kF16:
      return GeluForwardCudaF16(c16, aux16, n, stream);
    default:
      return GeluForwardCuda(static_cast<float*>(args.c), static_cast<const float*>(aux), n, stream);
  }
}
Status DGeluInPlace(const MatmulCudaArgs& args, const void* aux, cudaStream_t stream) {
  const int64_t n = args.m * args.n;
  auto* c16 = static_cast<uint16_t*>(args.c);
  const auto* aux16 = static_cast<const uint16_t*>(aux);
  switch (args.c_dtype) {
    case DType::kBF16:
      return GeluBackwardCudaBf16(c16, aux16, c16, n, nullptr, stream);
    case DType::kF16:
      return GeluBackwardCudaF16(c16, aux16, c16, n, nullptr, stream);
    default:
      return GeluBackwardCuda(static_cast<float*>(args.c), static_cast<const float*>(aux),
                              static_cast<const float*>(args.c), n, stream);
  }
}

}  // namespace

Status MatmulCudaLt(const BlasHandles& blas, const MatmulCudaArgs& args, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckTypes(args));
  if (args.m == 0 || args.n == 0) return Status::OK();
  if (args.k == 0) return ScaleC(args, stream);
  bool ok = false;
  std::string refusal;
  DT_RETURN_IF_ERROR(TryLt(blas, args, LtEpi::kNone, nullptr, DType::kF32, nullptr, stream, &ok, &refusal));
  if (!ok) {
    return Status::Internal("MatmulCuda: cuBLASLt has no algorithm for " + std::string(DTypeName(args.ab_dtype)) +
                            " m=" + std::to_string(args.m) + " n=" + std::to_string(args.n) +
                            " k=" + std::to_string(args.k) + " -> " + DTypeName(args.c_dtype) + ": " + refusal);
  }
  return Status::OK();
}

Status MatmulCuda(const BlasHandles& blas, float* c, const float* a, bool trans_a, const float* b, bool trans_b,
                  int64_t m, int64_t n, int64_t k, float alpha, float beta, cudaStream_t stream) {
  MatmulCudaArgs args;
  args.c = c;
  args.a = a;
  args.b = b;
  args.trans_a = trans_a;
  args.trans_b = trans_b;
  args.m = m;
  args.n = n;
  args.k = k;
  args.alpha = alpha;
  args.beta = beta;
  return MatmulCudaLt(blas, args, stream);
}

Status MatmulEpilogueCuda(const BlasHandles& blas, const MatmulCudaArgs& args_in, Epilogue e, void* bias,
                          DType bias_dtype, void* aux, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckTypes(args_in));
  DT_CHECK_ARG(args_in.ab_dtype == args_in.c_dtype, "MatmulEpilogueCuda: A/B and C dtypes must match");
  MatmulCudaArgs args = args_in;
  args.alpha = 1.f;
  args.beta = 0.f;
  if (args.m == 0 || args.n == 0) return Status::OK();
  // cuBLASLt's GELU aux matrix needs a leading dimension divisible by 8 (cublasLt.h, EPILOGUE_AUX_LD); operand
  // alignments are the heuristic's business (they are part of the plan key).
  const bool can_fuse = args.k > 0 && (e == Epilogue::kBias || e == Epilogue::kBiasResidual || args.n % 8 == 0);
  bool fused = false;
  switch (e) {
    case Epilogue::kBias:
      if (can_fuse) DT_RETURN_IF_ERROR(TryLt(blas, args, LtEpi::kBias, bias, bias_dtype, nullptr, stream, &fused));
      if (fused) return Status::OK();
      detail::CountUnfusedEpilogue();
      DT_RETURN_IF_ERROR(MatmulCudaLt(blas, args, stream));
      return AddBias(args, args.c, bias, bias_dtype, stream);
    case Epilogue::kBiasResidual: {
      // cuBLASLt's D = A B + beta C + bias with C = the residual and beta = 1: the add costs one read of it.
      MatmulCudaArgs with_res = args;
      with_res.beta = 1.f;
      with_res.c_in = aux;
      if (can_fuse) DT_RETURN_IF_ERROR(TryLt(blas, with_res, LtEpi::kBias, bias, bias_dtype, nullptr, stream, &fused));
      if (fused) return Status::OK();
      detail::CountUnfusedEpilogue();
      DT_CUDA_CHECK(cudaMemcpyAsync(args.c, aux, static_cast<size_t>(args.m * args.n) * DTypeSize(args.c_dtype),
                                    cudaMemcpyDeviceToDevice, stream));
      with_res.c_in = nullptr;
      DT_RETURN_IF_ERROR(MatmulCudaLt(blas, with_res, stream));
      return AddBias(args, args.c, bias, bias_dtype, stream);
    }
    case Epilogue::kBiasGelu:
      if (can_fuse) DT_RETURN_IF_ERROR(TryLt(blas, args, LtEpi::kGeluAuxBias, bias, bias_dtype, aux, stream, &fused));
      if (fused) return Status::OK();
      detail::CountUnfusedEpilogue();
      {  // aux = A B + bias; c = gelu(aux)
        MatmulCudaArgs to_aux = args;
        to_aux.c = aux;
        DT_RETURN_IF_ERROR(MatmulCudaLt(blas, to_aux, stream));
        DT_RETURN_IF_ERROR(AddBias(args, aux, bias, bias_dtype, stream));
      }
      return Gelu(args, aux, stream);
    case Epilogue::kDGelu:
    case Epilogue::kDGeluBGrad:
      if (can_fuse) DT_RETURN_IF_ERROR(TryLt(blas, args, LtEpi::kDGelu, nullptr, DType::kF32, aux, stream, &fused));
      if (!fused) {  // c = A B, then c *= gelu'(aux) in place (each element is read before it is written)
        detail::CountUnfusedEpilogue();
        DT_RETURN_IF_ERROR(MatmulCudaLt(blas, args, stream));
        DT_RETURN_IF_ERROR(DGeluInPlace(args, aux, stream));
      }
      if (e == Epilogue::kDGelu) return Status::OK();
      // The bias gradient is our deterministic f32 column reduction (accumulating), not cuBLASLt's BGRAD
      // epilogue, which writes (not adds) a gradient in C's type: 16-bit here.
      DT_CHECK_ARG(bias_dtype == DType::kF32, "MatmulEpilogueCuda: dgelu+bgrad needs an f32 bias gradient");
      switch (args.c_dtype) {
        case DType::kBF16:
          return BiasGradCudaBf16(static_cast<float*>(bias), static_cast<const uint16_t*>(args.c), args.m, args.n,
                                  /*accumulate=*/true, nullptr, stream);
        case DType::kF16:
          return BiasGradCudaF16(static_cast<float*>(bias), static_cast<const uint16_t*>(args.c), args.m, args.n,
                                 /*accumulate=*/true, nullptr, stream);
        default:
          return BiasGradCuda(static_cast<float*>(bias), static_cast<const float*>(args.c), args.m, args.n,
                              /*accumulate=*/true, stream);
      }
  }
  return Status::InvalidArgument("MatmulEpilogueCuda: unknown epilogue");
}

}  // namespace dtrain::ops
