#pragma once
// Loader: the asynchronous input pipeline of one rank — sharded dataset (data/dataset.h) -> sampler
// (data/sampler.h) -> reader threads -> pinned host batches -> device.
//
// Pipeline.
//   1. A reader thread claims the next batch in sampler order together with a free slot of a fixed
//      pool of pinned host buffers (prefetch_depth + 1 slots, from DeviceContext::pinned_allocator();
//      nothing is allocated after Create). Claiming waits while no slot is free: at most
//      prefetch_depth batches are decoded ahead of the consumer (bounded memory).
//   2. It preads each record, decodes it (images: (p/255 - mean)/std as f32, then the optional
//      augmentation; tokens: i32 inputs tok[0, L-1) and targets tok[1, L)) into the slot.
//   3. Next() hands out batches strictly in sampler order, whichever thread finished first.
//      On the CPU the batch tensors are views of the pinned slot, valid until the next Next() or Restore().
//      On CUDA the batch is copied (H2D, on the loader's own copy stream) into one of `device_buffers` device
//      buffers used in rotation, and the context's compute stream waits on the copy's event (cudaStreamWaitEvent:
//      no host sync). The copy is issued one batch ahead: when Next() hands out batch k and batch k+1 is
//      already decoded, k+1's copy is queued at once, so it runs while the GPU computes on batch k. The buffer a
//      copy overwrites was last handed out device_buffers batches earlier; the copy stream first waits for the
//      compute work the consumer had queued on it by the time it asked for the batch that followed it by
//      device_buffers - 1. So on CUDA a batch's tensors stay valid (fixed addresses, unchanged contents) until the
//      (device_buffers - 1)-th later call of Next(): a CUDA-graph step of A micro-batches takes A batches before
//      queueing any work on them and needs device_buffers >= A + 1. A reader synchronises on a slot's copy event
//      before refilling that slot.
//
// Determinism. The sequence of batches depends only on the sampler state and options, never on
// thread timing; augmentation draws from SplitMix64 seeded by (seed, epoch, sample index).
//
// Record. With `sample_log` set, Next() appends each batch it hands out to that file (data/sample_log.h): what
// the consumer took, not what the readers prefetched.
//
// Errors and shutdown. The first reader error (e.g. DataLoss naming a shard truncated after Create)
// stops the pipeline and is returned by Next() from then on. The destructor and Restore() stop and
// join every reader thread; no thread is left behind and none can block forever (every wait also
// wakes on stop).
//
// Threading: Next(), state(), Restore(), stats() are for one consumer thread (the training loop).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/random.h"
#include "core/status.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/sample_log.h"
#include "data/sampler.h"

namespace dtrain::data {

// An in-place CPU augmentation of one decoded image (channels x height x width f32, row-major),
// drawing random numbers from `rng` only (so results are reproducible). Called on reader threads
// concurrently: it must not touch shared mutable state.
using ImageAugment =
    std::function<void(float* image, int64_t channels, int64_t height, int64_t width, SplitMix64* rng)>;

// Random crop with `pad` pixels of `fill` around the image (a shift by up to pad pixels in each
// direction), then a horizontal flip with probability 1/2 when `hflip`.
ImageAugment RandomCropFlip(int pad, bool hflip, float fill);

struct LoaderOptions {
  std::string dataset_dir;
  int64_t batch_size = 64;  // per rank
  int rank = 0;
  int world = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  RemainderPolicy remainder = RemainderPolicy::kDrop;
  int num_threads = 4;            // reader threads, >= 1
  int prefetch_depth = 4;         // batches decoded ahead of the consumer, >= 1
  int device_buffers = 2;         // CUDA: device batch buffers used in rotation (see Next), in [2, 64]
  bool verify_checksums = false;  // read every shard whole at Create (Dataset::Verify)
  ImageAugment augment;           // optional; images only
  std::string sample_log;         // debug/test: record each delivered batch's samples in this file (data/sample_log.h)
  // Use only the samples [0, limit) of the dataset (0 = all; above its size = all): the sampler's epoch is that long.
  int64_t limit = 0;
};

struct Batch {
  Tensor inputs;   // images f32 [B, dims...]; tokens i32 [B, L-1]; on the context's device
  Tensor targets;  // images i32 [B] (labels); tokens i32 [B, L-1]
  int64_t epoch = 0;
  int64_t position = 0;          // permutation position where this batch's global micro-batch starts
  int64_t num_real = 0;          // rows [0, num_real) are real samples; the rest are padding repeats
  std::vector<int64_t> indices;  // global sample index of each row
  double wait_seconds = 0;       // time Next() blocked waiting for this batch
};

struct LoaderStats {
  int64_t batches = 0;
  double wait_seconds = 0;  // summed over batches
};

class Loader {
 public:
  // Opens the dataset (every shard checked, see Dataset::Open), builds the sampler, allocates the
  // pinned pool (and on CUDA the copy stream, events and the device batches) and starts the readers.
  // `ctx` must outlive the loader. InvalidArgument for bad options; errors of Dataset::Open.
  static Status Create(const LoaderOptions& opts, DeviceContext* ctx, std::unique_ptr<Loader>* out);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch in sampler order (blocking while it is being read); how long its tensors stay valid: see the
  // file comment. On error (a reader failed) returns that error, now and on every later call.
  Status Next(Batch* b);

  // Position after the last batch returned by Next(): restoring it continues right after it.
  SamplerState state() const { return state_; }
  // Drops everything prefetched and continues from `state` (e.g. from a checkpoint).
  Status Restore(const SamplerState& state);

  LoaderStats stats() const { return stats_; }
  const Dataset& dataset() const { return *dataset_; }
  // Samples of an epoch: the dataset's size, or LoaderOptions::limit when that is smaller.
  int64_t num_samples() const { return num_samples_; }
  int64_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }

 private:
  struct Impl;
  Loader() = default;
  Status Start();  // launches the reader threads on the current sampler position
  void Stop();     // stops and joins them; drops prefetched batches
  // The slot of the next batch in sampler order (waiting for it when `block`; else -1 when it is not decoded yet).
  Status TakeReady(bool block, int* slot);
  void FreeSlot(int slot);
  Status Upload(int slot);  // CUDA: queues the slot's copy into the device buffer of batch number `delivered`

  LoaderOptions opts_;
  DeviceContext* ctx_ = nullptr;
  std::unique_ptr<Dataset> dataset_;
  Sampler sampler_;
  SamplerState state_;
  int64_t num_samples_ = 0;
  LoaderStats stats_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<SampleLog> sample_log_;  // null unless opts_.sample_log
};

}  // namespace dtrain::data
