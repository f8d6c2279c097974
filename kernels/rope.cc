#include "kernels/rope.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/half.h"

namespace dtrain::ops {

void RopeInvFreqCpu(float* inv_freq, int64_t head_size, double theta, const RopeScaling& scaling) {
  const int64_t half = head_size / 2;
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i) {
    // HF: 1.0 / (base ** (arange(0, hs, 2).float() / hs)), every step in fp32.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_size);
    inv_freq[i] = 1.0f / static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(expo)));
  }
  if (scaling.kind != RopeScaling::Kind::kLlama3) return;
  // transformers' _compute_llama3_parameters. Its Python scalars are doubles (low_freq_wavelen = old_context_len /
  // low_freq_factor, high_freq_factor - low_freq_factor: Python arithmetic); each torch op taking one rounds it to
  // fp32 (a wrapped number takes the tensor's dtype). Every line below is one torch op, one f32 rounding (this file
  // is compiled as ISO C++ without FMA: no contraction).
  const double old_context_len = static_cast<double>(scaling.original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(old_context_len / scaling.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(old_context_len / scaling.high_freq_factor);
  const float factor = static_cast<float>(scaling.factor), low = static_cast<float>(scaling.low_freq_factor);
  const float span = static_cast<float>(scaling.high_freq_factor - scaling.low_freq_factor);
  const float two_pi = static_cast<float>(2.0 * 3.14159265358979323846);  // Python's 2 * math.pi, to fp32
  const float old_len = static_cast<float>(old_context_len);
  for (int64_t i = 0; i < half; ++i) {
    const float f = inv_freq[i];
    const float wavelen = (1.0f / f) * two_pi;  // 2 * math.pi / inv_freq: Tensor.__rtruediv__ is reciprocal() * other
    const float scaled = wavelen > low_freq_wavelen ? f / factor : f;  // where(wavelen > low_freq_wavelen, ...)
    const float ratio = (1.0f / wavelen) * old_len;                    // old_context_len / wavelen
    const float smooth = (ratio - low) / span;                         // (... - low_freq_factor) / (high - low)
    const float a = (1.0f - smooth) * scaled, b = smooth * scaled;
    const float smoothed = a / factor + b;  // (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    inv_freq[i] = medium ? smoothed : scaled;
  }
}

void RopeTableCpu(float* cos, float* sin, int64_t max_seq_len, int64_t head_size, double theta,
                  const RopeScaling& scaling) {
  const int64_t half = head_size / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  RopeInvFreqCpu(inv_freq.data(), head_size, theta, scaling);
  for (int64_t i = 0; i < half; ++i) {
    for (int64_t t = 0; t < max_seq_len; ++t) {
      const float angle = static_cast<float>(t) * inv_freq[i];  // HF: inv_freq @ position_ids in fp32 (one product)
      cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

template <typename T>
void RopeCpu(T* qkv, const float* cos, const float* sin, int64_t b, int64_t t, int64_t n_head, int64_t n_kv_head,
             int64_t head_size, bool backward) {
  const int64_t half = head_size / 2, row = (n_head + 2 * n_kv_head) * head_size;
  const T sign = backward ? T(-1) : T(1);
  for (int64_t bt = 0; bt < b * t; ++bt) {
    const int64_t pos = bt % t;
    for (int64_t h = 0; h < n_head + n_kv_head; ++h) {  // q heads, then k heads; v follows untouched
      T* x = qkv + bt * row + h * head_size;
      for (int64_t i = 0; i < half; ++i) {
        const T c = cos[pos * half + i], s = sign * T(sin[pos * half + i]);
        const T x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x1 * c + x0 * s;
      }
    }
  }
}

template void RopeCpu<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, bool);
template void RopeCpu<double>(double*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, bool);

Status RopeTable(DeviceContext& ctx, int64_t max_seq_len, int64_t head_size, double theta, Tensor* cos, Tensor* sin,
                 const RopeScaling& scaling) {
  DT_CHECK_ARG(cos != nullptr && sin != nullptr, "RopeTable: null output");
  DT_CHECK_ARG(max_seq_len > 0 && head_size > 0 && head_size % 2 == 0 && theta > 0,
               "RopeTable: needs max_seq_len > 0, an even head_size > 0 and theta > 0, got max_seq_len "
                   << max_seq_len << ", head_size " << head_size << ", theta " << theta);
  if (scaling.kind == RopeScaling::Kind::kLlama3) {
    DT_CHECK_ARG(scaling.factor >= 1 && scaling.low_freq_factor > 0 &&
                     scaling.high_freq_factor > scaling.low_freq_factor &&
                     scaling.original_max_position_embeddings >= 1,
                 "RopeTable: llama3 scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
                 "original_max_position_embeddings >= 1, got factor "
                     << scaling.factor << ", low_freq_factor " << scaling.low_freq_factor << ", high_freq_factor "
                     << scaling.high_freq_factor << ", original_max_position_embeddings "
                     << scaling.original_max_position_embeddings);
  }
  const std::vector<int64_t> shape = {max_seq_len, head_size / 2};
  DT_RETURN_IF_ERROR(Tensor::Empty(shape, DType::kF32, ctx.allocator(), cos));
  DT_RETURN_IF_ERROR(Tensor::Empty(shape, DType::kF32, ctx.allocator(), sin));
  if (!ctx.is_cuda()) {
    RopeTableCpu(cos->data<float>(), sin->data<float>(), max_seq_len, head_size, theta, scaling);
    return Status::OK();
  }
  std::vector<float> host_cos(static_cast<size_t>(cos->numel())), host_sin(host_cos.size());
  RopeTableCpu(host_cos.data(), host_sin.data(), max_seq_len, head_size, theta, scaling);
  DT_RETURN_IF_ERROR(cos->CopyFrom(Tensor::Wrap(host_cos.data(), shape, DType::kF32, DeviceType::kCPU), ctx.stream()));
  DT_RETURN_IF_ERROR(sin->CopyFrom(Tensor::Wrap(host_sin.data(), shape, DType::kF32, DeviceType::kCPU), ctx.stream()));
  return ctx.Synchronize();  // the host vectors die on return: the copies must have read them (setup only)
}

namespace {

// qkv [B, T, (n_head + 2 n_kv_head) * hs] on ctx's device in a supported dtype; cos, sin f32 [rows, hs/2] with
// T <= rows and hs even. Sets *head_size.
Status CheckArgs(const DeviceContext& ctx, const char* op, const Tensor& cos, const Tensor& sin, int64_t n_head,
                 int64_t n_kv_head, const Tensor* qkv, int64_t* head_size) {
  DT_CHECK_ARG(qkv != nullptr, op << ": null qkv");
  DT_CHECK_ARG(n_head >= 1 && n_kv_head >= 1 && n_kv_head <= n_head,
               op << ": needs n_head >= n_kv_head >= 1, got n_head " << n_head << ", n_kv_head " << n_kv_head);
  DT_CHECK_ARG(qkv->device() == ctx.type() && cos.device() == ctx.type() && sin.device() == ctx.type(),
               op << ": qkv " << qkv->ToString() << ", cos " << cos.ToString() << ", sin " << sin.ToString()
                  << " not all on " << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(qkv->dtype() == DType::kF32 || IsHalfFloat(qkv->dtype()),
                 op << ": CUDA supports f32, bf16 and f16, got " << qkv->ToString());
  } else {
    DT_CHECK_ARG(qkv->dtype() == DType::kF32 || qkv->dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << qkv->ToString());
  }
  DT_CHECK_ARG(
      cos.ndim() == 2 && cos.dtype() == DType::kF32 && sin.shape() == cos.shape() && sin.dtype() == DType::kF32 &&
          cos.dim(1) > 0,
      op << ": cos and sin must be one f32 [rows, hs/2] shape, got " << cos.ToString() << ", " << sin.ToString());
  const int64_t hs = 2 * cos.dim(1), heads = n_head + 2 * n_kv_head;
  DT_CHECK_ARG(qkv->ndim() == 3 && qkv->dim(2) == heads * hs && qkv->dim(1) <= cos.dim(0),
               op << ": qkv " << qkv->ToString() << " must be [B, T, (n_head + 2 n_kv_head) * hs] = [B, T, " << heads
                  << " * " << hs << "] with T <= " << cos.dim(0) << " (the table " << cos.ToString() << ")");
  *head_size = hs;
  return Status::OK();
}

Status Run(DeviceContext& ctx, const char* op, const Tensor& cos, const Tensor& sin, int64_t n_head, int64_t n_kv_head,
           Tensor* qkv, bool backward) {
  int64_t hs = 0;
  DT_RETURN_IF_ERROR(CheckArgs(ctx, op, cos, sin, n_head, n_kv_head, qkv, &hs));
  const int64_t b = qkv->dim(0), t = qkv->dim(1);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (IsHalfFloat(qkv->dtype())) {
      const auto fn = qkv->dtype() == DType::kBF16 ? RopeCudaBf16 : RopeCudaF16;
      return fn(qkv->data<uint16_t>(), cos.data<float>(), sin.data<float>(), b, t, n_head, n_kv_head, hs, backward,
                ctx.stream());
    }
    return RopeCuda(qkv->data<float>(), cos.data<float>(), sin.data<float>(), b, t, n_head, n_kv_head, hs, backward,
                    ctx.stream());
#else
    return Status::Unavailable(std::string(op) + ": CUDA tensor in a build without CUDA");
#endif
  }
  if (qkv->dtype() == DType::kF32) {
    RopeCpu<float>(qkv->data<float>(), cos.data<float>(), sin.data<float>(), b, t, n_head, n_kv_head, hs, backward);
  } else {
    RopeCpu<double>(qkv->data<double>(), cos.data<float>(), sin.data<float>(), b, t, n_head, n_kv_head, hs, backward);
  }
  return Status::OK();
}

}  // namespace

Status RopeForward(DeviceContext& ctx, const Tensor& cos, const Tensor& sin, int64_t n_head, int64_t n_kv_head,
                   Tensor* qkv) {
  return Run(ctx, "RopeForward", cos, sin, n_head, n_kv_head, qkv, /*backward=*/false);
}

Status RopeBackward(DeviceContext& ctx, const Tensor& cos, const Tensor& sin, int64_t n_head, int64_t n_kv_head,
                    Tensor* dqkv) {
  return Run(ctx, "RopeBackward", cos, sin, n_head, n_kv_head, dqkv, /*backward=*/true);
}

}  // namespace dtrain::ops
