#pragma once
// DeviceContext: everything an op needs to run on one device — the device, its compute stream,
// cuBLAS/cuBLASLt handles with their workspace, a cuDNN handle, and the allocators.
//
// Built once in main (one per worker process) and passed explicitly; there are no globals.
// Owns all of its handles; destroy it after every Tensor allocated from it. Not thread-safe: one
// thread issues work on the compute stream (the data loader's copy stream is its own).

#include <memory>

#include "core/allocator.h"
#include "core/cuda_fwd.h"
#include "core/dtype.h"
#include "core/status.h"

namespace dtrain {

class BlasHandles;
class CudaStream;
class CudnnHandle;

class DeviceContext {
 public:
  static Status CreateCpu(std::unique_ptr<DeviceContext>* out);
  // Selects GPU `device` (cudaSetDevice), creates a non-blocking compute stream, cuBLAS and cuDNN
  // handles and the caching allocator. Unavailable when there is no such GPU or dtrain was built without CUDA.
  static Status CreateCuda(int device, std::unique_ptr<DeviceContext>* out);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  DeviceType type() const { return type_; }
  bool is_cuda() const { return type_ == DeviceType::kCUDA; }
  int device_index() const { return device_index_; }
  cudaStream_t stream() const;                               // nullptr on the CPU
  const BlasHandles* blas() const { return blas_.get(); }    // nullptr on the CPU
  const CudnnHandle* cudnn() const { return cudnn_.get(); }  // bound to stream(); nullptr on the CPU

  Allocator* allocator() { return is_cuda() ? static_cast<Allocator*>(device_alloc_.get()) : &host_alloc_; }
  Allocator* host_allocator() { return &host_alloc_; }
  // Page-locked host memory for async H2D/D2H copies on a CUDA context; plain memory on the CPU.
  Allocator* pinned_allocator() { return &pinned_alloc_; }
  CudaCachingAllocator* device_allocator() { return device_alloc_.get(); }  // nullptr on the CPU
  // allocator()'s counters (bytes in use and their peak): the caching allocator's on CUDA, the host allocator's on
  // the CPU (where it also holds the host-side buffers of the run).
  AllocatorStats memory_stats() const;
  void ResetMemoryPeak();  // the peak of memory_stats() = what is in use now

  // Waits for all work queued on the compute stream.
  Status Synchronize() const;

 private:
  DeviceContext() = default;
  DeviceType type_ = DeviceType::kCPU;
  int device_index_ = -1;
  CpuAllocator host_alloc_{false};
  CpuAllocator pinned_alloc_{false};  // page-locked only in a CUDA context (needs a driver)
  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<BlasHandles> blas_;
  std::unique_ptr<CudnnHandle> cudnn_;
  std::unique_ptr<CudaCachingAllocator> device_alloc_;
};

// Number of visible CUDA devices; 0 without CUDA, without a driver, or without GPUs.
int CudaDeviceCount();
// Total memory of GPU `device` in bytes (cudaGetDeviceProperties' totalGlobalMem); 0 without CUDA or that GPU.
int64_t CudaDeviceMemoryBytes(int device);

}  // namespace dtrain
