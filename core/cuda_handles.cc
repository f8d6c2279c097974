#if DT_HAVE_CUDA
#include "core/cuda_handles.h"

#include "core/cuda_lib_check.h"

namespace dtrain {

Status CudaStream::Create(CudaStream* out, int priority) {
  CudaStream s;
  DT_CUDA_CHECK(cudaStreamCreateWithPriority(&s.s_, cudaStreamNonBlocking, priority));
  *out = std::move(s);
  return Status::OK();
}

Status CudaStream::CreateHighestPriority(CudaStream* out) {
  int least = 0;
  int greatest = 0;
  DT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return Create(out, greatest);
}

void CudaStream::SynchronizeForTeardown(const char* owner) const {
  if (s_ == nullptr) return;
  cudaError_t e = cudaStreamSynchronize(s_);
  if (e != cudaSuccess) DT_LOG_WARN(kCore, "{} teardown: {}", owner, cudaGetErrorString(e));
}

CudaStream::~CudaStream() {
  if (s_ != nullptr) {
    cudaError_t e = cudaStreamDestroy(s_);
    if (e != cudaSuccess) DT_LOG_WARN(kCore, "cudaStreamDestroy: {}", cudaGetErrorString(e));
  }
}

CudaStream& CudaStream::operator=(CudaStream&& o) noexcept {
  if (this != &o) {
    this->~CudaStream();
    s_ = o.s_;
    o.s_ = nullptr;
  }
  return *this;
}

Status CudaEvent::Create(CudaEvent* out, bool timing) {
  CudaEvent ev;
  DT_CUDA_CHECK(cudaEventCreateWithFlags(&ev.e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  *out = std::move(ev);
  return Status::OK();
}

CudaEvent::~CudaEvent() {
  if (e_ != nullptr) {
    cudaError_t e = cudaEventDestroy(e_);
    if (e != cudaSuccess) DT_LOG_WARN(kCore, "cudaEventDestroy: {}", cudaGetErrorString(e));
  }
}

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    this->~CudaEvent();
    e_ = o.e_;
    o.e_ = nullptr;
  }
  return *this;
}

Status CudaEvent::Record(cudaStream_t stream) {
  DT_CUDA_CHECK(cudaEventRecord(e_, stream));
  return Status::OK();
}

Status CudaEvent::Block(cudaStream_t stream) const {
  DT_CUDA_CHECK(cudaStreamWaitEvent(stream, e_, 0));
  return Status::OK();
}

Status CudaEvent::Synchronize() const {
  DT_CUDA_CHECK(cudaEventSynchronize(e_));
  return Status::OK();
}

Status CudaEvent::Done(bool* done) const {
  const cudaError_t e = cudaEventQuery(e_);
  *done = e == cudaSuccess;
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is no error: keep it out of the next launch check
    return Status::OK();
  }
  DT_CUDA_CHECK(e);
  return Status::OK();
}

// 32 MiB: what cuBLASLt's heuristics want for large Hopper GEMMs.
constexpr size_t kLtWorkspaceBytes = 32u << 20;

Status BlasHandles::Create(cudaStream_t stream, BlasHandles* out) {
  BlasHandles h;
  DT_CUBLAS_CHECK(cublasCreate(&h.cublas_));
  DT_CUBLAS_CHECK(cublasSetStream(h.cublas_, stream));
  DT_CUBLAS_CHECK(cublasLtCreate(&h.lt_));
  DT_CUDA_CHECK(cudaMalloc(&h.workspace_, kLtWorkspaceBytes));
  h.workspace_bytes_ = kLtWorkspaceBytes;
  // Same workspace for classic cuBLAS calls, so neither allocates inside the step loop.
  DT_CUBLAS_CHECK(cublasSetWorkspace(h.cublas_, h.workspace_, h.workspace_bytes_));
  *out = std::move(h);
  return Status::OK();
}

void BlasHandles::Reset() {
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  cublas_ = nullptr;
  lt_ = nullptr;
  workspace_ = nullptr;
  workspace_bytes_ = 0;
}

BlasHandles::~BlasHandles() { Reset(); }

BlasHandles::BlasHandles(BlasHandles&& o) noexcept
    : cublas_(o.cublas_), lt_(o.lt_), workspace_(o.workspace_), workspace_bytes_(o.workspace_bytes_) {
  o.cublas_ = nullptr;
  o.lt_ = nullptr;
  o.workspace_ = nullptr;
  o.workspace_bytes_ = 0;
}

BlasHandles& BlasHandles::operator=(BlasHandles&& o) noexcept {
  if (this != &o) {
    Reset();
    std::swap(cublas_, o.cublas_);
    std::swap(lt_, o.lt_);
    std::swap(workspace_, o.workspace_);
    std::swap(workspace_bytes_, o.workspace_bytes_);
  }
  return *this;
}

Status CudnnHandle::Create(cudaStream_t stream, CudnnHandle* out) {
  CudnnHandle h;
  DT_CUDNN_CHECK(cudnnCreate(&h.h_));
  DT_CUDNN_CHECK(cudnnSetStream(h.h_, stream));
  *out = std::move(h);
  return Status::OK();
}

CudnnHandle::~CudnnHandle() {
  if (h_ != nullptr) {
    cudnnStatus_t s = cudnnDestroy(h_);
    if (s != CUDNN_STATUS_SUCCESS) DT_LOG_WARN(kCore, "cudnnDestroy: {}", cudnnGetErrorString(s));
  }
}

CudnnHandle& CudnnHandle::operator=(CudnnHandle&& o) noexcept {
  if (this != &o) {
    this->~CudnnHandle();
    h_ = o.h_;
    o.h_ = nullptr;
  }
  return *this;
}

}  // namespace dtrain
#endif  // DT_HAVE_CUDA
