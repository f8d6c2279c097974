#pragma once
// Tensor: a typed, shaped view of host or device memory.
//
// A Tensor is a cheap handle: copies share the same storage (like a shared_ptr), and the storage is
// returned to its Allocator when the last handle goes away (RAII). View() makes a sub-tensor over a
// contiguous element range of the same storage — this is how parameters and gradients live inside
// one flat buffer. Wrap() makes a non-owning view of memory owned elsewhere.
// Tensors are always contiguous, row-major. Not thread-safe for concurrent mutation of one handle.

#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_fwd.h"
#include "core/dtype.h"
#include "core/status.h"

namespace dtrain {

class Tensor {
 public:
  Tensor() = default;

  // Allocates uninitialised storage for `shape` from `alloc` (which must outlive the tensor).
  static Status Empty(const std::vector<int64_t>& shape, DType dtype, Allocator* alloc, Tensor* out);
  // Non-owning view of `data`.
  static Tensor Wrap(void* data, const std::vector<int64_t>& shape, DType dtype, DeviceType device);

  // Sub-tensor of `shape` starting `offset` elements into this one (shares storage).
  Status View(int64_t offset, const std::vector<int64_t>& shape, Tensor* out) const;
  // Same storage, new shape with the same element count.
  Status Reshape(const std::vector<int64_t>& shape, Tensor* out) const;

  // Copies src into this tensor (same dtype and numel; any device pair). On `stream` when a
  // device is involved: the copy is asynchronous w.r.t. the host unless both are on the CPU.
  Status CopyFrom(const Tensor& src, cudaStream_t stream = nullptr);
  // Sets every byte to zero (cudaMemsetAsync on `stream` for device tensors).
  Status SetZero(cudaStream_t stream = nullptr);

  bool defined() const { return data_ != nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * DTypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  DeviceType device() const { return device_; }
  bool is_cuda() const { return device_ == DeviceType::kCUDA; }

  // "f32[64,784]@cuda"
  std::string ToString() const;

  static int64_t NumelOf(const std::vector<int64_t>& shape);

 private:
  std::shared_ptr<void> storage_;  // keeps the allocation alive; null for Wrap()
  void* data_ = nullptr;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  DeviceType device_ = DeviceType::kCPU;
};

}  // namespace dtrain
