#pragma once
// CudaGraph: work captured once from a stream and replayed with one launch (cudaGraphLaunch), so a step of
// hundreds of small kernels costs one host call and no launch gaps. Include only with DT_HAVE_CUDA.
//
// Capture contract: `body` queues device work on `stream` (and on streams that fork from it and join back
// through events); it must not synchronize the host with the device, read device results on the host, or
// change shapes between replays. Kernel arguments are frozen at capture: anything that changes per replay
// (a learning rate, a step count) must be read by the kernels from device memory that the caller refreshes
// before each Launch, and inputs must live in buffers whose addresses stay fixed. Host-side effects of `body`
// happen once, at capture, not at each replay.
//
// Memory: device blocks the allocator hands to the capturing thread during the capture, and that are free again at
// its end, are held in the graph's CudaGraphPool (CudaCachingAllocator::BeginCapture/EndCapture). Graphs whose
// replays never overlap (all launched on one stream) can share one pool: each capture reuses the blocks the pool
// already holds, so they hold about what the largest of them needs. The blocks go back to the cache when the last
// graph of the pool is destroyed, after its last replay has finished on the device.
//
// Capture runs in cudaStreamCaptureModeThreadLocal: other threads (the data loader, the checkpoint writer) keep
// using CUDA normally; an unsafe call on the capturing thread fails the capture. A failed capture leaves the
// stream usable and no work of `body` queued: Capture returns the reason (body's own error first) and the
// caller runs `body` eagerly instead.

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/status.h"

namespace dtrain {

// Device memory held for graphs (see Memory above). Shared by the graphs captured into it.
class CudaGraphPool {
 public:
  // `alloc`: where the blocks come from and go back to; null for graphs that allocate nothing.
  explicit CudaGraphPool(CudaCachingAllocator* alloc) : alloc_(alloc) {}
  ~CudaGraphPool();
  CudaGraphPool(const CudaGraphPool&) = delete;
  CudaGraphPool& operator=(const CudaGraphPool&) = delete;
  size_t bytes() const;

 private:
  friend class CudaGraph;
  CudaCachingAllocator* alloc_;
  std::vector<CudaCachingAllocator::Block> blocks_;
};

class CudaGraph {
 public:
  // Captures `body` on `stream` and instantiates the graph, its memory held in `pool` (must not be null; a pool
  // without an allocator: `body` must allocate nothing). Nothing runs on the device until Launch.
  static Status Capture(cudaStream_t stream, std::shared_ptr<CudaGraphPool> pool, const std::function<Status()>& body,
                        std::unique_ptr<CudaGraph>* out);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Queues one replay on `stream` (asynchronous, like the captured launches were).
  Status Launch(cudaStream_t stream);
  size_t num_nodes() const { return num_nodes_; }

 private:
  CudaGraph() = default;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  cudaStream_t last_stream_ = nullptr;  // where the last replay was queued (synchronized before teardown)
  size_t num_nodes_ = 0;
  std::shared_ptr<CudaGraphPool> pool_;  // released after the last replay (the destructor synchronizes)
};

}  // namespace dtrain
