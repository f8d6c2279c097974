#if DT_HAVE_CUDA
#include "core/cuda_graph.h"

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/logging.h"

namespace dtrain {

CudaGraphPool::~CudaGraphPool() {
  if (alloc_ != nullptr) alloc_->ReleaseHeld(blocks_);
}

size_t CudaGraphPool::bytes() const {
  size_t n = 0;
  for (const auto& block : blocks_) n += block.second;
  return n;
}

Status CudaGraph::Capture(cudaStream_t stream, std::shared_ptr<CudaGraphPool> pool, const std::function<Status()>& body,
                          std::unique_ptr<CudaGraph>* out) {
  DT_CHECK_ARG(pool != nullptr, "CudaGraph::Capture: null pool");
  std::unique_ptr<CudaGraph> g(new CudaGraph());  // private constructor
  CudaCachingAllocator* alloc = pool->alloc_;
  if (alloc != nullptr) alloc->BeginCapture(std::move(pool->blocks_));
  cudaError_t begin = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  Status st = begin == cudaSuccess
                  ? body()
                  : Status::Unavailable(std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(begin));
  cudaGraph_t graph = nullptr;
  if (begin == cudaSuccess) {
    // Always end the capture, so the stream leaves capture mode whatever body did.
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (st.ok() && end != cudaSuccess) {
      st = Status::Unavailable(std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end));
    }
  }
  cudaGetLastError();  // capture errors are not sticky; clear the last-error slot they leave
  g->graph_ = graph;   // destroyed with g on any error below
  if (alloc != nullptr) {
    // Back into the pool even when the capture failed: its other graphs may use any of these blocks.
    const Status held = alloc->EndCapture(&pool->blocks_);
    if (st.ok()) st = held;
  }
  g->pool_ = std::move(pool);
  if (!st.ok()) return st;
  DT_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &g->num_nodes_));
  DT_CUDA_CHECK(cudaGraphInstantiate(&g->exec_, graph, 0));
  *out = std::move(g);
  return Status::OK();
}

Status CudaGraph::Launch(cudaStream_t stream) {
  DT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  last_stream_ = stream;
  return Status::OK();
}

CudaGraph::~CudaGraph() {
  if (last_stream_ != nullptr) {
    // The held blocks go back to the cache: the last replay must be done with them.
    const cudaError_t e = cudaStreamSynchronize(last_stream_);
    if (e != cudaSuccess) DT_LOG_WARN(kCore, "CudaGraph teardown: cudaStreamSynchronize: {}", cudaGetErrorString(e));
  }
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
}

}  // namespace dtrain
#endif  // DT_HAVE_CUDA
