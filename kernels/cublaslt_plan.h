#pragma once
// cuBLASLt plumbing shared by the GEMMs of kernels (matmul.cu, matmul_fp8.cu); CUDA builds only, host code.
//
// A "plan" is what a GEMM of one shape needs from cuBLASLt before it can run: the matmul descriptor, the three
// matrix layouts and the algorithm the heuristic picked. PlanMemo keeps one per key for the life of the process
// (a memo of immutable plans, like cuBLAS's own caches), so a training step makes no heuristic query after its first
// iteration. Plans are never evicted: a model has a few dozen GEMM shapes. Thread-safe: the memo's mutex is held
// while a plan is built AND while it is used, because per-call pointers (bias, aux, scales) are attributes of the
// shared descriptor; the GEMM is enqueued under the lock.

#include <cublasLt.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/cuda_lib_check.h"
#include "core/cuda_handles.h"
#include "core/status.h"

namespace dtrain::ops::detail {

struct LtDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using LtDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleter>;
using LtLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleter>;

// Largest power of two (<= 256) dividing the address: cuBLASLt's heuristics assume 256-byte aligned operands
// unless told otherwise, and views inside a flat buffer can sit at any element offset.
uint32_t LtAlignment(const void* p);

// A matmul descriptor computing in `compute` with scale type `scale_type`.
Status LtMakeDesc(cublasComputeType_t compute, cudaDataType_t scale_type, LtDesc* out);
// Column-major `rows` x `cols` layout of `type` with leading dimension `ld`.
Status LtMakeLayout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, LtLayout* out);

template <typename T>
Status LtSetAttr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  DT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
  return Status::OK();
}

// Minimum alignments (bytes) of cuBLASLt's A, B, C and D operands, as the heuristic is told them.
struct LtAlignments {
  uint32_t a, b, c, d;
};

// The heuristic's best algorithm for `desc` with layouts a, b and c (C and D share c), within blas's workspace.
// A refusal (NOT_SUPPORTED, INVALID_VALUE for a type combination, no algorithm) is not an error: it returns OK with
// *refusal saying why (empty when an algorithm was found); callers fall back or report it.
Status LtPickAlgo(const BlasHandles& blas, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                  cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, const LtAlignments& align,
                  cublasLtMatmulAlgo_t* algo, std::string* refusal);

// Process-wide memo of plans by a trivially copyable Key, compared and hashed byte by byte (zero the key with
// memset before filling it: padding bytes take part).
template <typename Key, typename Plan>
class PlanMemo {
 public:
  // Runs use(plan) under the lock with the plan for `key`, built by build(Plan*) on first use. A failed build is
  // not memoized (the next call tries again).
  template <typename Build, typename Use>
  Status With(const Key& key, Build&& build, Use&& use) {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<Plan>& plan = plans_[key];
    if (plan == nullptr) {
      auto fresh = std::make_unique<Plan>();
      DT_RETURN_IF_ERROR(build(fresh.get()));
      plan = std::move(fresh);
    }
    return use(*plan);
  }

 private:
  struct Hash {
    size_t operator()(const Key& k) const {
      size_t h = 0;
      const auto* bytes = reinterpret_cast<const unsigned char*>(&k);
      for (size_t i = 0; i < sizeof(Key); ++i) h = h * 131 + bytes[i];
      return h;
    }
  };
  struct Equal {
    bool operator()(const Key& a, const Key& b) const { return std::memcmp(&a, &b, sizeof(Key)) == 0; }
  };
  std::mutex mu_;
  std::unordered_map<Key, std::unique_ptr<Plan>, Hash, Equal> plans_;
};

}  // namespace dtrain::ops::detail
