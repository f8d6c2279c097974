#include "kernels/softmax_xent.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/check.h"
#include "kernels/half.h"

namespace dtrain::ops {

template <typename T>
Status SoftmaxCrossEntropyCpu(T* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t b, int64_t v,
                              int64_t valid_cols, T grad_scale, bool from_losses) {
  const int64_t u = valid_cols;
  for (int64_t i = 0; i < b; ++i) {
    DT_CHECK_ARG(targets[i] >= 0 && targets[i] < u,
                 "SoftmaxCrossEntropy: target " << targets[i] << " of row " << i << " is outside [0, " << u << ")");
  }
  DT_CHECK_ARG(!from_losses || dlogits != nullptr, "SoftmaxCrossEntropy: from_losses needs dlogits");
  for (int64_t i = 0; i < b; ++i) {
    const T* row = logits + i * v;
    const int32_t t = targets[i];
    if (from_losses) {  // logsumexp = loss + x[t]; read before the row may be overwritten
      const double lse = static_cast<double>(losses[i]) + row[t];
      T* drow = dlogits + i * v;
      for (int64_t j = 0; j < u; ++j) {
        drow[j] = static_cast<T>((std::exp(row[j] - lse) - (j == t ? 1.0 : 0.0)) * grad_scale);
      }
      for (int64_t j = u; j < v; ++j) drow[j] = T(0);
      continue;
    }
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < u; ++j) max = std::fmax(max, static_cast<double>(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < u; ++j) sum += std::exp(row[j] - max);
    losses[i] = static_cast<T>(std::log(sum) + max - row[t]);  // before dlogits: it may overwrite the row
    if (dlogits != nullptr) {
      T* drow = dlogits + i * v;
      for (int64_t j = 0; j < u; ++j) {
        drow[j] = static_cast<T>((std::exp(row[j] - max) / sum - (j == t ? 1.0 : 0.0)) * grad_scale);
      }
      for (int64_t j = u; j < v; ++j) drow[j] = T(0);
    }
  }
  return Status::OK();
}

template <typename T>
void ArgmaxCpu(int32_t* out, const T* logits, int64_t b, int64_t v, int64_t valid_cols) {
  for (int64_t i = 0; i < b; ++i) {
    const T* row = logits + i * v;
    T best = -std::numeric_limits<T>::infinity();
    int32_t best_j = 0;
    for (int64_t j = 0; j < valid_cols; ++j) {
      if (row[j] > best) {
        best = row[j];
        best_j = static_cast<int32_t>(j);
      }
    }
    out[i] = best_j;
  }
}

template Status SoftmaxCrossEntropyCpu<float>(float*, float*, const float*, const int32_t*, int64_t, int64_t, int64_t,
                                              float, bool);
template Status SoftmaxCrossEntropyCpu<double>(double*, double*, const double*, const int32_t*, int64_t, int64_t,
                                               int64_t, double, bool);
template void ArgmaxCpu<float>(int32_t*, const float*, int64_t, int64_t, int64_t);
template void ArgmaxCpu<double>(int32_t*, const double*, int64_t, int64_t, int64_t);

namespace {

// logits [B,V] with V in (0, 2^31), a supported dtype for the context, on the context's device; resolves
// valid_cols (-1 -> V) and checks 0 < valid_cols <= V.
Status CheckLogits(const DeviceContext& ctx, const char* op, const Tensor& logits, int64_t* valid_cols) {
  DT_CHECK_ARG(logits.ndim() == 2, op << ": logits " << logits.ToString() << " must be 2-D [B,V]");
  DT_CHECK_ARG(logits.dim(1) > 0 && logits.dim(1) <= std::numeric_limits<int32_t>::max(),
               op << ": logits " << logits.ToString() << " needs 0 < V < 2^31");
  DT_CHECK_ARG(logits.device() == ctx.type(),
               op << ": logits " << logits.ToString() << " not on " << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(logits.dtype() == DType::kF32 || IsHalfFloat(logits.dtype()),
                 op << ": CUDA supports f32, bf16 and f16, got " << logits.ToString());
  } else {
    DT_CHECK_ARG(logits.dtype() == DType::kF32 || logits.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << logits.ToString());
  }
  if (*valid_cols == -1) *valid_cols = logits.dim(1);
  DT_CHECK_ARG(*valid_cols > 0 && *valid_cols <= logits.dim(1), op << ": valid_cols " << *valid_cols
                                                                   << " must be in [1, " << logits.dim(1)
                                                                   << "] for logits " << logits.ToString());
  return Status::OK();
}

// An i32[B] tensor on the context's device.
Status CheckRowIndex(const DeviceContext& ctx, const char* op, const char* what, const Tensor& logits,
                     const Tensor& idx) {
  DT_CHECK_ARG(idx.ndim() == 1 && idx.dim(0) == logits.dim(0) && idx.dtype() == DType::kI32,
               op << ": " << what << " " << idx.ToString() << " must be i32[" << logits.dim(0) << "] for logits "
                  << logits.ToString());
  DT_CHECK_ARG(idx.device() == ctx.type(),
               op << ": " << what << " " << idx.ToString() << " not on " << DeviceName(ctx.type()));
  return Status::OK();
}

// Both entry points: checks, then the raw layer (from_losses: losses are read, dlogits required).
Status Xent(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, Tensor* losses, Tensor* dlogits,
            float grad_scale, int64_t valid_cols, bool from_losses) {
  const char* op = from_losses ? "SoftmaxCrossEntropyBackward" : "SoftmaxCrossEntropy";
  DT_CHECK_ARG(losses != nullptr, op << ": losses is null");
  DT_CHECK_ARG(!from_losses || dlogits != nullptr, op << ": dlogits is null");
  DT_RETURN_IF_ERROR(CheckLogits(ctx, op, logits, &valid_cols));
  DT_RETURN_IF_ERROR(CheckRowIndex(ctx, op, "targets", logits, targets));
  const bool half = IsHalfFloat(logits.dtype());
  const DType loss_dtype = half ? DType::kF32 : logits.dtype();
  DT_CHECK_ARG(losses->ndim() == 1 && losses->dim(0) == logits.dim(0) && losses->dtype() == loss_dtype &&
                   losses->device() == ctx.type(),
               op << ": losses " << losses->ToString() << " must be " << DTypeName(loss_dtype) << "[" << logits.dim(0)
                  << "] for logits " << logits.ToString());
  if (dlogits != nullptr) {
    DT_CHECK_ARG(
        dlogits->shape() == logits.shape() && dlogits->dtype() == logits.dtype() && dlogits->device() == ctx.type(),
        op << ": dlogits " << dlogits->ToString() << " must match logits " << logits.ToString());
  }
  const int64_t b = logits.dim(0), v = logits.dim(1);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (half) {
      const auto fn = logits.dtype() == DType::kBF16 ? SoftmaxCrossEntropyCudaBf16 : SoftmaxCrossEntropyCudaF16;
      return fn(losses->data<float>(), dlogits ? dlogits->data<uint16_t>() : nullptr, logits.data<uint16_t>(),
                targets.data<int32_t>(), b, v, valid_cols, grad_scale, from_losses, ctx.stream());
    }
    return SoftmaxCrossEntropyCuda(losses->data<float>(), dlogits ? dlogits->data<float>() : nullptr,
                                   logits.data<float>(), targets.data<int32_t>(), b, v, valid_cols, grad_scale,
                                   from_losses, ctx.stream());
#else
    return Status::Unavailable(std::string(op) + ": CUDA tensor in a build without CUDA");
#endif
  }
  if (logits.dtype() == DType::kF32) {
    return SoftmaxCrossEntropyCpu<float>(losses->data<float>(), dlogits ? dlogits->data<float>() : nullptr,
                                         logits.data<float>(), targets.data<int32_t>(), b, v, valid_cols, grad_scale,
                                         from_losses);
  }
  return SoftmaxCrossEntropyCpu<double>(losses->data<double>(), dlogits ? dlogits->data<double>() : nullptr,
                                        logits.data<double>(), targets.data<int32_t>(), b, v, valid_cols, grad_scale,
                                        from_losses);
}

}  // namespace

Status SoftmaxCrossEntropy(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, Tensor* losses,
                           Tensor* dlogits, float grad_scale, int64_t valid_cols) {
  return Xent(ctx, logits, targets, losses, dlogits, grad_scale, valid_cols, /*from_losses=*/false);
}

Status SoftmaxCrossEntropyBackward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets,
                                   const Tensor& losses, Tensor* dlogits, float grad_scale, int64_t valid_cols) {
  Tensor in = losses;  // a handle; read only on this path
  return Xent(ctx, logits, targets, &in, dlogits, grad_scale, valid_cols, /*from_losses=*/true);
}

Status Argmax(DeviceContext& ctx, const Tensor& logits, Tensor* out, int64_t valid_cols) {
  DT_CHECK_ARG(out != nullptr, "Argmax: out is null");
  DT_RETURN_IF_ERROR(CheckLogits(ctx, "Argmax", logits, &valid_cols));
  DT_RETURN_IF_ERROR(CheckRowIndex(ctx, "Argmax", "out", logits, *out));
  const int64_t b = logits.dim(0), v = logits.dim(1);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (IsHalfFloat(logits.dtype())) {
      const auto fn = logits.dtype() == DType::kBF16 ? ArgmaxCudaBf16 : ArgmaxCudaF16;
      return fn(out->data<int32_t>(), logits.data<uint16_t>(), b, v, valid_cols, ctx.stream());
    }
    return ArgmaxCuda(out->data<int32_t>(), logits.data<float>(), b, v, valid_cols, ctx.stream());
#else
    return Status::Unavailable("Argmax: CUDA tensor in a build without CUDA");
#endif
  }
  if (logits.dtype() == DType::kF32) {
    ArgmaxCpu(out->data<int32_t>(), logits.data<float>(), b, v, valid_cols);
  } else {
    ArgmaxCpu(out->data<int32_t>(), logits.data<double>(), b, v, valid_cols);
  }
  return Status::OK();
}

}  // namespace dtrain::ops
