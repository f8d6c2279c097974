#include "runtime/optim/staged_args.h"

#include <cstring>

#include "core/check.h"
#if DT_HAVE_CUDA
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {

StagedArgs::~StagedArgs() = default;

Status StagedArgs::Create(DeviceContext& ctx, size_t bytes, std::unique_ptr<StagedArgs>* out) {
  DT_CHECK_ARG(bytes > 0 && out != nullptr, "StagedArgs: need bytes > 0 and an output");
  std::unique_ptr<StagedArgs> s(new StagedArgs());  // private constructor
  s->bytes_ = bytes;
  const auto n = static_cast<int64_t>(bytes);
  DT_RETURN_IF_ERROR(Tensor::Empty({n}, DType::kU8, ctx.allocator(), &s->device_));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    DT_RETURN_IF_ERROR(Tensor::Empty({kSlots * n}, DType::kU8, ctx.pinned_allocator(), &s->pinned_));
    for (int i = 0; i < kSlots; ++i) {
      s->copied_.push_back(std::make_unique<CudaEvent>());
      DT_RETURN_IF_ERROR(CudaEvent::Create(s->copied_.back().get()));
    }
    s->in_flight_.assign(kSlots, false);
#else
    return Status::Unavailable("StagedArgs: CUDA context in a build without CUDA");
#endif
  }
  *out = std::move(s);
  return Status::OK();
}

Status StagedArgs::Stage(DeviceContext& ctx, const void* data, size_t n) {
  DT_CHECK_ARG(n <= bytes_, "StagedArgs: " << n << " bytes into a buffer of " << bytes_);
  if (!ctx.is_cuda()) {
    std::memcpy(device_.data(), data, n);
    return Status::OK();
  }
#if DT_HAVE_CUDA
  const int slot = next_;
  next_ = (next_ + 1) % kSlots;
  // Sync point (normally a no-op): the slot's previous copy, kSlots stages ago, must have read it.
  if (in_flight_[slot]) DT_RETURN_IF_ERROR(copied_[slot]->Synchronize());
  Tensor src;
  DT_RETURN_IF_ERROR(pinned_.View(slot * static_cast<int64_t>(bytes_), {static_cast<int64_t>(n)}, &src));
  std::memcpy(src.data(), data, n);
  Tensor dst;
  DT_RETURN_IF_ERROR(device_.View(0, {static_cast<int64_t>(n)}, &dst));
  DT_RETURN_IF_ERROR(dst.CopyFrom(src, ctx.stream()));
  DT_RETURN_IF_ERROR(copied_[slot]->Record(ctx.stream()));
  in_flight_[slot] = true;
  return Status::OK();
#else
  return Status::Unavailable("StagedArgs: CUDA context in a build without CUDA");
#endif
}

}  // namespace dtrain::runtime
