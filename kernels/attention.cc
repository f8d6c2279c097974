#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/logging.h"

namespace dtrain::ops {

namespace {

// Row (b, t) of qkv starts at (b * t_len + t) * w with w = (nh + 2 nkv) hs; q of head h at h*hs, k and v of kv
// head g at (nh + g) hs and (nh + nkv + g) hs. Rows of out are nh * hs wide.
struct QkvIndex {
  int64_t t_len, nh, nkv, hs;
  int64_t Width() const { return (nh + 2 * nkv) * hs; }
  int64_t Row(int64_t b, int64_t t) const { return (b * t_len + t) * Width(); }
  int64_t OutRow(int64_t b, int64_t t) const { return (b * t_len + t) * nh * hs; }
  int64_t Q(int64_t h) const { return h * hs; }
  int64_t K(int64_t g) const { return (nh + g) * hs; }
  int64_t V(int64_t g) const { return (nh + nkv + g) * hs; }
};

}  // namespace

template <typename T>
void AttentionForwardCpu(T* out, T* lse, const T* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs) {
  const QkvIndex ix{t, nh, nkv, hs};
  const int64_t group = nh / nkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> s(static_cast<size_t>(t)), acc(static_cast<size_t>(hs));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < t; ++i) {
        const T* q = qkv + ix.Row(bi, i) + ix.Q(h);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          const T* k = qkv + ix.Row(bi, j) + ix.K(g);
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d) dot += static_cast<double>(q[d]) * k[d];
          s[j] = dot * scale;
          m = std::fmax(m, s[j]);
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - m);
          l += p;
          const T* v = qkv + ix.Row(bi, j) + ix.V(g);
          for (int64_t d = 0; d < hs; ++d) acc[d] += p * v[d];
        }
        T* o = out + ix.OutRow(bi, i) + h * hs;
        for (int64_t d = 0; d < hs; ++d) o[d] = static_cast<T>(acc[d] / l);
        lse[(bi * nh + h) * t + i] = static_cast<T>(m + std::log(l));
      }
    }
  }
}

template <typename T>
void AttentionBackwardCpu(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t b, int64_t t,
                          int64_t nh, int64_t nkv, int64_t hs) {
  const QkvIndex ix{t, nh, nkv, hs};
  const int64_t group = nh / nkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  // Per (b, kv head g): dk, dv of every row summed over the group's query heads in order, and dq per query head, in
  // double, written once at the end (one rounding for T = float).
  std::vector<double> dq(static_cast<size_t>(t * hs)), dk(dq.size()), dv(dq.size());
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t g = 0; g < nkv; ++g) {
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        std::fill(dq.begin(), dq.end(), 0.0);
        for (int64_t i = 0; i < t; ++i) {
          const T* q = qkv + ix.Row(bi, i) + ix.Q(h);
          const T* o = out + ix.OutRow(bi, i) + h * hs;
          const T* dorow = dout + ix.OutRow(bi, i) + h * hs;
          double delta = 0;
          for (int64_t d = 0; d < hs; ++d) delta += static_cast<double>(dorow[d]) * o[d];
          const double lse_i = lse[(bi * nh + h) * t + i];
          for (int64_t j = 0; j <= i; ++j) {
            const T* k = qkv + ix.Row(bi, j) + ix.K(g);
            const T* v = qkv + ix.Row(bi, j) + ix.V(g);
            double dot = 0, dp = 0;
            for (int64_t d = 0; d < hs; ++d) {
              dot += static_cast<double>(q[d]) * k[d];
              dp += static_cast<double>(dorow[d]) * v[d];
            }
            const double p = std::exp(dot * scale - lse_i);
            const double ds = p * (dp - delta) * scale;
            for (int64_t d = 0; d < hs; ++d) {
              dv[j * hs + d] += p * dorow[d];
              dq[i * hs + d] += ds * k[d];
              dk[j * hs + d] += ds * q[d];
            }
          }
        }
        for (int64_t i = 0; i < t; ++i) {
          T* row = dqkv + ix.Row(bi, i) + ix.Q(h);
          for (int64_t d = 0; d < hs; ++d) row[d] = static_cast<T>(dq[i * hs + d]);
        }
      }
      for (int64_t i = 0; i < t; ++i) {
        T* row = dqkv + ix.Row(bi, i);
        for (int64_t d = 0; d < hs; ++d) {
          row[ix.K(g) + d] = static_cast<T>(dk[i * hs + d]);
          row[ix.V(g) + d] = static_cast<T>(dv[i * hs + d]);
        }
      }
    }
  }
}

template void AttentionForwardCpu<float>(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t);
template void AttentionForwardCpu<double>(double*, double*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t);
template void AttentionBackwardCpu<float>(float*, const float*, const float*, const float*, const float*, int64_t,
                                          int64_t, int64_t, int64_t, int64_t);
template void AttentionBackwardCpu<double>(double*, const double*, const double*, const double*, const double*, int64_t,
                                           int64_t, int64_t, int64_t, int64_t);

namespace {

struct Dims {
  int64_t b, t, nh, nkv, hs;
};

// qkv [B, T, (NH + 2 NKV) hs] with NKV dividing NH, on the context's device with a dtype it supports (CPU f32/f64,
// CUDA f32/bf16/f16, hs <= kAttentionMaxHeadSize, f16 only with a flash head size); `out_like` tensors are
// [B, T, NH hs] of qkv's dtype, `qkv_like` ones are qkv-shaped, lse is [B, NH, T] (f64 for f64 qkv, else f32).
Status CheckArgs(const DeviceContext& ctx, const char* op, const Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                 std::initializer_list<const Tensor*> out_like, std::initializer_list<const Tensor*> qkv_like,
                 const Tensor& lse, Dims* dims) {
  DT_CHECK_ARG(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0,
               op << ": n_head = " << n_head << " is not a positive multiple of n_kv_head = " << n_kv_head);
  const int64_t parts = n_head + 2 * n_kv_head;
  DT_CHECK_ARG(qkv.ndim() == 3 && qkv.numel() > 0 && qkv.dim(2) % parts == 0,
               op << ": qkv " << qkv.ToString() << " must be a non-empty [B, T, (n_head + 2 n_kv_head) hs] with n_head "
                  << n_head << ", n_kv_head " << n_kv_head);
  *dims = {qkv.dim(0), qkv.dim(1), n_head, n_kv_head, qkv.dim(2) / parts};
  const int64_t c = n_head * dims->hs;
  DT_CHECK_ARG(qkv.device() == ctx.type(), op << ": qkv " << qkv.ToString() << " not on " << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(qkv.dtype() == DType::kF32 || qkv.dtype() == DType::kBF16 || qkv.dtype() == DType::kF16,
                 op << ": CUDA supports f32/bf16/f16, got " << qkv.ToString());
    DT_CHECK_ARG(dims->hs <= kAttentionMaxHeadSize,
                 op << ": head size " << dims->hs << " > " << kAttentionMaxHeadSize << " on CUDA");
    DT_CHECK_ARG(qkv.dtype() != DType::kF16 || FlashAttentionSupportsHeadSize(dims->hs),
                 op << ": CUDA f16 needs head size 64 or 128 (flash kernels), got " << dims->hs);
  } else {
    DT_CHECK_ARG(qkv.dtype() == DType::kF32 || qkv.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << qkv.ToString());
  }
  auto check = [&](const Tensor* x, const std::vector<int64_t>& shape, DType dt, const char* kind) -> Status {
    DT_CHECK_ARG(x != nullptr && x->shape() == shape && x->dtype() == dt && x->device() == ctx.type(),
                 op << ": shapes do not match: qkv " << qkv.ToString() << " (n_head " << n_head << ", n_kv_head "
                    << n_kv_head << ") needs " << kind << " " << DTypeName(dt) << ", got "
                    << (x ? x->ToString() : "null"));
    return Status::OK();
  };
  for (const Tensor* x : out_like) DT_RETURN_IF_ERROR(check(x, {dims->b, dims->t, c}, qkv.dtype(), "[B, T, NH hs]"));
  for (const Tensor* x : qkv_like) DT_RETURN_IF_ERROR(check(x, qkv.shape(), qkv.dtype(), "qkv's shape"));
  const DType lse_dt = qkv.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  return check(&lse, {dims->b, n_head, dims->t}, lse_dt, "lse [B, NH, T]");
}

#if DT_HAVE_CUDA
// The CUDA 16-bit kernels a call takes (see attention.h: DTRAIN_ATTENTION).
enum class Path { kCudnn, kFlash, kGemm };

// DTRAIN_ATTENTION, read once per process (a debugging knob): unset or "auto" -> 0, "cudnn" -> 1, "flash" -> 2,
// "gemm" -> 3, else -1.
int AttentionEnvChoice() {
  static const int choice = [] {
    const char* v = std::getenv("DTRAIN_ATTENTION");
    if (v == nullptr || std::strcmp(v, "auto") == 0) return 0;
    if (std::strcmp(v, "cudnn") == 0) return 1;
    if (std::strcmp(v, "flash") == 0) return 2;
    return std::strcmp(v, "gemm") == 0 ? 3 : -1;
  }();
  return choice;
}

bool Aligned16(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (reinterpret_cast<uintptr_t>(t->data()) % 16 != 0) return false;
  }
  return true;
}

// auto: cuDNN's fused SDPA when it supports the call (else, once logged, as for flash); cudnn: cuDNN or the
// error why not; flash: flash for f16, and for bf16 when the head size has a flash kernel and the buffers are
// aligned, else cuBLAS; gemm: cuBLAS for bf16 (f16 stays on flash, vetted by CheckArgs).
Status ChoosePath(const DeviceContext& ctx, DType dt, const Dims& d, std::initializer_list<const Tensor*> ts,
                  Path* path) {
  const int env = AttentionEnvChoice();
  DT_CHECK_ARG(env >= 0, "attention: DTRAIN_ATTENTION=" << std::getenv("DTRAIN_ATTENTION")
                                                        << " is not auto, cudnn, flash or gemm");
  if (env <= 1) {
    if (CudnnAttentionSupported(ctx, dt, d.b, d.t, d.nh, d.nkv, d.hs)) {
      *path = Path::kCudnn;
      return Status::OK();
    }
    if (env == 1) {
      return Status::Unavailable("attention: DTRAIN_ATTENTION=cudnn but cuDNN cannot run " +
                                 std::string(DTypeName(dt)) + " head size " + std::to_string(d.hs) + " (NH " +
                                 std::to_string(d.nh) + ", NKV " + std::to_string(d.nkv) + ", T " +
                                 std::to_string(d.t) + ")");
    }
    static std::once_flag logged;
    std::call_once(logged, [&] {
      DT_LOG_INFO(kModel,
                  "attention: cuDNN's fused attention cannot run {} with head size {} (NH {}, NKV {}, T {}); using "
                  "dtrain's kernels",
                  DTypeName(dt), d.hs, d.nh, d.nkv, d.t);
    });
  }
  const bool flash_ok = FlashAttentionSupportsHeadSize(d.hs) && Aligned16(ts);
  *path = dt == DType::kF16 || (env != 3 && flash_ok) ? Path::kFlash : Path::kGemm;
  return Status::OK();
}

// A u8 device tensor of the cuBLAS bf16 path's workspace size, from the context's caching allocator.
Status GemmWorkspace(DeviceContext& ctx, const Dims& d, bool backward, Tensor* ws) {
  DT_CHECK_ARG(ctx.blas() != nullptr, "attention: CUDA context without cuBLAS handles");
  const size_t bytes = AttentionGemmWorkspaceBytes(d.b, d.t, d.nh, d.nkv, d.hs, backward);
  return Tensor::Empty({static_cast<int64_t>(bytes)}, DType::kU8, ctx.allocator(), ws);
}
#endif

}  // namespace

Status AttentionForward(DeviceContext& ctx, const Tensor& qkv, int64_t n_head, int64_t n_kv_head, Tensor* out,
                        Tensor* lse) {
  DT_CHECK_ARG(out != nullptr && lse != nullptr, "AttentionForward: null output");
  Dims d;
  DT_RETURN_IF_ERROR(CheckArgs(ctx, "AttentionForward", qkv, n_head, n_kv_head, {out}, {}, *lse, &d));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (qkv.dtype() == DType::kBF16 || qkv.dtype() == DType::kF16) {
      Path path;
      DT_RETURN_IF_ERROR(ChoosePath(ctx, qkv.dtype(), d, {&qkv, out}, &path));
      if (path == Path::kCudnn) {
        return CudnnAttentionForward(ctx, qkv.dtype(), out->data(), lse->data<float>(), qkv.data(), d.b, d.t, d.nh,
                                     d.nkv, d.hs);
      }
      if (path == Path::kFlash) {
        auto* fwd = qkv.dtype() == DType::kF16 ? FlashAttentionForwardFp16 : FlashAttentionForwardBf16;
        return fwd(out->data<uint16_t>(), lse->data<float>(), qkv.data<uint16_t>(), d.b, d.t, d.nh, d.nkv, d.hs,
                   ctx.stream());
      }
      Tensor ws;
      DT_RETURN_IF_ERROR(GemmWorkspace(ctx, d, /*backward=*/false, &ws));
      return AttentionForwardGemmBf16(*ctx.blas(), out->data<uint16_t>(), lse->data<float>(), qkv.data<uint16_t>(), d.b,
                                      d.t, d.nh, d.nkv, d.hs, ws.data(), ctx.stream());
    }
    return AttentionForwardCuda(out->data<float>(), lse->data<float>(), qkv.data<float>(), d.b, d.t, d.nh, d.nkv, d.hs,
                                ctx.stream());
#else
    return Status::Unavailable("AttentionForward: CUDA tensor in a build without CUDA");
#endif
  }
  if (qkv.dtype() == DType::kF32) {
    AttentionForwardCpu(out->data<float>(), lse->data<float>(), qkv.data<float>(), d.b, d.t, d.nh, d.nkv, d.hs);
  } else {
    AttentionForwardCpu(out->data<double>(), lse->data<double>(), qkv.data<double>(), d.b, d.t, d.nh, d.nkv, d.hs);
  }
  return Status::OK();
}

Status AttentionBackward(DeviceContext& ctx, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                         const Tensor& dout, int64_t n_head, int64_t n_kv_head, Tensor* dqkv) {
  DT_CHECK_ARG(dqkv != nullptr, "AttentionBackward: dqkv is null");
  Dims d;
  DT_RETURN_IF_ERROR(CheckArgs(ctx, "AttentionBackward", qkv, n_head, n_kv_head, {&out, &dout}, {dqkv}, lse, &d));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    // Workspaces go back to the caching allocator when they leave scope; the allocator is stream-ordered on the
    // context's stream, so the work queued below finishes with them before any later reuse.
    if (qkv.dtype() == DType::kBF16 || qkv.dtype() == DType::kF16) {
      Path path;
      DT_RETURN_IF_ERROR(ChoosePath(ctx, qkv.dtype(), d, {&qkv, &out, &dout, dqkv}, &path));
      if (path == Path::kCudnn) {
        return CudnnAttentionBackward(ctx, qkv.dtype(), dqkv->data(), dout.data(), qkv.data(), out.data(),
                                      lse.data<float>(), d.b, d.t, d.nh, d.nkv, d.hs);
      }
      if (path == Path::kFlash) {
        Tensor delta;
        DT_RETURN_IF_ERROR(Tensor::Empty({d.b, d.nh, d.t}, DType::kF32, ctx.allocator(), &delta));
        auto* bwd = qkv.dtype() == DType::kF16 ? FlashAttentionBackwardFp16 : FlashAttentionBackwardBf16;
        return bwd(dqkv->data<uint16_t>(), delta.data<float>(), dout.data<uint16_t>(), qkv.data<uint16_t>(),
                   out.data<uint16_t>(), lse.data<float>(), d.b, d.t, d.nh, d.nkv, d.hs, ctx.stream());
      }
      Tensor ws;
      DT_RETURN_IF_ERROR(GemmWorkspace(ctx, d, /*backward=*/true, &ws));
      return AttentionBackwardGemmBf16(*ctx.blas(), dqkv->data<uint16_t>(), dout.data<uint16_t>(), qkv.data<uint16_t>(),
                                       out.data<uint16_t>(), lse.data<float>(), d.b, d.t, d.nh, d.nkv, d.hs, ws.data(),
                                       ctx.stream());
    }
    Tensor delta;
    DT_RETURN_IF_ERROR(Tensor::Empty({d.b, d.nh, d.t}, DType::kF32, ctx.allocator(), &delta));
    return AttentionBackwardCuda(dqkv->data<float>(), delta.data<float>(), dout.data<float>(), qkv.data<float>(),
                                 out.data<float>(), lse.data<float>(), d.b, d.t, d.nh, d.nkv, d.hs, ctx.stream());
#else
    return Status::Unavailable("AttentionBackward: CUDA tensor in a build without CUDA");
#endif
  }
  if (qkv.dtype() == DType::kF32) {
    AttentionBackwardCpu(dqkv->data<float>(), dout.data<float>(), qkv.data<float>(), out.data<float>(),
                         lse.data<float>(), d.b, d.t, d.nh, d.nkv, d.hs);
  } else {
    AttentionBackwardCpu(dqkv->data<double>(), dout.data<double>(), qkv.data<double>(), out.data<double>(),
                         lse.data<double>(), d.b, d.t, d.nh, d.nkv, d.hs);
  }
  return Status::OK();
}

Status AttentionForward(DeviceContext& ctx, const Tensor& qkv, int64_t n_head, Tensor* out, Tensor* lse) {
  return AttentionForward(ctx, qkv, n_head, n_head, out, lse);
}

Status AttentionBackward(DeviceContext& ctx, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                         const Tensor& dout, int64_t n_head, Tensor* dqkv) {
  return AttentionBackward(ctx, qkv, out, lse, dout, n_head, n_head, dqkv);
}

}  // namespace dtrain::ops
