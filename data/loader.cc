#include "data/loader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
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
  std::vector<int> free_slots;
  std::map<int64_t, int> ready;  // batch sequence number -> slot
  int64_t next_claim = 0, next_deliver = 0;
  int held = -1;  // slot of the batch last returned by Next()
  bool stop = false;
  Status error;
  std::vector<std::thread> threads;
#if DT_HAVE_CUDA
  CudaStream copy_stream;
  Tensor dev_inputs[2], dev_targets[2];
  CudaEvent h2d_done[2];  // copy into device buffer i finished (the compute stream waits on it)
  CudaEvent released[2];  // compute work that read device buffer i was enqueued before this
  bool released_recorded[2] = {false, false};
  int64_t delivered = 0;  // batches handed out so far (device buffer = delivered % 2)
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
  so.num_samples = l->dataset_->size();
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
    for (int i = 0; i < 2; ++i) {
      DT_RETURN_IF_ERROR(Tensor::Empty(in_shape, in_dtype, ctx->allocator(), &im.dev_inputs[i]));
      DT_RETURN_IF_ERROR(Tensor::Empty(tgt_shape, DType::kI32, ctx->allocator(), &im.dev_targets[i]));
      DT_RETURN_IF_ERROR(CudaEvent::Create(&im.h2d_done[i]));
      DT_RETURN_IF_ERROR(CudaEvent::Create(&im.released[i]));
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
        slot = im.free_slots.back();
        im.free_slots.pop_back();
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
}

Status Loader::Restore(const SamplerState& state) {
  Stop();
  DT_RETURN_IF_ERROR(sampler_.Restore(state));
  state_ = sampler_.state();
  return Start();
}

Status Loader::Next(Batch* b) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& im = *impl_;
  int slot = -1;
  {
    std::unique_lock<std::mutex> lk(im.mu);
    if (im.held >= 0) {  // the previous batch is released (its pinned slot may be refilled)
      im.free_slots.push_back(im.held);
      im.held = -1;
      im.cv_free.notify_one();
    }
    im.cv_ready.wait(lk, [&im] { return !im.error.ok() || im.stop || im.ready.count(im.next_deliver) > 0; });
    if (!im.error.ok()) return im.error;
    if (im.ready.count(im.next_deliver) == 0) return Status::Aborted("loader: stopped");
    slot = im.ready[im.next_deliver];
    im.ready.erase(im.next_deliver++);
    im.held = slot;
  }
  LoaderSlot& s = im.slots[slot];
  b->epoch = s.batch.epoch;
  b->position = s.batch.position;
  b->num_real = s.batch.num_real;
  b->indices = s.batch.indices;
  if (sample_log_) DT_RETURN_IF_ERROR(sample_log_->Append(b->epoch, b->position, b->indices, b->num_real));
  if (!ctx_->is_cuda()) {
    b->inputs = s.inputs;
    b->targets = s.targets;
  }
#if DT_HAVE_CUDA
  if (ctx_->is_cuda()) {
    // Sync points, all on the device (no host wait):
    // 1. the batch handed out by the previous Next() is released: compute work reading its device
    //    buffer has been enqueued by now, so an event recorded here marks its end;
    // 2. the copy stream waits for the release of the buffer it overwrites (two batches ago);
    // 3. the compute stream waits for the copy into it.
    const cudaStream_t compute = ctx_->stream(), copy = im.copy_stream.get();
    if (im.delivered > 0) {
      const int prev = static_cast<int>((im.delivered - 1) % 2);
      DT_RETURN_IF_ERROR(im.released[prev].Record(compute));
      im.released_recorded[prev] = true;
    }
    const int d = static_cast<int>(im.delivered % 2);
    if (im.released_recorded[d]) DT_RETURN_IF_ERROR(im.released[d].Block(copy));
    DT_RETURN_IF_ERROR(im.dev_inputs[d].CopyFrom(s.inputs, copy));
    DT_RETURN_IF_ERROR(im.dev_targets[d].CopyFrom(s.targets, copy));
    DT_RETURN_IF_ERROR(s.copied.Record(copy));
    s.copy_pending = true;  // read by the next reader of this slot, after the mutex hand-off
    DT_RETURN_IF_ERROR(im.h2d_done[d].Record(copy));
    DT_RETURN_IF_ERROR(im.h2d_done[d].Block(compute));
    b->inputs = im.dev_inputs[d];
    b->targets = im.dev_targets[d];
    ++im.delivered;
  }
#endif
  state_ = s.after;
  b->wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.batches;
  stats_.wait_seconds += b->wait_seconds;
  return Status::OK();
}

}  // namespace dtrain::data
