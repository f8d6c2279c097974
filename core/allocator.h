#pragma once
// Allocators behind Tensor storage.
//
// CpuAllocator: 64-byte aligned host memory; with `pinned` it uses cudaHostAlloc (page-locked,
// for async H2D/D2H copies) when CUDA is built, else plain memory. It counts what it hands out (RoundSize(bytes)
// per block: bytes_in_use and its peak, as the CUDA allocator's stats), so a CPU run's peak can be compared with its
// memory plan (models/memory_plan.h). Thread-safe (the counters under one mutex).
//
// CudaCachingAllocator: device memory cached by size so that the training step loop never calls
// cudaMalloc after its first iteration. Sizes are rounded up (512 B granules below 1 MiB, 2 MiB
// above); Free() returns a block to a per-size free list, a later Allocate() of the same rounded
// size reuses it. Blocks are stream-ordered for ONE stream: memory freed after work queued on the
// context's compute stream may be handed out again to work on that same stream (stream order keeps
// it safe); a tensor used on another stream must be kept alive until that stream is synchronized.
// When cudaMalloc fails the cache is emptied and the call retried once. Thread-safe (one mutex).
//
// Ownership: an allocator must outlive every Tensor allocated from it.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace dtrain {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Status Allocate(size_t bytes, void** ptr) = 0;
  virtual void Free(void* ptr) = 0;
  virtual DeviceType device() const = 0;
};

struct AllocatorStats {
  int64_t device_mallocs = 0;  // cudaMalloc calls so far
  int64_t bytes_in_use = 0;    // handed out and not freed, plus the blocks CUDA graphs hold (nobody else can have them)
  int64_t peak_bytes_in_use = 0;
  int64_t bytes_reserved = 0;  // in use + cached
};

class CpuAllocator final : public Allocator {
 public:
  explicit CpuAllocator(bool pinned = false) : pinned_(pinned), counts_(std::make_unique<Counts>()) {}
  Status Allocate(size_t bytes, void** ptr) override;
  void Free(void* ptr) override;
  DeviceType device() const override { return DeviceType::kCPU; }

  // The bytes one block of `bytes` counts as: rounded up to 64 (64 for 0).
  static size_t RoundSize(size_t bytes) { return bytes == 0 ? 64 : (bytes + 63) / 64 * 64; }
  // bytes_in_use and peak_bytes_in_use (device_mallocs, bytes_reserved: 0).
  AllocatorStats stats() const;
  void ResetPeak();  // peak = what is in use now

 private:
  struct Counts {
    std::mutex mu;
    std::unordered_map<void*, size_t> live;  // block -> RoundSize
    int64_t in_use = 0, peak = 0;
  };
  bool pinned_;
  std::unique_ptr<Counts> counts_;  // a pointer: the allocator stays movable (DeviceContext assigns one)
};

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(device) {}
  ~CudaCachingAllocator() override;
  CudaCachingAllocator(const CudaCachingAllocator&) = delete;
  CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

  Status Allocate(size_t bytes, void** ptr) override;
  void Free(void* ptr) override;
  DeviceType device() const override { return DeviceType::kCUDA; }

  // Releases every cached (free) block back to the driver.
  void EmptyCache();
  AllocatorStats stats() const;
  void ResetPeak();

  static size_t RoundSize(size_t bytes);

  // CUDA graph capture (core/cuda_graph.h). A graph replays the addresses its capture used, so the blocks a captured
  // region allocates must stay out of everyone else's hands while the graph lives.
  // BeginCapture: from now until EndCapture, the blocks the CALLING thread allocates are recorded as captured (other
  // threads' allocations, e.g. a loader's, are not). `pool` (moved from; may be empty) are blocks held by graphs whose
  // replays never overlap this one's: the capture may reuse them. Captured and pool blocks freed during the capture
  // go to a free list of the capture's own, which only the capturing thread allocates from.
  // EndCapture: that free list — the pool's blocks and the captured blocks free again — goes into *held (counted as in
  // use and reserved: a graph's memory shows in the peak); give them back with ReleaseHeld once no graph uses them.
  // FailedPrecondition (held filled anyway) when the thread freed, during the capture, a block allocated before it, or
  // kept a pool block allocated at the end: a replay (of this graph, or of the earlier ones) would write memory someone
  // else owns.
  using Block = std::pair<void*, size_t>;  // address, rounded size
  void BeginCapture(std::vector<Block> pool = {});
  Status EndCapture(std::vector<Block>* held);
  void ReleaseHeld(const std::vector<Block>& held);

 private:
  void EmptyCacheLocked();

  int device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_blocks_;       // rounded size -> block
  std::unordered_map<void*, size_t> live_blocks_;  // block -> rounded size
  AllocatorStats stats_;
  // Capture state (BeginCapture .. EndCapture).
  bool capturing_ = false;
  std::thread::id capture_thread_;
  std::unordered_set<void*> captured_;  // pool blocks and blocks the capturing thread allocated during the capture
  std::multimap<size_t, void*> capture_free_;  // of those, the free ones (only the capturing thread takes them)
  std::vector<void*> capture_pool_;            // the pool blocks the capture started with
  int64_t foreign_frees_ = 0;                  // blocks it freed during the capture that were allocated before it
};

}  // namespace dtrain
