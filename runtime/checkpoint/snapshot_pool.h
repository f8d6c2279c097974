#pragma once
// SnapshotPool: the host buffers that asynchronous checkpoint saves snapshot the training state into,
// allocated on a background thread from the start of the run, so that the first save does not stall on them
// (pinned memory: cudaHostAlloc maps and page-locks every page, ~0.5 s for GPT-2 124M's 1.49 GB).
//
// Start() begins allocating one f32 tensor per (file name, numel) of the layout; Take() hands them over,
// waiting first if a save comes before the allocation is done: a bounded stall (the allocation's remaining
// time), which Take reports so the trainer can put it in its log and metrics.
//
// Ownership: the pool owns the buffers until Take moves them out; the allocator must outlive the pool.
// Thread-safety: Start/Take/the destructor from one owner thread; the destructor waits for the allocation.

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::runtime {

class SnapshotPool {
 public:
  using Layout = std::vector<std::pair<std::string, int64_t>>;  // file name -> f32 elements
  using Buffers = std::vector<std::pair<std::string, Tensor>>;

  // `thread_init` runs first on the allocating thread (a CUDA build selects the rank's device there, so the
  // pinned memory belongs to its context); may be empty.
  static std::unique_ptr<SnapshotPool> Start(Layout layout, Allocator* alloc, std::function<Status()> thread_init);
  ~SnapshotPool();
  SnapshotPool(const SnapshotPool&) = delete;
  SnapshotPool& operator=(const SnapshotPool&) = delete;

  // Waits for the allocation and moves the buffers into *out (in layout order). *waited_s gets the seconds
  // this call blocked (0 when the allocation was done before it). Once only: a second call is FailedPrecondition.
  Status Take(Buffers* out, double* waited_s);
  // Seconds the background allocation took (valid after Take).
  double alloc_s() const { return alloc_s_; }

 private:
  SnapshotPool() = default;

  std::future<Status> done_;
  Buffers buffers_;
  double alloc_s_ = 0;
  bool taken_ = false;
};

}  // namespace dtrain::runtime
