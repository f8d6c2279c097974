#if DT_HAVE_CUDA
#include "core/cuda_graph.h"

#include "core/cuda_check.h"
#include "core/logging.h"

namespace dtrain {

Status CudaGraph::Capture(cudaStream_t stream, CudaCachingAllocator* alloc, const std::function<Status()>& body,
                          std::unique_ptr<CudaGraph>* out) {
  std::unique_ptr<CudaGraph> g(new CudaGraph());  // private constructor
  g->alloc_ = alloc;
  if (alloc != nullptr) alloc->BeginCapture();
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
    const Status held = alloc->EndCapture(&g->held_);
    if (st.ok()) st = held;
  }
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
  if (alloc_ != nullptr) alloc_->ReleaseHeld(held_);
}

}  // namespace dtrain
#endif  // DT_HAVE_CUDA
