#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/check.h"
#include "kernels/bias.h"
#include "kernels/gelu.h"
#include "kernels/half.h"

namespace dtrain::ops {

namespace {
std::atomic<int64_t> g_unfused_epilogues{0};
}  // namespace

int64_t UnfusedEpilogueCount() { return g_unfused_epilogues.load(); }
void detail::CountUnfusedEpilogue() { ++g_unfused_epilogues; }

const char* EpilogueName(Epilogue e) {
  switch (e) {
    case Epilogue::kBias:
      return "bias";
    case Epilogue::kBiasGelu:
      return "bias+gelu";
    case Epilogue::kDGelu:
      return "dgelu";
    case Epilogue::kDGeluBGrad:
      return "dgelu+bgrad";
    case Epilogue::kBiasResidual:
      return "bias+residual";
  }
  return "?";
}

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

namespace {

// Shapes of op(a) [M,K], op(b) [K,N] and c [M,N]; devices. Dtypes are checked by the callers.
Status CheckShapes(const DeviceContext& ctx, const char* op, const Tensor& a, bool trans_a, const Tensor& b,
                   bool trans_b, const Tensor& c, int64_t* m, int64_t* n, int64_t* k) {
  DT_CHECK_ARG(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2,
               op << ": a " << a.ToString() << ", b " << b.ToString() << ", c " << c.ToString() << " must be 2-D");
  *m = trans_a ? a.dim(1) : a.dim(0);
  *k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  *n = trans_b ? b.dim(0) : b.dim(1);
  DT_CHECK_ARG(*k == kb && c.dim(0) == *m && c.dim(1) == *n,
               op << ": shapes do not match: op(a) of a " << a.ToString() << (trans_a ? "^T" : "") << " is [" << *m
                  << "," << *k << "], op(b) of b " << b.ToString() << (trans_b ? "^T" : "") << " is [" << kb << ","
                  << *n << "], c " << c.ToString());
  DT_CHECK_ARG(a.device() == ctx.type() && b.device() == ctx.type() && c.device() == ctx.type(),
               op << ": a " << a.ToString() << ", b " << b.ToString() << ", c " << c.ToString() << " not all on "
                  << DeviceName(ctx.type()));
  return Status::OK();
}

#if DT_HAVE_CUDA
MatmulCudaArgs CudaArgs(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor* c, int64_t m, int64_t n,
                        int64_t k, float alpha, float beta) {
  MatmulCudaArgs args;
  args.ab_dtype = a.dtype();
  args.c_dtype = c->dtype();
  args.c = c->data();
  args.a = a.data();
  args.b = b.data();
  args.trans_a = trans_a;
  args.trans_b = trans_b;
  args.m = m;
  args.n = n;
  args.k = k;
  args.alpha = alpha;
  args.beta = beta;
  return args;
}
#endif

// The CPU reference of MatmulEpilogue: the separate ops, in T.
template <typename T>
void MatmulEpilogueCpu(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& bias, Epilogue e,
                       Tensor* c, Tensor* aux, int64_t m, int64_t n, int64_t k) {
  T* out = c->data<T>();
  if (e == Epilogue::kBiasGelu) {
    MatmulCpu<T>(aux->data<T>(), a.data<T>(), trans_a, b.data<T>(), trans_b, m, n, k, T(1), T(0));
    BiasAddCpu<T>(aux->data<T>(), bias.data<T>(), m, n);
    GeluForwardCpu<T>(out, aux->data<T>(), m * n);
    return;
  }
  MatmulCpu<T>(out, a.data<T>(), trans_a, b.data<T>(), trans_b, m, n, k, T(1), T(0));
  if (e == Epilogue::kBias || e == Epilogue::kBiasResidual) {
    BiasAddCpu<T>(out, bias.data<T>(), m, n);
    if (e == Epilogue::kBiasResidual) {
      const T* res = aux->data<T>();
      for (int64_t i = 0; i < m * n; ++i) out[i] += res[i];
    }
    return;
  }
  GeluBackwardCpu<T>(out, aux->data<T>(), out, m * n);  // dx may alias dy here: each element is read, then written
  if (e == Epilogue::kDGeluBGrad) BiasGradCpu<T>(bias.data<T>(), out, m, n, /*accumulate=*/true);
}

}  // namespace

Status Matmul(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor* c, float alpha,
              float beta) {
  DT_CHECK_ARG(c != nullptr, "Matmul: c is null");
  int64_t m = 0, n = 0, k = 0;
  DT_RETURN_IF_ERROR(CheckShapes(ctx, "Matmul", a, trans_a, b, trans_b, *c, &m, &n, &k));
  const bool half_in = ctx.is_cuda() && IsHalfFloat(a.dtype()) && c->dtype() == DType::kF32;
  DT_CHECK_ARG(a.dtype() == b.dtype() && (a.dtype() == c->dtype() || half_in),
               "Matmul: dtypes differ: a " << a.ToString() << ", b " << b.ToString() << ", c " << c->ToString());
  if (!ctx.is_cuda()) {
    if (c->dtype() == DType::kF32) {
      MatmulCpu<float>(c->data<float>(), a.data<float>(), trans_a, b.data<float>(), trans_b, m, n, k, alpha, beta);
      return Status::OK();
    }
    DT_CHECK_ARG(c->dtype() == DType::kF64, "Matmul: CPU supports f32/f64, got " << c->ToString());
    MatmulCpu<double>(c->data<double>(), a.data<double>(), trans_a, b.data<double>(), trans_b, m, n, k, alpha, beta);
    return Status::OK();
  }
  DT_CHECK_ARG(a.dtype() == DType::kF32 || IsHalfFloat(a.dtype()),
               "Matmul: CUDA supports f32, bf16 and f16, got " << a.ToString());
#if DT_HAVE_CUDA
  DT_CHECK_ARG(ctx.blas() != nullptr, "Matmul: CUDA context without cuBLAS handles");
  return MatmulCudaLt(*ctx.blas(), CudaArgs(a, trans_a, b, trans_b, c, m, n, k, alpha, beta), ctx.stream());
#else
  return Status::Unavailable("Matmul: CUDA tensor in a build without CUDA");
#endif
}

Status MatmulEpilogue(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                      const Tensor& bias, Epilogue e, Tensor* c, Tensor* aux) {
  DT_CHECK_ARG(c != nullptr, "MatmulEpilogue: c is null");
  int64_t m = 0, n = 0, k = 0;
  DT_RETURN_IF_ERROR(CheckShapes(ctx, "MatmulEpilogue", a, trans_a, b, trans_b, *c, &m, &n, &k));
  DT_CHECK_ARG(a.dtype() == b.dtype() && a.dtype() == c->dtype(), "MatmulEpilogue: dtypes differ: a "
                                                                      << a.ToString() << ", b " << b.ToString()
                                                                      << ", c " << c->ToString());
  const bool uses_aux = e != Epilogue::kBias;
  const bool uses_bias = e != Epilogue::kDGelu;
  if (uses_aux) {
    DT_CHECK_ARG(
        aux != nullptr && aux->shape() == c->shape() && aux->dtype() == c->dtype() && aux->device() == ctx.type(),
        "MatmulEpilogue " << EpilogueName(e) << ": aux " << (aux ? aux->ToString() : "null") << " must match c "
                          << c->ToString());
    DT_CHECK_ARG(e != Epilogue::kBiasResidual || aux->data() != c->data(),
                 "MatmulEpilogue bias+residual: the residual must not be c itself");
  }
  if (uses_bias) {
    // A bias gradient is f32 (f64 in an f64 CPU run); a bias may also be bf16/f16 next to activations of its type.
    const bool grad = e == Epilogue::kDGeluBGrad;
    const bool dtype_ok = bias.dtype() == c->dtype() ? !(grad && IsHalfFloat(c->dtype()))
                                                     : (IsHalfFloat(c->dtype()) && bias.dtype() == DType::kF32);
    DT_CHECK_ARG(bias.ndim() == 1 && bias.dim(0) == n && bias.device() == ctx.type() && dtype_ok,
                 "MatmulEpilogue " << EpilogueName(e) << ": bias " << bias.ToString() << " must be [" << n << "] (f32"
                                   << (grad ? "" : " or c's dtype") << ") for c " << c->ToString());
  }
  if (!ctx.is_cuda()) {
    if (c->dtype() == DType::kF32) {
      MatmulEpilogueCpu<float>(a, trans_a, b, trans_b, bias, e, c, aux, m, n, k);
      return Status::OK();
    }
    DT_CHECK_ARG(c->dtype() == DType::kF64, "MatmulEpilogue: CPU supports f32/f64, got " << c->ToString());
    MatmulEpilogueCpu<double>(a, trans_a, b, trans_b, bias, e, c, aux, m, n, k);
    return Status::OK();
  }
  DT_CHECK_ARG(c->dtype() == DType::kF32 || IsHalfFloat(c->dtype()),
               "MatmulEpilogue: CUDA supports f32, bf16 and f16, got " << c->ToString());
#if DT_HAVE_CUDA
  DT_CHECK_ARG(ctx.blas() != nullptr, "MatmulEpilogue: CUDA context without cuBLAS handles");
  const MatmulCudaArgs args = CudaArgs(a, trans_a, b, trans_b, c, m, n, k, 1.f, 0.f);
  if (e == Epilogue::kDGeluBGrad) {  // the bias gradient through BiasGrad, with its scratch for a wide reduction
    DT_RETURN_IF_ERROR(
        MatmulEpilogueCuda(*ctx.blas(), args, Epilogue::kDGelu, nullptr, bias.dtype(), aux->data(), ctx.stream()));
    Tensor db = bias;
    return BiasGrad(ctx, *c, &db, /*accumulate=*/true);
  }
  return MatmulEpilogueCuda(*ctx.blas(), args, e, uses_bias ? bias.data() : nullptr, bias.dtype(),
                            uses_aux ? aux->data() : nullptr, ctx.stream());
#else
  return Status::Unavailable("MatmulEpilogue: CUDA tensor in a build without CUDA");
#endif
}

}  // namespace dtrain::ops
