#pragma once
// Move-only RAII owners of CUDA streams and events, and the per-device library handles.
// Destructors log failures and never throw. Include only with DT_HAVE_CUDA.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/status.h"

namespace dtrain {

class CudaStream {
 public:
  CudaStream() = default;
  // A non-blocking stream (does not sync with the legacy default stream). Lower `priority`
  // numbers are higher priority (the comm stream uses the highest).
  static Status Create(CudaStream* out, int priority = 0);
  // A non-blocking stream of the device's highest priority (collectives: their kernels go first).
  static Status CreateHighestPriority(CudaStream* out);
  ~CudaStream();
  CudaStream(CudaStream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  CudaStream& operator=(CudaStream&& o) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return s_; }
  // For destructors of owners whose buffers the stream's work may still touch: waits for that work;
  // a failure (it cannot be returned from a destructor) is logged as a warning naming `owner`.
  void SynchronizeForTeardown(const char* owner) const;

 private:
  cudaStream_t s_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent() = default;
  // `timing` false gives the cheaper cudaEventDisableTiming events used for cross-stream waits.
  static Status Create(CudaEvent* out, bool timing = false);
  ~CudaEvent();
  CudaEvent(CudaEvent&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return e_; }

  Status Record(cudaStream_t stream);
  // Makes `stream` wait (on the device, no host sync) for the work recorded in this event.
  Status Block(cudaStream_t stream) const;
  Status Synchronize() const;
  // *done: the recorded work has finished (cudaEventQuery; no wait).
  Status Done(bool* done) const;

 private:
  cudaEvent_t e_ = nullptr;
};

// cuBLAS + cuBLASLt handles and the cuBLASLt workspace, bound to one stream.
class BlasHandles {
 public:
  BlasHandles() = default;
  static Status Create(cudaStream_t stream, BlasHandles* out);
  ~BlasHandles();
  BlasHandles(BlasHandles&& o) noexcept;
  BlasHandles& operator=(BlasHandles&& o) noexcept;
  BlasHandles(const BlasHandles&) = delete;
  BlasHandles& operator=(const BlasHandles&) = delete;

  cublasHandle_t cublas() const { return cublas_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  void Reset();
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

// A cuDNN handle bound to one stream (the context's compute stream). cuDNN calls made with it are
// queued on that stream; callers pass their own workspace (kernels/conv2d.h keeps one).
class CudnnHandle {
 public:
  CudnnHandle() = default;
  static Status Create(cudaStream_t stream, CudnnHandle* out);
  ~CudnnHandle();
  CudnnHandle(CudnnHandle&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  CudnnHandle& operator=(CudnnHandle&& o) noexcept;
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  cudnnHandle_t get() const { return h_; }

 private:
  cudnnHandle_t h_ = nullptr;
};

}  // namespace dtrain
