// The FP8 GEMM of matmul_fp8.h through cuBLASLt, with plans memoized per shape (cublaslt_plan.h). Host code only.
//
// Row-major C[M,N] = A[M,K] B[N,K]^T is the column-major C^T[N,M] = op(B) op(A) with op(B) = T on B stored [K,N]
// (ld K) and op(A) = N on A stored [K,M] (ld K): cuBLASLt's "TN", the FP8 layout. D = C (in place, beta 0 or 1).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/cuda_lib_check.h"
#include "core/logging.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/bias.h"
#include "kernels/cublaslt_plan.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/matmul_fp8.h"

namespace dtrain::ops {

namespace {

using detail::LtAlignment;
using detail::LtDesc;
using detail::LtLayout;

cudaDataType_t LtFp8Type(Fp8Format f) { return f == Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

// cuBLASLt's A is our B, its B our A (see the file comment), and so are their scales.
Status SetScales(cublasLtMatmulDesc_t d, const MatmulFp8Args& args) {
  DT_RETURN_IF_ERROR(detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, args.b_scale_inv));
  return detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, args.a_scale_inv);
}

enum class Fp8Epi : uint8_t { kNone, kBias, kGeluAuxBias };

Fp8Epi EpiOf(const MatmulFp8Args& a) {
  return a.gelu_aux != nullptr ? Fp8Epi::kGeluAuxBias : a.bias != nullptr ? Fp8Epi::kBias : Fp8Epi::kNone;
}

// Everything the heuristic's choice depends on (see matmul.cu's PlanKey).
struct Fp8PlanKey {
  int device;
  Fp8Format a_format, b_format;
  DType c_dtype;
  bool fast_accum;
  Fp8Epi epi;
  bool residual;
  int64_t m, n, k;
  uint32_t align_a, align_b, align_c, align_bias, align_aux;
};

struct Fp8Plan {
  std::string refusal;  // non-empty: cuBLASLt has no algorithm for this case
  LtDesc desc;
  LtLayout first, second, out;  // cuBLASLt's A (our B), B (our A), C = D
  cublasLtMatmulAlgo_t algo = {};
};

// The per-call pointers of `args` (scales, bias, aux) live in the descriptor; each call sets its own.
Status SetPointers(cublasLtMatmulDesc_t d, const Fp8PlanKey& key, const MatmulFp8Args& args) {
  DT_RETURN_IF_ERROR(SetScales(d, args));
  if (key.epi != Fp8Epi::kNone) DT_RETURN_IF_ERROR(detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias));
  if (key.epi == Fp8Epi::kGeluAuxBias) {
    DT_RETURN_IF_ERROR(detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, args.gelu_aux));
  }
  return Status::OK();
}

// The scale pointers of `args` go into the descriptor too (a null scale pointer means "no scaling" to cuBLASLt);
// later calls overwrite them with their own.
Status BuildFp8Plan(const BlasHandles& blas, const Fp8PlanKey& key, const MatmulFp8Args& args, Fp8Plan* plan) {
  DT_RETURN_IF_ERROR(detail::LtMakeDesc(CUBLAS_COMPUTE_32F, CUDA_R_32F, &plan->desc));
  cublasLtMatmulDesc_t d = plan->desc.get();
  DT_RETURN_IF_ERROR(detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T));
  DT_RETURN_IF_ERROR(detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N));
  const int8_t fast = key.fast_accum ? 1 : 0;
  DT_RETURN_IF_ERROR(detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast));
  if (key.epi != Fp8Epi::kNone) {
    const cublasLtEpilogue_t epi = key.epi == Fp8Epi::kBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    DT_RETURN_IF_ERROR(detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_EPILOGUE, epi));
    DT_RETURN_IF_ERROR(detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_16BF)));
  }
  if (key.epi == Fp8Epi::kGeluAuxBias) {
    DT_RETURN_IF_ERROR(detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.n));
    DT_RETURN_IF_ERROR(
        detail::LtSetAttr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, static_cast<int32_t>(CUDA_R_16BF)));
  }
  DT_RETURN_IF_ERROR(SetPointers(d, key, args));
  DT_RETURN_IF_ERROR(detail::LtMakeLayout(LtFp8Type(key.b_format), key.k, key.n, key.k, &plan->first));
  DT_RETURN_IF_ERROR(detail::LtMakeLayout(LtFp8Type(key.a_format), key.k, key.m, key.k, &plan->second));
  const cudaDataType_t c_type = key.c_dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  DT_RETURN_IF_ERROR(detail::LtMakeLayout(c_type, key.n, key.m, key.n, &plan->out));
  return detail::LtPickAlgo(blas, d, plan->first.get(), plan->second.get(), plan->out.get(),
                            {key.align_b, key.align_a, key.align_c, key.align_c}, &plan->algo, &plan->refusal);
}

detail::PlanMemo<Fp8PlanKey, Fp8Plan>& Fp8Cache() {
  static detail::PlanMemo<Fp8PlanKey, Fp8Plan> cache;
  return cache;
}

std::string Describe(const MatmulFp8Args& a) {
  return std::string(Fp8FormatName(a.a_format)) + " A[" + std::to_string(a.m) + "," + std::to_string(a.k) + "] x " +
         Fp8FormatName(a.b_format) + " B[" + std::to_string(a.n) + "," + std::to_string(a.k) + "]^T -> " +
         DTypeName(a.c_dtype) + " C[" + std::to_string(a.m) + "," + std::to_string(a.n) + "]";
}

Status CheckArgs(const MatmulFp8Args& a) {
  DT_CHECK_ARG(a.m >= 0 && a.n >= 0 && a.k >= 0, "MatmulFp8Cuda: negative size in " << Describe(a));
  DT_CHECK_ARG(a.c_dtype == DType::kBF16 || a.c_dtype == DType::kF32,
               "MatmulFp8Cuda: C must be bf16 or f32: " << Describe(a));
  DT_CHECK_ARG(a.a_format == Fp8Format::kE4M3 || a.b_format == Fp8Format::kE4M3,
               "MatmulFp8Cuda: cuBLASLt has no e5m2 x e5m2 GEMM: " << Describe(a));
  DT_CHECK_ARG(a.k % 16 == 0, "MatmulFp8Cuda: K must be a multiple of 16 (16-byte fp8 rows): " << Describe(a));
  DT_CHECK_ARG(
      a.n * static_cast<int64_t>(DTypeSize(a.c_dtype)) % 16 == 0,
      "MatmulFp8Cuda: N must make 16-byte rows of C (N % " << 16 / DTypeSize(a.c_dtype) << " == 0): " << Describe(a));
  DT_CHECK_ARG(detail::Aligned16({a.a, a.b, a.c}),
               "MatmulFp8Cuda: A, B and C must be 16-byte aligned: " << Describe(a));
  const bool epilogue = a.bias != nullptr || a.gelu_aux != nullptr || a.residual != nullptr;
  DT_CHECK_ARG(!epilogue || (a.c_dtype == DType::kBF16 && !a.accumulate),
               "MatmulFp8Cuda: epilogues need a bf16 C and no accumulate: " << Describe(a));
  DT_CHECK_ARG(a.gelu_aux == nullptr || a.bias != nullptr, "MatmulFp8Cuda: gelu_aux needs a bias: " << Describe(a));
  DT_CHECK_ARG(a.residual == nullptr || a.residual != a.c, "MatmulFp8Cuda: residual must not be C: " << Describe(a));
  DT_CHECK_ARG(a.a_scale_inv != nullptr && a.b_scale_inv != nullptr,
               "MatmulFp8Cuda: null scale_inv pointer: " << Describe(a));
  // cuBLASLt of CUDA 13.0 on the H200 answered every GEMM with scales at 4-byte offsets NOT_SUPPORTED at run time.
  DT_CHECK_ARG(detail::Aligned16({a.a_scale_inv, a.b_scale_inv}),
               "MatmulFp8Cuda: the scale_inv pointers must be 16-byte aligned: " << Describe(a));
  return Status::OK();
}

// The epilogue of `args` as separate kernels after a plain GEMM into C (when cuBLASLt refused to fuse it).
Status UnfusedEpilogue(const MatmulFp8Args& args, cudaStream_t stream) {
  auto* c = static_cast<uint16_t*>(args.c);
  const int64_t total = args.m * args.n;
  if (args.bias != nullptr) {
    DT_RETURN_IF_ERROR(BiasAddCudaBf16(c, static_cast<const uint16_t*>(args.bias), args.m, args.n, stream));
  }
  if (args.gelu_aux != nullptr) {
    DT_CUDA_CHECK(cudaMemcpyAsync(args.gelu_aux, c, static_cast<size_t>(total) * 2, cudaMemcpyDeviceToDevice, stream));
    DT_RETURN_IF_ERROR(GeluForwardCudaBf16(c, static_cast<const uint16_t*>(args.gelu_aux), total, stream));
  }
  if (args.residual != nullptr) {
    DT_RETURN_IF_ERROR(AddCudaBf16(c, c, static_cast<const uint16_t*>(args.residual), total, stream));
  }
  return Status::OK();
}

}  // namespace

Status MatmulFp8Cuda(const BlasHandles& blas, const MatmulFp8Args& args, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckArgs(args));
  if (args.m == 0 || args.n == 0) return Status::OK();
  if (args.k == 0) {  // an empty sum: C = 0, or C unchanged when accumulating (cuBLASLt does not take K = 0)
    if (args.accumulate) return Status::OK();
    DT_CUDA_CHECK(cudaMemsetAsync(args.c, 0, static_cast<size_t>(args.m * args.n) * DTypeSize(args.c_dtype), stream));
    return UnfusedEpilogue(args, stream);
  }
  int device = 0;
  DT_CUDA_CHECK(cudaGetDevice(&device));
  Fp8PlanKey key;
  std::memset(&key, 0, sizeof(key));  // padding bytes take part in the memo's hash and compare
  key.device = device;
  key.a_format = args.a_format;
  key.b_format = args.b_format;
  key.c_dtype = args.c_dtype;
  key.fast_accum = args.fast_accum;
  key.m = args.m;
  key.n = args.n;
  key.k = args.k;
  key.align_a = LtAlignment(args.a);
  key.align_b = LtAlignment(args.b);
  key.epi = EpiOf(args);
  key.residual = args.residual != nullptr;
  key.align_c = std::min(LtAlignment(args.c), key.residual ? LtAlignment(args.residual) : 256u);
  key.align_bias = args.bias != nullptr ? LtAlignment(args.bias) : 0;
  key.align_aux = args.gelu_aux != nullptr ? LtAlignment(args.gelu_aux) : 0;
  const bool epilogue = key.epi != Fp8Epi::kNone || key.residual;
  bool refused = false;
  auto build = [&](Fp8Plan* plan) -> Status {
    DT_RETURN_IF_ERROR(BuildFp8Plan(blas, key, args, plan));
    if (!plan->refusal.empty() && epilogue) {  // once per shape: the unfused epilogue costs passes over C every step
      DT_LOG_INFO(kModel,
                  "cuBLASLt cannot fuse the FP8 epilogue (bias {}, gelu {}, residual {}) of {}: {}; running it "
                  "unfused",
                  args.bias != nullptr, args.gelu_aux != nullptr, key.residual, Describe(args), plan->refusal);
    }
    return Status::OK();
  };
  auto run = [&](Fp8Plan& plan) -> Status {
    if (!plan.refusal.empty()) {
      if (epilogue) {
        refused = true;
        return Status::OK();
      }
      return Status::Internal("MatmulFp8Cuda: cuBLASLt has no algorithm for " + Describe(args) + ": " + plan.refusal);
    }
    cublasLtMatmulDesc_t d = plan.desc.get();
    DT_RETURN_IF_ERROR(SetPointers(d, key, args));
    // The residual is cuBLASLt's C (beta 1), our C its D.
    const float alpha = 1.f, beta = args.accumulate || key.residual ? 1.f : 0.f;
    const void* c_in = key.residual ? args.residual : args.c;
    DT_CUBLAS_CHECK(cublasLtMatmul(blas.lt(), d, &alpha, args.b, plan.first.get(), args.a, plan.second.get(), &beta,
                                   c_in, plan.out.get(), args.c, plan.out.get(), &plan.algo, blas.workspace(),
                                   blas.workspace_bytes(), stream));
    return Status::OK();
  };
  DT_RETURN_IF_ERROR(Fp8Cache().With(key, build, run));
  if (!refused) return Status::OK();
  MatmulFp8Args plain = args;  // outside the memo's lock: the plain GEMM takes it again
  plain.bias = nullptr;
  plain.gelu_aux = nullptr;
  plain.residual = nullptr;
  DT_RETURN_IF_ERROR(MatmulFp8Cuda(blas, plain, stream));
  return UnfusedEpilogue(args, stream);
}

}  // namespace dtrain::ops
