#include "runtime/optim/offloaded_state.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/nvtx.h"
#include "core/parallel_for.h"
#include "models/memory_plan.h"
#if DT_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {

#if DT_HAVE_CUDA
struct OffloadedState::Gpu {
  CudaStream h2d, d2h;
  std::vector<Tensor> ring;  // per state tensor: kSlots x chunk on the device (none when nothing streams)
  // Per slot: its chunk is on the device (h2d -> compute), updated (compute -> d2h), back in host memory (d2h ->
  // h2d: the slot may be refilled). An event never recorded is waited on as if complete.
  CudaEvent loaded[kSlots], updated[kSlots], freed[kSlots];
  CudaEvent written;   // the last Update's final copy back (Settle; the next Update's copies in wait for it)
  CudaEvent uploaded;  // the kept part's copy in (h2d -> compute)
  CudaEvent done;      // the last Update's last kernel (compute -> d2h: Settle's copy of the kept part)
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
  return std::max<int64_t>(0, std::min(numel, kSlots * chunk));
}

int64_t OffloadedState::KeepNumel(int64_t keep_bytes, const std::vector<DType>& dtypes, int64_t numel) {
  int64_t element = 0;  // bytes of one element of every tensor
  for (DType d : dtypes) element += static_cast<int64_t>(DTypeSize(d));
  if (keep_bytes <= 0 || element <= 0) return 0;
  return std::min(numel, keep_bytes / element);
}

Status OffloadedState::Create(DeviceContext& ctx, int64_t numel, const std::vector<DType>& dtypes, int64_t chunk,
                              int64_t keep, std::unique_ptr<OffloadedState>* out) {
  const int tensors = static_cast<int>(dtypes.size());
  DT_CHECK_ARG(out != nullptr && numel > 0 && tensors > 0,
               "OffloadedState::Create: numel " << numel << ", tensors " << tensors);
  std::unique_ptr<OffloadedState> o(new OffloadedState());  // private constructor
  o->numel_ = numel;
  o->chunk_ = chunk > 0 ? chunk : kDefaultChunk;
  o->keep_ = std::clamp<int64_t>(keep, 0, numel);
  o->host_.resize(tensors);
  const size_t threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t k = 0; k < dtypes.size(); ++k) {
    Tensor& t = o->host_[k];
    DT_RETURN_IF_ERROR(Tensor::Empty({numel}, dtypes[k], ctx.pinned_allocator(), &t)
                           .WithContext("optim.offload cpu: page-locked host memory for the optimizer state (" +
                                        std::to_string(tensors) + " x " + std::to_string(numel) + " " +
                                        DTypeName(dtypes[k]) + ")"));
    // Zeroed on every core: the state of an 8B model is 64 GB, a minute for one thread.
    char* base = static_cast<char*>(t.data());
    const size_t bytes = t.nbytes(), piece = size_t{64} << 20, pieces = (bytes + piece - 1) / piece;
    DT_RETURN_IF_ERROR(ParallelFor(pieces, threads, [&](size_t i) {
      std::memset(base + i * piece, 0, std::min(piece, bytes - i * piece));
      return Status::OK();
    }));
  }
  o->kept_.resize(o->keep_ > 0 ? tensors : 0);  // filled from host() by the first Update
  for (size_t k = 0; k < o->kept_.size(); ++k) {
    DT_RETURN_IF_ERROR(Tensor::Empty({o->keep_}, dtypes[k], ctx.allocator(), &o->kept_[k]));
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
    for (CudaEvent* e : {&g->written, &g->uploaded, &g->done}) DT_RETURN_IF_ERROR(CudaEvent::Create(e));
    const int64_t ring = RingNumel(numel - o->keep_, o->chunk_);
    g->ring.resize(ring > 0 ? tensors : 0);
    for (size_t k = 0; k < g->ring.size(); ++k) {
      DT_RETURN_IF_ERROR(Tensor::Empty({ring}, dtypes[k], ctx.allocator(), &g->ring[k]));
    }
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
  // The chunks: none spans two segments or the kept part's end.
  std::vector<Piece> streamed, kept;
  for (const Segment& seg : segments) {
    const int64_t numel = seg.params->numel();
    for (int64_t begin = 0; begin < numel;) {
      const int64_t at = seg.state_offset + begin;
      int64_t count = std::min(chunk_, numel - begin);
      if (at < keep_) count = std::min(count, keep_ - at);
      (at < keep_ ? kept : streamed).push_back({&seg, begin, count, at});
      begin += count;
    }
  }
  if (upload_ && keep_ > 0) {  // the kept part from host(), where a restore may have written it (see Ordering)
    upload_ = false;
    for (size_t k = 0; k < kept_.size(); ++k) {
      Tensor from;
      DT_RETURN_IF_ERROR(host_[k].View(0, {keep_}, &from));
#if DT_HAVE_CUDA
      if (gpu_ != nullptr) {
        if (k == 0) DT_RETURN_IF_ERROR(gpu_->written.Block(gpu_->h2d.get()));
        DT_RETURN_IF_ERROR(kept_[k].CopyFrom(from, gpu_->h2d.get()));
        continue;
      }
#endif
      DT_RETURN_IF_ERROR(kept_[k].CopyFrom(from, ctx.stream()));
    }
#if DT_HAVE_CUDA
    if (gpu_ != nullptr) {
      DT_RETURN_IF_ERROR(gpu_->uploaded.Record(gpu_->h2d.get()));
      DT_RETURN_IF_ERROR(gpu_->uploaded.Block(ctx.stream()));
    }
#endif
  }
  // The kept chunks spread evenly between the streamed ones: the compute stream runs them while it would wait for
  // the link.
  size_t next_kept = 0;
  for (size_t i = 0; i < streamed.size(); ++i) {
    DT_RETURN_IF_ERROR(UpdateStreamed(ctx, algo, streamed[i], static_cast<int64_t>(i), scale, skip, staged));
    for (const size_t until = (i + 1) * kept.size() / streamed.size(); next_kept < until; ++next_kept) {
      DT_RETURN_IF_ERROR(UpdateKept(ctx, algo, kept[next_kept], scale, skip, staged));
    }
  }
  for (; next_kept < kept.size(); ++next_kept)
    DT_RETURN_IF_ERROR(UpdateKept(ctx, algo, kept[next_kept], scale, skip, staged));
#if DT_HAVE_CUDA
  if (gpu_ != nullptr) {
    DT_RETURN_IF_ERROR(gpu_->done.Record(ctx.stream()));
    DT_RETURN_IF_ERROR(gpu_->written.Record(gpu_->d2h.get()));
  }
#endif
  return Status::OK();
}

Status OffloadedState::UpdateKept(DeviceContext& ctx, const OptimAlgorithm& algo, const Piece& c, const Tensor* scale,
                                  const Tensor* skip, const Tensor* staged) {
  std::vector<Tensor> views(kept_.size());
  std::vector<Tensor*> state(kept_.size());
  for (size_t k = 0; k < kept_.size(); ++k) {
    DT_RETURN_IF_ERROR(kept_[k].View(c.at, {c.count}, &views[k]));
    state[k] = &views[k];
  }
  Tensor p, g;
  DT_RETURN_IF_ERROR(c.seg->params->View(c.begin, {c.count}, &p));
  DT_RETURN_IF_ERROR(c.seg->grads->View(c.begin, {c.count}, &g));
  return algo.Update(ctx, &p, g, state, scale, skip, staged, c.seg->offset + c.begin);
}

Status OffloadedState::UpdateStreamed(DeviceContext& ctx, const OptimAlgorithm& algo, const Piece& c, int64_t i,
                                      const Tensor* scale, const Tensor* skip, const Tensor* staged) {
  const size_t n_state = host_.size();
  std::vector<Tensor> views(n_state);
  std::vector<Tensor*> state(n_state);
  Tensor p, g;
  DT_RETURN_IF_ERROR(c.seg->params->View(c.begin, {c.count}, &p));
  DT_RETURN_IF_ERROR(c.seg->grads->View(c.begin, {c.count}, &g));
  const int64_t offset = c.seg->offset + c.begin;
  if (gpu_ == nullptr) {  // CPU: in place on the host state
    for (size_t k = 0; k < n_state; ++k) {
      DT_RETURN_IF_ERROR(host_[k].View(c.at, {c.count}, &views[k]));
      state[k] = &views[k];
    }
    return algo.Update(ctx, &p, g, state, scale, skip, staged, offset);
  }
#if DT_HAVE_CUDA
  Gpu& q = *gpu_;
  const int s = static_cast<int>(i % kSlots);
  // In: once the slot's previous chunk is back in host memory (and, first, the previous Update's copies back).
  if (i == 0) DT_RETURN_IF_ERROR(q.written.Block(q.h2d.get()));
  DT_RETURN_IF_ERROR(q.freed[s].Block(q.h2d.get()));
  // A ring as large as the streamed part (at most kSlots chunks) holds each chunk where the state does: the
  // segments' chunks are not all chunk_ long, and never overlap there within an Update.
  const int64_t slot_at = q.ring[0].numel() == numel_ - keep_ ? c.at - keep_ : s * chunk_;
  for (size_t k = 0; k < n_state; ++k) {
    DT_RETURN_IF_ERROR(q.ring[k].View(slot_at, {c.count}, &views[k]));
    state[k] = &views[k];
    const size_t item = DTypeSize(host_[k].dtype());  // the tensors' dtypes may differ
    const char* src = static_cast<const char*>(host_[k].data()) + c.at * item;
    DT_CUDA_CHECK(cudaMemcpyAsync(views[k].data(), src, static_cast<size_t>(c.count) * item, cudaMemcpyHostToDevice,
                                  q.h2d.get()));
  }
  DT_RETURN_IF_ERROR(q.loaded[s].Record(q.h2d.get()));
  // The update, on the compute stream (after the step's gradients and clip coefficient).
  DT_RETURN_IF_ERROR(q.loaded[s].Block(ctx.stream()));
  DT_RETURN_IF_ERROR(algo.Update(ctx, &p, g, state, scale, skip, staged, offset));
  DT_RETURN_IF_ERROR(q.updated[s].Record(ctx.stream()));
  // Out.
  DT_RETURN_IF_ERROR(q.updated[s].Block(q.d2h.get()));
  for (size_t k = 0; k < n_state; ++k) {
    const size_t item = DTypeSize(host_[k].dtype());
    char* dst = static_cast<char*>(host_[k].data()) + c.at * item;
    DT_CUDA_CHECK(cudaMemcpyAsync(dst, views[k].data(), static_cast<size_t>(c.count) * item, cudaMemcpyDeviceToHost,
                                  q.d2h.get()));
  }
  DT_RETURN_IF_ERROR(q.freed[s].Record(q.d2h.get()));
  return Status::OK();
#else
  (void)i;
  return Status::Unavailable("OffloadedState: a CUDA update, but dtrain was built without CUDA");
#endif
}

std::string OffloadedState::Placement() const {
  const std::string s = "in host memory (optim.offload cpu)";
  if (keep_ == 0) return s;
  int64_t bytes = 0;
  for (const Tensor& t : kept_) bytes += t.nbytes();
  return s + ", " + models::FormatBytes(bytes) + " of it kept on the " + (gpu_ != nullptr ? "GPU" : "device");
}

Status OffloadedState::Settle() {
  // The kept part is copied back only when an Update has made it the state (not before the first Update, nor after
  // a Settle with no Update since); whatever is written to host() from here on is the state (see Ordering).
  const size_t copy_back = upload_ ? 0 : kept_.size();
  upload_ = true;
  for (size_t k = 0; k < copy_back; ++k) {
    Tensor to;
    DT_RETURN_IF_ERROR(host_[k].View(0, {keep_}, &to));
#if DT_HAVE_CUDA
    if (gpu_ != nullptr) {
      if (k == 0) DT_RETURN_IF_ERROR(gpu_->done.Block(gpu_->d2h.get()));
      DT_RETURN_IF_ERROR(to.CopyFrom(kept_[k], gpu_->d2h.get()));
      continue;
    }
#endif
    DT_RETURN_IF_ERROR(to.CopyFrom(kept_[k], nullptr));
  }
#if DT_HAVE_CUDA
  if (gpu_ != nullptr) {
    if (copy_back > 0) DT_RETURN_IF_ERROR(gpu_->written.Record(gpu_->d2h.get()));
    return gpu_->written.Synchronize();  // sync point: the copies back (see Ordering)
  }
#endif
  return Status::OK();
}

}  // namespace dtrain::runtime
