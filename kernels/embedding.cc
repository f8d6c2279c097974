#include "kernels/embedding.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/half.h"

namespace dtrain::ops {

namespace {

Status CheckIds(const int32_t* ids, int64_t n, int64_t v) {
  for (int64_t i = 0; i < n; ++i) {
    DT_CHECK_ARG(ids[i] >= 0 && ids[i] < v,
                 "Embedding: id " << ids[i] << " at " << i << " is outside [0, " << v << ")");
  }
  return Status::OK();
}

}  // namespace

template <typename T>
Status EmbeddingForwardCpu(T* out, const int32_t* ids, const T* table, int64_t n, int64_t v, int64_t c) {
  DT_RETURN_IF_ERROR(CheckIds(ids, n, v));
  for (int64_t i = 0; i < n; ++i) std::copy(table + ids[i] * c, table + (ids[i] + 1) * c, out + i * c);
  return Status::OK();
}

template <typename T>
Status EmbeddingBackwardCpu(T* dtable, const int32_t* ids, const T* dout, int64_t n, int64_t v, int64_t c) {
  DT_RETURN_IF_ERROR(CheckIds(ids, n, v));
  for (int64_t i = 0; i < n; ++i) {
    T* row = dtable + ids[i] * c;
    const T* g = dout + i * c;
    for (int64_t j = 0; j < c; ++j) row[j] += g[j];
  }
  return Status::OK();
}

template Status EmbeddingForwardCpu<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t);
template Status EmbeddingForwardCpu<double>(double*, const int32_t*, const double*, int64_t, int64_t, int64_t);
template Status EmbeddingBackwardCpu<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t);
template Status EmbeddingBackwardCpu<double>(double*, const int32_t*, const double*, int64_t, int64_t, int64_t);

namespace {

// ids i32[...], table [V,C], rows = ids.shape + [C]; table and rows share a supported dtype, or (CUDA) the rows
// are bf16/f16 next to an f32 table; all on the context's device.
Status CheckArgs(const DeviceContext& ctx, const char* op, const Tensor& ids, const Tensor& table, const Tensor& rows) {
  std::vector<int64_t> want = ids.shape();
  want.push_back(table.ndim() == 2 ? table.dim(1) : -1);
  DT_CHECK_ARG(ids.dtype() == DType::kI32, op << ": ids " << ids.ToString() << " must be i32");
  DT_CHECK_ARG(table.ndim() == 2 && rows.shape() == want, op << ": shapes do not match: ids " << ids.ToString()
                                                             << ", table " << table.ToString() << ", rows "
                                                             << rows.ToString() << " (rows must be ids.shape + [C])");
  DT_CHECK_ARG(table.dtype() == rows.dtype() || (ctx.is_cuda() && IsHalfFloat(rows.dtype())),
               op << ": dtypes differ: table " << table.ToString() << ", rows " << rows.ToString());
  DT_CHECK_ARG(ids.device() == ctx.type() && table.device() == ctx.type() && rows.device() == ctx.type(),
               op << ": " << ids.ToString() << ", " << table.ToString() << ", " << rows.ToString() << " not all on "
                  << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(table.dtype() == DType::kF32, op << ": CUDA supports f32 only, got " << table.ToString());
  } else {
    DT_CHECK_ARG(table.dtype() == DType::kF32 || table.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << table.ToString());
  }
  return Status::OK();
}

}  // namespace

Status EmbeddingForward(DeviceContext& ctx, const Tensor& ids, const Tensor& table, Tensor* out) {
  DT_CHECK_ARG(out != nullptr, "EmbeddingForward: out is null");
  // A bf16 table (bf16 master weights) into bf16 rows, CUDA only: checked as an f32 table would be.
  const bool bf16_table = table.dtype() == DType::kBF16 && out->dtype() == DType::kBF16 && ctx.is_cuda();
  const Tensor table_like = bf16_table ? Tensor::Wrap(table.data(), table.shape(), DType::kF32, table.device()) : table;
  DT_RETURN_IF_ERROR(CheckArgs(ctx, "EmbeddingForward", ids, table_like, *out));
  const int64_t n = ids.numel(), v = table.dim(0), c = table.dim(1);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (bf16_table) {
      return EmbeddingForwardCudaBf16Table(out->data<uint16_t>(), ids.data<int32_t>(), table.data<uint16_t>(), n, v, c,
                                           ctx.stream());
    }
    if (IsHalfFloat(out->dtype())) {
      const auto fn = out->dtype() == DType::kBF16 ? EmbeddingForwardCudaBf16 : EmbeddingForwardCudaF16;
      return fn(out->data<uint16_t>(), ids.data<int32_t>(), table.data<float>(), n, v, c, ctx.stream());
    }
    return EmbeddingForwardCuda(out->data<float>(), ids.data<int32_t>(), table.data<float>(), n, v, c, ctx.stream());
#else
    return Status::Unavailable("EmbeddingForward: CUDA tensor in a build without CUDA");
#endif
  }
  if (table.dtype() == DType::kF32) {
    return EmbeddingForwardCpu(out->data<float>(), ids.data<int32_t>(), table.data<float>(), n, v, c);
  }
  return EmbeddingForwardCpu(out->data<double>(), ids.data<int32_t>(), table.data<double>(), n, v, c);
}

Status EmbeddingBackward(DeviceContext& ctx, const Tensor& ids, const Tensor& dout, Tensor* dtable) {
  DT_CHECK_ARG(dtable != nullptr, "EmbeddingBackward: dtable is null");
  // A bf16 dtable beside bf16 rows (bf16 gradients), CUDA only: checked as an f32 dtable would be.
  const bool bf16_grad = dtable->dtype() == DType::kBF16 && dout.dtype() == DType::kBF16 && ctx.is_cuda();
  const Tensor dtable_like =
      bf16_grad ? Tensor::Wrap(dtable->data(), dtable->shape(), DType::kF32, dtable->device()) : *dtable;
  DT_RETURN_IF_ERROR(CheckArgs(ctx, "EmbeddingBackward", ids, dtable_like, dout));
  const int64_t n = ids.numel(), v = dtable->dim(0), c = dtable->dim(1);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    // Sort buffers from the caching allocator: stream-ordered, so they may be reused as soon as this returns.
    size_t bytes = 0;
    DT_RETURN_IF_ERROR(EmbeddingBackwardScratchBytes(n, v, &bytes));
    Tensor scratch;
    DT_RETURN_IF_ERROR(Tensor::Empty({static_cast<int64_t>(bytes)}, DType::kU8, ctx.allocator(), &scratch));
    if (bf16_grad) {
      return EmbeddingBackwardCudaBf16Grad(dtable->data<uint16_t>(), ids.data<int32_t>(), dout.data<uint16_t>(), n, v,
                                           c, scratch.data(), bytes, ctx.stream());
    }
    if (IsHalfFloat(dout.dtype())) {
      const auto fn = dout.dtype() == DType::kBF16 ? EmbeddingBackwardCudaBf16 : EmbeddingBackwardCudaF16;
      return fn(dtable->data<float>(), ids.data<int32_t>(), dout.data<uint16_t>(), n, v, c, scratch.data(), bytes,
                ctx.stream());
    }
    return EmbeddingBackwardCuda(dtable->data<float>(), ids.data<int32_t>(), dout.data<float>(), n, v, c,
                                 scratch.data(), bytes, ctx.stream());
#else
    return Status::Unavailable("EmbeddingBackward: CUDA tensor in a build without CUDA");
#endif
  }
  if (dout.dtype() == DType::kF32) {
    return EmbeddingBackwardCpu(dtable->data<float>(), ids.data<int32_t>(), dout.data<float>(), n, v, c);
  }
  return EmbeddingBackwardCpu(dtable->data<double>(), ids.data<int32_t>(), dout.data<double>(), n, v, c);
}

}  // namespace dtrain::ops
