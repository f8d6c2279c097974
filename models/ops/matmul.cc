#include "models/ops/matmul.h"

#include <algorithm>
#include <vector>

#include "runtime/core/check.h"

namespace dtrain::ops {

namespace {

// c[0:n] += a * b[0:n]. The fixed-width inner loop vectorizes even at -O2 (GCC's very-cheap cost model
// only vectorizes loops whose trip count is a known multiple of the vector width).
template <typename T>
inline void AxpyRow(T* __restrict c, const T* __restrict b, T a, int64_t n) {
  constexpr int kW = 16;
  int64_t j = 0;
  for (; j + kW <= n; j += kW) {
    for (int u = 0; u < kW; ++u) c[j + u] += a * b[j + u];
  }
  for (; j < n; ++j) c[j] += a * b[j];
}

// Rows of B (K dimension) per block: a 128 x N block of B stays in L2 while every row of C visits it.
constexpr int64_t kKBlock = 128;

}  // namespace

template <typename T>
void MatmulCpu(T* c, const T* a, bool trans_a, const T* b, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
               T beta) {
  // Scale (or clear) C first; beta == 0 never reads C, so NaN garbage does not leak through.
  for (int64_t i = 0; i < m * n; ++i) c[i] = beta == T(0) ? T(0) : c[i] * beta;
  // Transposed B is copied to [K,N] so the inner loop walks contiguous rows of both B and C.
  std::vector<T> bt;
  if (trans_b) {
    bt.resize(static_cast<size_t>(k * n));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t kk = 0; kk < k; ++kk) bt[kk * n + j] = b[j * k + kk];
    }
    b = bt.data();
  }
  for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
    const int64_t k1 = std::min(k, k0 + kKBlock);
    for (int64_t i = 0; i < m; ++i) {
      T* crow = c + i * n;
      for (int64_t kk = k0; kk < k1; ++kk) {
        const T aik = alpha * (trans_a ? a[kk * m + i] : a[i * k + kk]);
        AxpyRow(crow, b + kk * n, aik, n);
      }
    }
  }
}

template void MatmulCpu<float>(float*, const float*, bool, const float*, bool, int64_t, int64_t, int64_t, float, float);
template void MatmulCpu<double>(double*, const double*, bool, const double*, bool, int64_t, int64_t, int64_t, double,
                                double);

Status Matmul(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor* c, float alpha,
              float beta) {
  DT_CHECK_ARG(c != nullptr, "Matmul: c is null");
  DT_CHECK_ARG(a.ndim() == 2 && b.ndim() == 2 && c->ndim() == 2,
               "Matmul: a " << a.ToString() << ", b " << b.ToString() << ", c " << c->ToString() << " must be 2-D");
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  DT_CHECK_ARG(k == kb && c->dim(0) == m && c->dim(1) == n,
               "Matmul: shapes do not match: op(a) of a "
                   << a.ToString() << (trans_a ? "^T" : "") << " is [" << m << "," << k << "], op(b) of b "
                   << b.ToString() << (trans_b ? "^T" : "") << " is [" << kb << "," << n << "], c " << c->ToString());
  DT_CHECK_ARG(a.dtype() == c->dtype() && b.dtype() == c->dtype(),
               "Matmul: dtypes differ: a " << a.ToString() << ", b " << b.ToString() << ", c " << c->ToString());
  DT_CHECK_ARG(a.device() == ctx.type() && b.device() == ctx.type() && c->device() == ctx.type(),
               "Matmul: a " << a.ToString() << ", b " << b.ToString() << ", c " << c->ToString() << " not all on "
                            << DeviceName(ctx.type()));
  if (!ctx.is_cuda()) {
    if (c->dtype() == DType::kF32) {
      MatmulCpu<float>(c->data<float>(), a.data<float>(), trans_a, b.data<float>(), trans_b, m, n, k, alpha, beta);
      return Status::OK();
    }
    DT_CHECK_ARG(c->dtype() == DType::kF64, "Matmul: CPU supports f32/f64, got " << c->ToString());
    MatmulCpu<double>(c->data<double>(), a.data<double>(), trans_a, b.data<double>(), trans_b, m, n, k, alpha, beta);
    return Status::OK();
  }
  DT_CHECK_ARG(c->dtype() == DType::kF32, "Matmul: CUDA supports f32 only, got " << c->ToString());
#if DT_HAVE_CUDA
  DT_CHECK_ARG(ctx.blas() != nullptr, "Matmul: CUDA context without cuBLAS handles");
  return MatmulCuda(*ctx.blas(), c->data<float>(), a.data<float>(), trans_a, b.data<float>(), trans_b, m, n, k, alpha,
                    beta, ctx.stream());
#else
  return Status::Unavailable("Matmul: CUDA tensor in a build without CUDA");
#endif
}

}  // namespace dtrain::ops
