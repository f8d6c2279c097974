#include "runtime/train/restore_sink.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "runtime/checkpoint/dtype_convert.h"
#include "runtime/train/master_halves.h"
#if DT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#endif

namespace dtrain::runtime {

Status RestoreSink::Create(std::vector<StateSlice> slices, int device, Allocator* alloc, uint64_t slot_bytes,
                           size_t max_slots, std::unique_ptr<RestoreSink>* out) {
  DT_CHECK_ARG(alloc != nullptr && slot_bytes > 0 && max_slots > 0, "RestoreSink needs an allocator and slots");
  std::unique_ptr<RestoreSink> sink(new RestoreSink(std::move(slices), device, alloc, slot_bytes, max_slots));
  for (const StateSlice& s : sink->slices_) {
    DT_CHECK_ARG(s.low == nullptr || (s.dst->dtype() == DType::kBF16 && s.low->dtype() == DType::kBF16),
                 "RestoreSink: split masters go into bf16 params and bf16 low halves, not " << s.dst->ToString());
    // (One such slice: a chunk's low halves have one buffer, the slot's.)
    DT_CHECK_ARG(!(sink->splits_ && s.low != nullptr), "RestoreSink: more than one slice of split masters");
    sink->splits_ = sink->splits_ || s.low != nullptr;
  }
#if DT_HAVE_CUDA
  if (device >= 0) DT_RETURN_IF_ERROR(CudaStream::Create(&sink->copy_stream_));
#endif
  *out = std::move(sink);
  return Status::OK();
}

RestoreSink::~RestoreSink() {
#if DT_HAVE_CUDA
  if (device_ >= 0) copy_stream_.SynchronizeForTeardown("RestoreSink");  // copies may still read the slots
#endif
}

Status RestoreSink::Begin(const proto::CheckpointManifest& m) {
  DT_RETURN_IF_ERROR(Finish());  // the last Load's copies read its buffers
  routes_.clear();
  in_place_.clear();
  for (const proto::CheckpointFile& f : m.files()) {
    if (f.size() % sizeof(float) != 0) {
      return Status::DataLoss(f.name() + ": " + std::to_string(f.size()) + " bytes, not a whole number of f32 values");
    }
    const int64_t numel = static_cast<int64_t>(f.size() / sizeof(float));
    Route r;
    r.name = f.name();
    bool fits = true;
    for (const StateSlice& s : slices_) {
      if (s.file != f.name()) continue;
      r.slices.push_back(&s);
      fits = fits && s.file_numel == numel;
    }
    if (!fits) r.slices.clear();  // another model's file: into a host buffer, for the trainer to report
    if (r.slices.size() == 1) {
      const StateSlice& s = *r.slices[0];
      if (s.file_offset == 0 && s.numel == numel && !s.dst->is_cuda() && s.dst->dtype() == DType::kF32) {
        r.direct = static_cast<char*>(s.dst->data()) + s.dst_offset * sizeof(float);
      }
    }
    if (r.slices.empty() && numel > 0) {
      DT_RETURN_IF_ERROR(Tensor::Empty({numel}, DType::kF32, alloc_, &r.host).WithContext("restore buffer " + r.name));
    }
    if (!r.slices.empty()) in_place_.insert(r.name);
    routes_.push_back(std::move(r));
  }
  return Status::OK();
}

Status RestoreSink::Acquire(size_t file, uint64_t offset, uint64_t size, char** out) {
  const Route& r = routes_[file];
  if (r.slices.empty()) {
    *out = static_cast<char*>(r.host.data()) + offset;
    return Status::OK();
  }
  if (r.direct != nullptr) {
    touched_ = true;  // the read writes into the state, whether it succeeds or not
    *out = r.direct + offset;
    return Status::OK();
  }
  if (size > slot_bytes_) {
    return Status::InvalidArgument("RestoreSink: a chunk of " + std::to_string(size) + " bytes, the slots hold " +
                                   std::to_string(slot_bytes_));
  }
  Slot* slot = nullptr;
  DT_RETURN_IF_ERROR(TakeSlot(&slot));
  *out = static_cast<char*>(slot->buf.data());
  std::lock_guard<std::mutex> lock(mu_);
  busy_[*out] = slot;
  return Status::OK();
}

Status RestoreSink::TakeSlot(Slot** out) {
  std::unique_lock<std::mutex> lock(mu_);
  slot_freed_.wait(lock, [&] { return !free_.empty() || slots_.size() < max_slots_; });
  if (free_.empty()) {  // a new slot; allocated outside the lock (page-locking takes a while)
    slots_.push_back(std::make_unique<Slot>());
    Slot* slot = slots_.back().get();
    lock.unlock();
    Status st = Tensor::Empty({static_cast<int64_t>((slot_bytes_ + 3) / 4)}, DType::kF32, alloc_, &slot->buf);
    if (st.ok() && splits_) st = Tensor::Empty({slot->buf.numel()}, DType::kBF16, alloc_, &slot->low);
#if DT_HAVE_CUDA
    if (st.ok() && device_ >= 0) st = CudaEvent::Create(&slot->copied);
#endif
    if (!st.ok()) return st.WithContext("restore staging buffer");
    *out = slot;
    return Status::OK();
  }
  Slot* slot = free_.back();  // the most recently used: its copy is the likeliest to be done, its pages warm
  free_.pop_back();
  lock.unlock();
#if DT_HAVE_CUDA
  // Sync point: the copies out of this slot's last chunk are done before it is read into again.
  if (device_ >= 0) DT_RETURN_IF_ERROR(slot->copied.Synchronize());
#endif
  *out = slot;
  return Status::OK();
}

void RestoreSink::GiveSlot(Slot* slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(slot);
  }
  slot_freed_.notify_one();
}

Status RestoreSink::Release(size_t file, uint64_t offset, uint64_t size, char* buf, bool filled) {
  const Route& r = routes_[file];
  if (r.slices.empty() || r.direct != nullptr) return Status::OK();
  Slot* slot = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = busy_.find(buf);
    DT_CHECK_ARG(it != busy_.end(), "RestoreSink::Release of a buffer it did not give out");
    slot = it->second;
    busy_.erase(it);
  }
  const Status st = filled ? CopyOut(r, offset, size, buf, slot) : Status::OK();
  GiveSlot(slot);
  return st;
}

// Copies the part of chunk [offset, offset + size) of route r that each slice takes out of the slot.
Status RestoreSink::CopyOut(const Route& r, uint64_t offset, uint64_t size, char* buf, Slot* slot) {
#if DT_HAVE_CUDA
  bool to_device = false;
#endif
  for (const StateSlice* s : r.slices) {
    const uint64_t first = static_cast<uint64_t>(s->file_offset) * sizeof(float);
    const uint64_t lo = std::max(offset, first);
    const uint64_t hi = std::min(offset + size, first + static_cast<uint64_t>(s->numel) * sizeof(float));
    if (lo >= hi) continue;
    char* src = buf + (lo - offset);
    uint64_t bytes = hi - lo;
    char* dst = static_cast<char*>(s->dst->data());
    if (s->dst->dtype() == DType::kBF16) {
      // f32 file values into bf16 state: narrowed in the slot (this slice's bytes only; slices never overlap).
      if ((lo - first) % sizeof(float) != 0 || bytes % sizeof(float) != 0) {
        return Status::InvalidArgument("RestoreSink: a chunk of " + r.name +
                                       " ends inside an f32 value (chunk sizes must be multiples of 4 bytes)");
      }
      const int64_t count = static_cast<int64_t>(bytes / sizeof(float)),
                    at = s->dst_offset + static_cast<int64_t>((lo - first) / 4);
      if (s->low != nullptr) {  // split masters: the low halves into the slot's own buffer, copied on below
        SplitMastersInPlace(src, slot->low.data<uint16_t>(), count);
        char* low = static_cast<char*>(s->low->data()) + at * sizeof(uint16_t);
        const size_t low_bytes = static_cast<size_t>(count) * sizeof(uint16_t);
#if DT_HAVE_CUDA
        if (s->low->is_cuda()) {
          if (!to_device) DT_CUDA_CHECK(cudaSetDevice(device_));
          to_device = true;
          DT_CUDA_CHECK(cudaMemcpyAsync(low, slot->low.data(), low_bytes, cudaMemcpyHostToDevice, copy_stream_.get()));
        } else {
          std::memcpy(low, slot->low.data(), low_bytes);
        }
#else
        std::memcpy(low, slot->low.data(), low_bytes);
#endif
      } else {
        NarrowF32ToBf16InPlace(src, count);
      }
      bytes /= 2;
      dst += at * sizeof(uint16_t);
    } else {
      dst += s->dst_offset * sizeof(float) + (lo - first);
    }
    touched_ = true;
#if DT_HAVE_CUDA
    if (s->dst->is_cuda()) {
      if (!to_device) DT_CUDA_CHECK(cudaSetDevice(device_));  // a reader thread: the state's device
      to_device = true;
      DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_stream_.get()));
      continue;
    }
#endif
    std::memcpy(dst, src, bytes);
  }
#if DT_HAVE_CUDA
  if (to_device) DT_RETURN_IF_ERROR(slot->copied.Record(copy_stream_.get()));
#else
  (void)slot;
#endif
  return Status::OK();
}

Status RestoreSink::Finish() {
#if DT_HAVE_CUDA
  // Sync point: the copies into the state are done before the compute stream reads it or the buffers are reused.
  if (device_ >= 0) DT_CUDA_CHECK(cudaStreamSynchronize(copy_stream_.get()));
#endif
  return Status::OK();
}

std::map<std::string, Tensor> RestoreSink::Files() const {
  std::map<std::string, Tensor> out;
  for (const Route& r : routes_) {
    if (r.slices.empty()) out[r.name] = r.host;
  }
  return out;
}

}  // namespace dtrain::runtime
