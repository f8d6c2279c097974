#include "data/loader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#if DT_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_handles.h"
#endif

namespace dtrain::data {

// One pinned host batch of the fixed pool, and what is in it.
struct LoaderSlot {
  Tensor inputs, targets;
  SampleBatch batch;
  SamplerState after;  // sampler position after this batch
#if DT_HAVE_CUDA
  CudaEvent copied;  // recorded on the copy stream after the H2D copy out of this slot
  bool copy_pending = false;
#endif
};

struct Loader::Impl {
  std::mutex mu;
  std::condition_variable cv_free;   // readers: a slot was freed, or stop
  std::condition_variable cv_ready;  // consumer: a batch is ready, or an error
  std::vector<LoaderSlot> slots;
  std::deque<int> free_slots;    // oldest first: its copy to the device is the likeliest to be done
  std::map<int64_t, int> ready;  // batch sequence number -> slot
  int64_t next_claim = 0, next_deliver = 0;
  int held = -1;  // slot of the batch last returned by Next()
  bool stop = false;
  Status error;
  std::vector<std::thread> threads;
#if DT_HAVE_CUDA
  // Device buffer i holds the batches whose delivery number is i modulo their count.
  struct DeviceBuffer {
    Tensor inputs, targets;
    CudaEvent h2d_done;  // the copy into this buffer finished (the compute stream waits on it)
    CudaEvent released;  // the compute work reading this buffer's last batch was queued before this
    bool released_recorded = false;
  };
  CudaStream copy_stream;
  std::vector<DeviceBuffer> dev;
  int64_t delivered = 0;  // batches handed out
  int ahead = -1;         // slot of the next batch when its copy is already queued, or -1
#endif
};

namespace {

// Per-sample random stream: a function of (seed, epoch, index) only, never of the thread.
SplitMix64 SampleRng(uint64_t seed, int64_t epoch, int64_t index) {
  SplitMix64 h(static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(index));
  return SplitMix64(seed ^ h.Next());
}

}  // namespace

ImageAugment RandomCropFlip(int pad, bool hflip, float fill) {
  return [pad, hflip, fill](float* img, int64_t channels, int64_t h, int64_t w, SplitMix64* rng) {
    // Output pixel (y, x) takes input (y + dy, x' + dx) where x' is x or its mirror; outside -> fill.
    const int64_t dy = static_cast<int64_t>(rng->Below(2 * pad + 1)) - pad;
    const int64_t dx = static_cast<int64_t>(rng->Below(2 * pad + 1)) - pad;
    const bool flip = hflip && (rng->Next() & 1u);
    std::vector<float> src(img, img + channels * h * w);
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          const int64_t sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
          img[(c * h + y) * w + x] = (sy < 0 || sy >= h || sx < 0 || sx >= w) ? fill : src[(c * h + sy) * w + sx];
        }
      }
    }
  };
}

Status Loader::Create(const LoaderOptions& opts, DeviceContext* ctx, std::unique_ptr<Loader>* out) {
  DT_CHECK_ARG(ctx != nullptr, "loader: null DeviceContext");
  DT_CHECK_ARG(opts.num_threads >= 1 && opts.num_threads <= 256, "loader: num_threads " << opts.num_threads);
  DT_CHECK_ARG(opts.prefetch_depth >= 1 && opts.prefetch_depth <= 1024,
               "loader: prefetch_depth " << opts.prefetch_depth);
  DT_CHECK_ARG(opts.device_buffers >= 2 && opts.device_buffers <= 64,
               "loader: device_buffers " << opts.device_buffers << " (expected 2 to 64)");
  std::unique_ptr<Loader> l(new Loader());  // private constructor
  l->opts_ = opts;
  l->ctx_ = ctx;
  l->impl_ = std::make_unique<Impl>();
  DT_RETURN_IF_ERROR(Dataset::Open(opts.dataset_dir, opts.verify_checksums, &l->dataset_));
  if (!opts.sample_log.empty()) DT_RETURN_IF_ERROR(SampleLog::Create(opts.sample_log, &l->sample_log_));
  const auto& schema = l->dataset_->schema();
  const bool image = schema.kind() == proto::DatasetSchema::IMAGE;
  DT_CHECK_ARG(!opts.augment || image, opts.dataset_dir << ": augmentation is for image datasets");
  SamplerOptions so;
  DT_CHECK_ARG(opts.limit >= 0, "LoaderOptions::limit " << opts.limit << " is negative");
  so.num_samples = opts.limit > 0 ? std::min(opts.limit, l->dataset_->size()) : l->dataset_->size();
  l->num_samples_ = so.num_samples;
  so.batch_size = opts.batch_size;
  so.rank = opts.rank;
  so.world = opts.world;
  so.seed = opts.seed;
  so.shuffle = opts.shuffle;
  so.remainder = opts.remainder;
  {
    const Status st = Sampler::Create(so, &l->sampler_);
    if (!st.ok()) return st.WithContext(opts.dataset_dir);
  }
  l->state_ = l->sampler_.state();

  std::vector<int64_t> in_shape{opts.batch_size}, tgt_shape{opts.batch_size};
  if (image) {
    in_shape.insert(in_shape.end(), schema.dims().begin(), schema.dims().end());
  } else {
    in_shape.push_back(schema.dims(0) - 1);
    tgt_shape.push_back(schema.dims(0) - 1);
  }
  const DType in_dtype = image ? DType::kF32 : DType::kI32;
  Impl& im = *l->impl_;
  im.slots.resize(static_cast<size_t>(opts.prefetch_depth) + 1);
  for (auto& s : im.slots) {
    DT_RETURN_IF_ERROR(Tensor::Empty(in_shape, in_dtype, ctx->pinned_allocator(), &s.inputs));
    DT_RETURN_IF_ERROR(Tensor::Empty(tgt_shape, DType::kI32, ctx->pinned_allocator(), &s.targets));
#if DT_HAVE_CUDA
    if (ctx->is_cuda()) DT_RETURN_IF_ERROR(CudaEvent::Create(&s.copied));
#endif
  }
#if DT_HAVE_CUDA
  if (ctx->is_cuda()) {
    DT_RETURN_IF_ERROR(CudaStream::Create(&im.copy_stream));
    im.dev.resize(static_cast<size_t>(opts.device_buffers));
    for (Impl::DeviceBuffer& d : im.dev) {
      DT_RETURN_IF_ERROR(Tensor::Empty(in_shape, in_dtype, ctx->allocator(), &d.inputs));
      DT_RETURN_IF_ERROR(Tensor::Empty(tgt_shape, DType::kI32, ctx->allocator(), &d.targets));
      DT_RETURN_IF_ERROR(CudaEvent::Create(&d.h2d_done));
      DT_RETURN_IF_ERROR(CudaEvent::Create(&d.released));
    }
  }
#endif
  DT_RETURN_IF_ERROR(l->Start());
  *out = std::move(l);
  return Status::OK();
}

Loader::~Loader() {
  if (impl_ == nullptr) return;
  Stop();
#if DT_HAVE_CUDA
  // The device and pinned buffers are freed next: let queued copies and the compute work that
  // reads the last batch finish first.
  if (ctx_->is_cuda()) {
    const cudaError_t e = cudaStreamSynchronize(impl_->copy_stream.get());
    if (e != cudaSuccess) DT_LOG_ERROR(kData, "loader: copy stream sync at shutdown: {}", cudaGetErrorString(e));
    const Status st = ctx_->Synchronize();
    if (!st.ok()) DT_LOG_ERROR(kData, "loader: compute stream sync at shutdown: {}", st.ToString());
  }
#endif
}

// Reads and decodes the batch described by slot.batch into slot's pinned tensors.
static Status FillSlot(const Dataset& ds, const LoaderOptions& opts, DeviceContext* ctx, LoaderSlot* slot,
                       std::vector<uint8_t>* rec) {
#if DT_HAVE_CUDA
  if (slot->copy_pending) {  // the H2D copy of this slot's previous batch must finish before we overwrite it
    DT_RETURN_IF_ERROR(slot->copied.Synchronize());
    slot->copy_pending = false;
  }
#endif
  (void)ctx;
  const auto& schema = ds.schema();
  rec->resize(ds.record_bytes());
  const int64_t b = static_cast<int64_t>(slot->batch.indices.size());
  int32_t* targets = slot->targets.data<int32_t>();
  if (schema.kind() == proto::DatasetSchema::IMAGE) {
    const int64_t pixels = static_cast<int64_t>(ds.record_bytes()) - 4;
    const int64_t c = schema.dims_size() == 3 ? schema.dims(0) : 1;
    const int64_t h = schema.dims(schema.dims_size() - 2), w = schema.dims(schema.dims_size() - 1);
    const float scale = 1.0f / (255.0f * schema.pixel_std()), shift = schema.pixel_mean() / schema.pixel_std();
    float* inputs = slot->inputs.data<float>();
    for (int64_t j = 0; j < b; ++j) {
      const int64_t idx = slot->batch.indices[j];
      DT_RETURN_IF_ERROR(ds.Read(idx, rec->data()));
      uint32_t label;
      std::memcpy(&label, rec->data(), 4);
      if (schema.has_label() && label >= static_cast<uint32_t>(schema.num_classes())) {
        return Status::DataLoss(ds.dir() + ": sample " + std::to_string(idx) + " has label " + std::to_string(label) +
                                " outside [0, " + std::to_string(schema.num_classes()) + ")");
      }
      targets[j] = schema.has_label() ? static_cast<int32_t>(label) : 0;
      float* img = inputs + j * pixels;
      const uint8_t* px = rec->data() + 4;
      for (int64_t p = 0; p < pixels; ++p) img[p] = static_cast<float>(px[p]) * scale - shift;
      if (opts.augment) {
        SplitMix64 rng = SampleRng(opts.seed, slot->batch.epoch, idx);
        opts.augment(img, c, h, w, &rng);
      }
    }
    return Status::OK();
  }
  const int64_t len = schema.dims(0), tb = schema.token_dtype() == proto::DatasetSchema::UINT32 ? 4 : 2;
  int32_t* inputs = slot->inputs.data<int32_t>();
  for (int64_t j = 0; j < b; ++j) {
    const int64_t idx = slot->batch.indices[j];
    DT_RETURN_IF_ERROR(ds.Read(idx, rec->data()));
    for (int64_t t = 0; t < len; ++t) {
      uint32_t tok = 0;
      std::memcpy(&tok, rec->data() + t * tb, static_cast<size_t>(tb));  // little-endian
      if (tok > static_cast<uint32_t>(INT32_MAX) || (schema.vocab_size() > 0 && tok >= schema.vocab_size())) {
        return Status::DataLoss(ds.dir() + ": sample " + std::to_string(idx) + " has token " + std::to_string(tok) +
                                " outside the vocabulary of " + std::to_string(schema.vocab_size()));
      }
      if (t < len - 1) inputs[j * (len - 1) + t] = static_cast<int32_t>(tok);
      if (t > 0) targets[j * (len - 1) + t - 1] = static_cast<int32_t>(tok);
    }
  }
  return Status::OK();
}

Status Loader::Start() {
  Impl& im = *impl_;
  auto reader = [this, &im]() {
    std::vector<uint8_t> rec;
    Status st;
#if DT_HAVE_CUDA
    if (ctx_->is_cuda() && cudaSetDevice(ctx_->device_index()) != cudaSuccess) {
      st = Status::Internal("loader: reader thread cannot select GPU " + std::to_string(ctx_->device_index()));
    }
#endif
    while (st.ok()) {
      int slot = -1;
      int64_t seq = 0;
      {
        std::unique_lock<std::mutex> lk(im.mu);
        im.cv_free.wait(lk, [&im] { return im.stop || !im.free_slots.empty(); });
        if (im.stop) return;
        slot = im.free_slots.front();
        im.free_slots.pop_front();
        seq = im.next_claim++;
        sampler_.Next(&im.slots[slot].batch);  // sampler order = claim order = delivery order
        im.slots[slot].after = sampler_.state();
      }
      st = FillSlot(*dataset_, opts_, ctx_, &im.slots[slot], &rec);
      if (!st.ok()) break;
      std::lock_guard<std::mutex> lk(im.mu);
      im.ready[seq] = slot;
      im.cv_ready.notify_all();
    }
    std::lock_guard<std::mutex> lk(im.mu);
    if (im.error.ok()) im.error = st;
    im.stop = true;  // the pipeline cannot deliver in order past a failed batch
    im.cv_free.notify_all();
    im.cv_ready.notify_all();
  };
  im.free_slots.clear();
  for (int i = 0; i < static_cast<int>(im.slots.size()); ++i) im.free_slots.push_back(i);
  try {
    for (int t = 0; t < opts_.num_threads; ++t) im.threads.emplace_back(reader);
  } catch (const std::system_error& e) {
    Stop();
    return Status::Internal(std::string("loader: cannot start a reader thread: ") + e.what());
  }
  return Status::OK();
}

void Loader::Stop() {
  Impl& im = *impl_;
  {
    std::lock_guard<std::mutex> lk(im.mu);
    im.stop = true;
    im.cv_free.notify_all();
    im.cv_ready.notify_all();
  }
  for (auto& t : im.threads) t.join();
  im.threads.clear();
  im.stop = false;
  im.error = Status::OK();
  im.ready.clear();
  im.held = -1;
  im.next_claim = im.next_deliver = 0;
#if DT_HAVE_CUDA
  im.ahead = -1;  // its copy may still run: the next copy into that buffer queues behind it
#endif
}

Status Loader::Restore(const SamplerState& state) {
  Stop();
  DT_RETURN_IF_ERROR(sampler_.Restore(state));
  state_ = sampler_.state();
  return Start();
}

Status Loader::TakeReady(bool block, int* slot) {
  Impl& im = *impl_;
  *slot = -1;
  std::unique_lock<std::mutex> lk(im.mu);
  if (block) {
    im.cv_ready.wait(lk, [&im] { return !im.error.ok() || im.stop || im.ready.count(im.next_deliver) > 0; });
  }
  auto it = im.ready.find(im.next_deliver);
  if (it == im.ready.end()) {
    if (!block) return Status::OK();  // not decoded yet (or a reader failed: the blocking call says so)
    if (!im.error.ok()) return im.error;
    return Status::Aborted("loader: stopped");
  }
  *slot = it->second;
  im.ready.erase(it);
  ++im.next_deliver;
  return Status::OK();
}

void Loader::FreeSlot(int slot) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  im.free_slots.push_back(slot);
  im.cv_free.notify_one();
}

#if DT_HAVE_CUDA
Status Loader::Upload(int slot) {
  Impl& im = *impl_;
  // Copies are queued only when every handed-out batch has its copy: this one is batch number `delivered`.
  Impl::DeviceBuffer& d = im.dev[static_cast<size_t>(im.delivered % static_cast<int64_t>(im.dev.size()))];
  const cudaStream_t copy = im.copy_stream.get();
  if (d.released_recorded) DT_RETURN_IF_ERROR(d.released.Block(copy));  // its last batch's readers were queued
  LoaderSlot& s = im.slots[slot];
  DT_RETURN_IF_ERROR(d.inputs.CopyFrom(s.inputs, copy));
  DT_RETURN_IF_ERROR(d.targets.CopyFrom(s.targets, copy));
  DT_RETURN_IF_ERROR(s.copied.Record(copy));
  s.copy_pending = true;  // read by the next reader of this slot, after the mutex hand-off
  DT_RETURN_IF_ERROR(d.h2d_done.Record(copy));
  return Status::OK();
}
#endif

Status Loader::Next(Batch* b) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& im = *impl_;
  if (im.held >= 0) {  // the previous batch is released (its pinned slot may be refilled)
    FreeSlot(im.held);
    im.held = -1;
  }
  int slot = -1;
#if DT_HAVE_CUDA
  if (ctx_->is_cuda()) {
    // Device sync points, no host wait: (1) the batch handed out device_buffers - 1 calls ago has had its compute
    // work queued by now (the validity contract), so its buffer's release is recorded here; (2) a copy waits for
    // the release of the buffer it overwrites; (3) the compute stream waits for the copy of what it gets, unless
    // that copy has already finished.
    const cudaStream_t compute = ctx_->stream();
    const int64_t n = static_cast<int64_t>(im.dev.size());
    if (im.delivered + 1 >= n) {
      Impl::DeviceBuffer& old = im.dev[static_cast<size_t>((im.delivered + 1) % n)];
      DT_RETURN_IF_ERROR(old.released.Record(compute));
      old.released_recorded = true;
    }
    if (im.ahead >= 0) {
      slot = im.ahead;
      im.ahead = -1;
    } else {
      DT_RETURN_IF_ERROR(TakeReady(/*block=*/true, &slot));
      DT_RETURN_IF_ERROR(Upload(slot));
    }
    Impl::DeviceBuffer& d = im.dev[static_cast<size_t>(im.delivered % n)];
    bool copied = false;  // normally true: the copy was queued a step ago
    DT_RETURN_IF_ERROR(d.h2d_done.Done(&copied));
    if (!copied) DT_RETURN_IF_ERROR(d.h2d_done.Block(compute));
    b->inputs = d.inputs;
    b->targets = d.targets;
    ++im.delivered;
  }
#endif
  if (!ctx_->is_cuda()) {
    DT_RETURN_IF_ERROR(TakeReady(/*block=*/true, &slot));
    b->inputs = im.slots[slot].inputs;
    b->targets = im.slots[slot].targets;
  }
  LoaderSlot& s = im.slots[slot];
  b->epoch = s.batch.epoch;
  b->position = s.batch.position;
  b->num_real = s.batch.num_real;
  b->indices = s.batch.indices;
  state_ = s.after;
  // On the CPU the batch is a view of the slot: it is freed at the next call. On CUDA the batch is on the device;
  // the slot goes back now (a reader refilling it first waits for its copy).
  if (ctx_->is_cuda()) {
    FreeSlot(slot);
  } else {
    im.held = slot;
  }
  if (sample_log_) DT_RETURN_IF_ERROR(sample_log_->Append(b->epoch, b->position, b->indices, b->num_real));
#if DT_HAVE_CUDA
  // The next batch's copy, queued now when it is decoded: it runs while the GPU works on this one.
  if (ctx_->is_cuda()) {
    int next = -1;
    DT_RETURN_IF_ERROR(TakeReady(/*block=*/false, &next));
    if (next >= 0) {
      DT_RETURN_IF_ERROR(Upload(next));
      im.ahead = next;
    }
  }
#endif
  b->wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.batches;
  stats_.wait_seconds += b->wait_seconds;
  return Status::OK();
}

}  // namespace dtrain::data
