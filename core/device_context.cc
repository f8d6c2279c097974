#include "core/device_context.h"

#include <string>

#include "core/check.h"
#if DT_HAVE_CUDA
#include "core/cuda_handles.h"
#include "core/cuda_lib_check.h"
#endif

namespace dtrain {

#if !DT_HAVE_CUDA
// CPU-only builds never create these; complete (empty) types let the unique_ptrs be destroyed.
class CudaStream {};
class BlasHandles {};
class CudnnHandle {};
#endif

// Members of incomplete types (CudaStream, BlasHandles, CudnnHandle) are destroyed here, where they are
// complete. Order: allocator first (its cached blocks), then cuDNN and cuBLAS, then the stream.
DeviceContext::~DeviceContext() {
  if (is_cuda()) {
    Status st = Synchronize();
    if (!st.ok()) DT_LOG_WARN(kCore, "DeviceContext teardown: {}", st.ToString());
  }
  device_alloc_.reset();
  cudnn_.reset();
  blas_.reset();
  stream_.reset();
}

Status DeviceContext::CreateCpu(std::unique_ptr<DeviceContext>* out) {
  out->reset(new DeviceContext());  // private constructor: make_unique cannot reach it
  return Status::OK();
}

int CudaDeviceCount() {
#if DT_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

int64_t CudaDeviceMemoryBytes(int device) {
#if DT_HAVE_CUDA
  cudaDeviceProp prop;
  if (device < 0 || device >= CudaDeviceCount() || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<int64_t>(prop.totalGlobalMem);
#else
  (void)device;
  return 0;
#endif
}

AllocatorStats DeviceContext::memory_stats() const {
  return device_alloc_ ? device_alloc_->stats() : host_alloc_.stats();
}

void DeviceContext::ResetMemoryPeak() {
  if (device_alloc_) {
    device_alloc_->ResetPeak();
  } else {
    host_alloc_.ResetPeak();
  }
}

Status DeviceContext::CreateCuda(int device, std::unique_ptr<DeviceContext>* out) {
#if DT_HAVE_CUDA
  const int n = CudaDeviceCount();
  if (device < 0 || device >= n) {
    return Status::Unavailable("GPU " + std::to_string(device) + " requested but " + std::to_string(n) +
                               " CUDA device(s) are visible (check CUDA_VISIBLE_DEVICES and `dtrain doctor`)");
  }
  DT_CUDA_CHECK(cudaSetDevice(device));
  std::unique_ptr<DeviceContext> ctx(new DeviceContext());
  ctx->type_ = DeviceType::kCUDA;
  ctx->device_index_ = device;
  ctx->pinned_alloc_ = CpuAllocator(/*pinned=*/true);
  ctx->stream_ = std::make_unique<CudaStream>();
  DT_RETURN_IF_ERROR(CudaStream::Create(ctx->stream_.get()));
  ctx->blas_ = std::make_unique<BlasHandles>();
  DT_RETURN_IF_ERROR(BlasHandles::Create(ctx->stream_->get(), ctx->blas_.get()));
  ctx->cudnn_ = std::make_unique<CudnnHandle>();
  DT_RETURN_IF_ERROR(CudnnHandle::Create(ctx->stream_->get(), ctx->cudnn_.get()));
  ctx->device_alloc_ = std::make_unique<CudaCachingAllocator>(device);
  *out = std::move(ctx);
  return Status::OK();
#else
  (void)device;
  (void)out;
  return Status::Unavailable("a GPU was requested but dtrain was built without CUDA (-DDT_WITH_CUDA=OFF)");
#endif
}

cudaStream_t DeviceContext::stream() const {
#if DT_HAVE_CUDA
  return stream_ ? stream_->get() : nullptr;
#else
  return nullptr;
#endif
}

Status DeviceContext::Synchronize() const {
#if DT_HAVE_CUDA
  if (is_cuda()) DT_CUDA_CHECK(cudaStreamSynchronize(stream()));
#endif
  return Status::OK();
}

}  // namespace dtrain
