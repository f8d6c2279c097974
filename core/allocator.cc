#include "core/allocator.h"

#include <cstdlib>
#include <string>

#include "core/logging.h"
#if DT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dtrain {

// ---- CpuAllocator -------------------------------------------------------------------------------

Status CpuAllocator::Allocate(size_t bytes, void** ptr) {
  const size_t size = RoundSize(bytes);
  auto count = [&] {
    std::lock_guard<std::mutex> lock(counts_->mu);
    counts_->live[*ptr] = size;
    counts_->in_use += static_cast<int64_t>(size);
    if (counts_->in_use > counts_->peak) counts_->peak = counts_->in_use;
  };
#if DT_HAVE_CUDA
  if (pinned_) {
    cudaError_t e = cudaHostAlloc(ptr, size, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      return Status::Unavailable("cudaHostAlloc(" + std::to_string(size) + " B): " + cudaGetErrorString(e));
    }
    count();
    return Status::OK();
  }
#endif
  // Large buffers page-aligned: a checkpoint restore reads into them with O_DIRECT (storage/file_storage.h).
  const size_t align = size >= (64u << 10) ? 4096 : 64;
  *ptr = std::aligned_alloc(align, (size + align - 1) / align * align);
  if (*ptr == nullptr) return Status::Unavailable("out of host memory allocating " + std::to_string(size) + " B");
  count();
  return Status::OK();
}

AllocatorStats CpuAllocator::stats() const {
  std::lock_guard<std::mutex> lock(counts_->mu);
  AllocatorStats s;
  s.bytes_in_use = counts_->in_use;
  s.peak_bytes_in_use = counts_->peak;
  return s;
}

void CpuAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(counts_->mu);
  counts_->peak = counts_->in_use;
}

void CpuAllocator::Free(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(counts_->mu);
    auto it = counts_->live.find(ptr);
    if (it != counts_->live.end()) {
      counts_->in_use -= static_cast<int64_t>(it->second);
      counts_->live.erase(it);
    }
  }
#if DT_HAVE_CUDA
  if (pinned_) {
    cudaError_t e = cudaFreeHost(ptr);
    if (e != cudaSuccess) DT_LOG_WARN(kCore, "cudaFreeHost: {}", cudaGetErrorString(e));
    return;
  }
#endif
  std::free(ptr);
}

// ---- CudaCachingAllocator -----------------------------------------------------------------------

size_t CudaCachingAllocator::RoundSize(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = 2u << 20, kSmallLimit = 1u << 20;
  if (bytes == 0) return kSmall;
  if (bytes <= kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

Status CudaCachingAllocator::Allocate(size_t bytes, void** ptr) {
#if DT_HAVE_CUDA
  const size_t size = RoundSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  const bool capture_thread = capturing_ && std::this_thread::get_id() == capture_thread_;
  auto own = capture_thread ? capture_free_.find(size) : capture_free_.end();
  auto it = free_blocks_.find(size);
  if (own != capture_free_.end()) {
    *ptr = own->second;
    capture_free_.erase(own);
  } else if (it != free_blocks_.end()) {
    *ptr = it->second;
    free_blocks_.erase(it);
  } else {
    int prev = 0;
    cudaGetDevice(&prev);
    if (prev != device_) cudaSetDevice(device_);
    cudaError_t e = cudaMalloc(ptr, size);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error before retrying
      EmptyCacheLocked();
      e = cudaMalloc(ptr, size);
    }
    if (prev != device_) cudaSetDevice(prev);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return Status::Unavailable("cudaMalloc(" + std::to_string(size) + " B) on GPU " + std::to_string(device_) +
                                 " failed: " + cudaGetErrorString(e) + " (in use " +
                                 std::to_string(stats_.bytes_in_use) + " B)");
    }
    ++stats_.device_mallocs;
    stats_.bytes_reserved += static_cast<int64_t>(size);
  }
  live_blocks_[*ptr] = size;
  if (capture_thread) captured_.insert(*ptr);
  stats_.bytes_in_use += static_cast<int64_t>(size);
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  return Status::OK();
#else
  (void)bytes;
  *ptr = nullptr;
  return Status::Unavailable("CudaCachingAllocator: dtrain was built without CUDA");
#endif
}

void CudaCachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end()) {
    DT_LOG_ERROR(kCore, "CudaCachingAllocator::Free of unknown pointer {}", ptr);
    return;
  }
  stats_.bytes_in_use -= static_cast<int64_t>(it->second);
  if (capturing_ && captured_.count(ptr) > 0) {
    capture_free_.emplace(it->second, ptr);  // the graph's: never handed to another thread
  } else {
    if (capturing_ && std::this_thread::get_id() == capture_thread_) ++foreign_frees_;
    free_blocks_.emplace(it->second, ptr);
  }
  live_blocks_.erase(it);
}

void CudaCachingAllocator::EmptyCacheLocked() {
#if DT_HAVE_CUDA
  for (auto& [size, block] : free_blocks_) {
    cudaError_t e = cudaFree(block);
    if (e != cudaSuccess) DT_LOG_WARN(kCore, "cudaFree: {}", cudaGetErrorString(e));
    stats_.bytes_reserved -= static_cast<int64_t>(size);
  }
#endif
  free_blocks_.clear();
}

void CudaCachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked();
}

CudaCachingAllocator::~CudaCachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!live_blocks_.empty()) {
    DT_LOG_WARN(kCore, "CudaCachingAllocator destroyed with {} live blocks ({} B); freeing them", live_blocks_.size(),
                stats_.bytes_in_use);
    for (auto& [block, size] : live_blocks_) free_blocks_.emplace(size, block);
    live_blocks_.clear();
  }
  EmptyCacheLocked();
}

void CudaCachingAllocator::BeginCapture(std::vector<Block> pool) {
  std::lock_guard<std::mutex> lock(mu_);
  capturing_ = true;
  capture_thread_ = std::this_thread::get_id();
  captured_.clear();
  capture_free_.clear();
  capture_pool_.clear();
  for (const auto& [block, size] : pool) {  // held (in use) until now: free for this capture
    captured_.insert(block);
    capture_free_.emplace(size, block);
    capture_pool_.push_back(block);
    stats_.bytes_in_use -= static_cast<int64_t>(size);
  }
  foreign_frees_ = 0;
}

Status CudaCachingAllocator::EndCapture(std::vector<Block>* held) {
  std::lock_guard<std::mutex> lock(mu_);
  held->clear();
  for (const auto& [size, block] : capture_free_) {
    held->emplace_back(block, size);
    stats_.bytes_in_use += static_cast<int64_t>(size);
  }
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  capture_free_.clear();
  capturing_ = false;
  captured_.clear();
  int64_t kept = 0;  // pool blocks still allocated: the pool's other graphs replay into them
  for (void* block : capture_pool_) kept += live_blocks_.count(block);
  capture_pool_.clear();
  if (foreign_frees_ > 0) {
    return Status::FailedPrecondition("the captured work freed " + std::to_string(foreign_frees_) +
                                      " device block(s) allocated before the capture (a replay would write them)");
  }
  if (kept > 0) {
    return Status::FailedPrecondition("the captured work kept " + std::to_string(kept) +
                                      " device block(s) that an earlier graph of its pool replays into");
  }
  return Status::OK();
}

void CudaCachingAllocator::ReleaseHeld(const std::vector<Block>& held) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [block, size] : held) {
    free_blocks_.emplace(size, block);
    stats_.bytes_in_use -= static_cast<int64_t>(size);
  }
}

AllocatorStats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CudaCachingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

}  // namespace dtrain
