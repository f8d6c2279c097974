#include "runtime/optim/offloaded_state.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/nvtx.h"
#include "core/parallel_for.h"
#if DT_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {

#if DT_HAVE_CUDA
struct OffloadedState::Gpu {
  CudaStream h2d, d2h;
  std::vector<Tensor> ring;  // per state tensor: kSlots x chunk on the device
  // Per slot: its chunk is on the device (h2d -> compute), updated (compute -> d2h), back in host memory (d2h ->
  // h2d: the slot may be refilled). An event never recorded is waited on as if complete.
  CudaEvent loaded[kSlots], updated[kSlots], freed[kSlots];
  CudaEvent written;  // the last Update's final copy back (Settle; the next Update's copies in wait for it)
  ~Gpu() {
    h2d.SynchronizeForTeardown("OffloadedState");
    d2h.SynchronizeForTeardown("OffloadedState");
  }
};
#else
struct OffloadedState::Gpu {};
#endif

OffloadedState::~OffloadedState() = default;

int64_t OffloadedState::RingNumel(int64_t numel, int64_t chunk) {
  if (chunk <= 0) chunk = kDefaultChunk;
  return std::min(numel, kSlots * chunk);
}

Status OffloadedState::Create(DeviceContext& ctx, int64_t numel, DType dtype, int tensors, int64_t chunk,
                              std::unique_ptr<OffloadedState>* out) {
  DT_CHECK_ARG(out != nullptr && numel > 0 && tensors > 0,
               "OffloadedState::Create: numel " << numel << ", tensors " << tensors);
  std::unique_ptr<OffloadedState> o(new OffloadedState());  // private constructor
  o->numel_ = numel;
  o->chunk_ = chunk > 0 ? chunk : kDefaultChunk;
  o->host_.resize(tensors);
  const size_t threads = std::max(1u, std::thread::hardware_concurrency());
  for (Tensor& t : o->host_) {
    DT_RETURN_IF_ERROR(Tensor::Empty({numel}, dtype, ctx.pinned_allocator(), &t)
                           .WithContext("optim.offload cpu: page-locked host memory for the optimizer state (" +
                                        std::to_string(tensors) + " x " + std::to_string(numel) + " " +
                                        DTypeName(dtype) + ")"));
    // Zeroed on every core: the state of an 8B model is 64 GB, a minute for one thread.
    char* base = static_cast<char*>(t.data());
    const size_t bytes = t.nbytes(), piece = size_t{64} << 20, pieces = (bytes + piece - 1) / piece;
    DT_RETURN_IF_ERROR(ParallelFor(pieces, threads, [&](size_t i) {
      std::memset(base + i * piece, 0, std::min(piece, bytes - i * piece));
      return Status::OK();
    }));
  }
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    auto g = std::make_unique<Gpu>();
    DT_RETURN_IF_ERROR(CudaStream::Create(&g->h2d));
    DT_RETURN_IF_ERROR(CudaStream::Create(&g->d2h));
    for (int s = 0; s < kSlots; ++s) {
      DT_RETURN_IF_ERROR(CudaEvent::Create(&g->loaded[s]));
      DT_RETURN_IF_ERROR(CudaEvent::Create(&g->updated[s]));
      DT_RETURN_IF_ERROR(CudaEvent::Create(&g->freed[s]));
    }
    DT_RETURN_IF_ERROR(CudaEvent::Create(&g->written));
    g->ring.resize(tensors);
    for (Tensor& t : g->ring)
      DT_RETURN_IF_ERROR(Tensor::Empty({RingNumel(numel, o->chunk_)}, dtype, ctx.allocator(), &t));
    o->gpu_ = std::move(g);
#else
    return Status::Unavailable("OffloadedState on a CUDA context, but dtrain was built without CUDA");
#endif
  }
  *out = std::move(o);
  return Status::OK();
}

Status OffloadedState::Update(DeviceContext& ctx, const OptimAlgorithm& algo, Tensor* params, const Tensor& grads,
                              const Tensor* scale, const Tensor* skip, const Tensor* staged, int64_t offset) {
  DT_CHECK_ARG(params != nullptr && params->numel() == numel_,
               "OffloadedState::Update: params must have " << numel_ << " elements");
  return Update(ctx, algo, {Segment{params, &grads, offset, 0}}, scale, skip, staged);
}

Status OffloadedState::Update(DeviceContext& ctx, const OptimAlgorithm& algo, const std::vector<Segment>& segments,
                              const Tensor* scale, const Tensor* skip, const Tensor* staged) {
  DT_CHECK_ARG(ctx.is_cuda() == (gpu_ != nullptr), "OffloadedState::Update on another kind of context than Create's");
  for (const Segment& seg : segments) {
    DT_CHECK_ARG(seg.params != nullptr && seg.grads != nullptr && seg.grads->numel() == seg.params->numel() &&
                     seg.state_offset >= 0 && seg.state_offset + seg.params->numel() <= numel_,
                 "OffloadedState::Update: a segment of " << (seg.params ? seg.params->numel() : 0)
                                                         << " elements at state element " << seg.state_offset
                                                         << " does not fit the state's " << numel_);
  }
  DT_NVTX_RANGE("offloaded_update");
  const size_t n_state = host_.size();
  std::vector<Tensor> views(n_state);
  std::vector<Tensor*> state(n_state);
  int64_t i = 0;  // chunks so far, over all segments: the ring slot
  for (const Segment& seg : segments) {
    const int64_t numel = seg.params->numel();
    for (int64_t begin = 0; begin < numel; begin += chunk_, ++i) {
      const int64_t count = std::min(chunk_, numel - begin), at = seg.state_offset + begin;
      Tensor p, g;
      DT_RETURN_IF_ERROR(seg.params->View(begin, {count}, &p));
      DT_RETURN_IF_ERROR(seg.grads->View(begin, {count}, &g));
      if (gpu_ == nullptr) {  // CPU: in place on the host state
        for (size_t k = 0; k < n_state; ++k) {
          DT_RETURN_IF_ERROR(host_[k].View(at, {count}, &views[k]));
          state[k] = &views[k];
        }
        DT_RETURN_IF_ERROR(algo.Update(ctx, &p, g, state, scale, skip, staged, seg.offset + begin));
        continue;
      }
#if DT_HAVE_CUDA
      Gpu& q = *gpu_;
      const int s = static_cast<int>(i % kSlots);
      const size_t item = DTypeSize(host_[0].dtype()), bytes = static_cast<size_t>(count) * item;
      // In: once the slot's previous chunk is back in host memory (and, first, the previous Update's copies back).
      if (i == 0) DT_RETURN_IF_ERROR(q.written.Block(q.h2d.get()));
      DT_RETURN_IF_ERROR(q.freed[s].Block(q.h2d.get()));
      // A ring as large as the state (a state of at most kSlots chunks) holds each chunk where the state does: the
      // segments' chunks are not all chunk_ long, and never overlap there within an Update.
      const int64_t slot_at = q.ring[0].numel() == numel_ ? at : s * chunk_;
      for (size_t k = 0; k < n_state; ++k) {
        DT_RETURN_IF_ERROR(q.ring[k].View(slot_at, {count}, &views[k]));
        state[k] = &views[k];
        const char* src = static_cast<const char*>(host_[k].data()) + at * item;
        DT_CUDA_CHECK(cudaMemcpyAsync(views[k].data(), src, bytes, cudaMemcpyHostToDevice, q.h2d.get()));
      }
      DT_RETURN_IF_ERROR(q.loaded[s].Record(q.h2d.get()));
      // The update, on the compute stream (after the step's gradients and clip coefficient).
      DT_RETURN_IF_ERROR(q.loaded[s].Block(ctx.stream()));
      DT_RETURN_IF_ERROR(algo.Update(ctx, &p, g, state, scale, skip, staged, seg.offset + begin));
      DT_RETURN_IF_ERROR(q.updated[s].Record(ctx.stream()));
      // Out.
      DT_RETURN_IF_ERROR(q.updated[s].Block(q.d2h.get()));
      for (size_t k = 0; k < n_state; ++k) {
        char* dst = static_cast<char*>(host_[k].data()) + at * item;
        DT_CUDA_CHECK(cudaMemcpyAsync(dst, views[k].data(), bytes, cudaMemcpyDeviceToHost, q.d2h.get()));
      }
      DT_RETURN_IF_ERROR(q.freed[s].Record(q.d2h.get()));
#endif
    }
  }
#if DT_HAVE_CUDA
  if (gpu_ != nullptr) DT_RETURN_IF_ERROR(gpu_->written.Record(gpu_->d2h.get()));
#endif
  return Status::OK();
}

Status OffloadedState::Settle() {
#if DT_HAVE_CUDA
  if (gpu_ != nullptr) return gpu_->written.Synchronize();  // sync point: the copies back (see Ordering)
#endif
  return Status::OK();
}

}  // namespace dtrain::runtime
