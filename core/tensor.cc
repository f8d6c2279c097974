#include "core/tensor.h"

#include <cstring>
#include <sstream>

#include "core/check.h"
#if DT_HAVE_CUDA
#include "core/cuda_check.h"
#endif

namespace dtrain {

int64_t Tensor::NumelOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status Tensor::Empty(const std::vector<int64_t>& shape, DType dtype, Allocator* alloc, Tensor* out) {
  for (int64_t d : shape) DT_CHECK_ARG(d >= 0, "negative dimension in shape");
  Tensor t;
  t.shape_ = shape;
  t.numel_ = NumelOf(shape);
  t.dtype_ = dtype;
  t.device_ = alloc->device();
  void* ptr = nullptr;
  DT_RETURN_IF_ERROR(alloc->Allocate(t.nbytes(), &ptr));
  t.storage_ = std::shared_ptr<void>(ptr, [alloc](void* p) { alloc->Free(p); });
  t.data_ = ptr;
  *out = std::move(t);
  return Status::OK();
}

Tensor Tensor::Wrap(void* data, const std::vector<int64_t>& shape, DType dtype, DeviceType device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.numel_ = NumelOf(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Status Tensor::View(int64_t offset, const std::vector<int64_t>& shape, Tensor* out) const {
  const int64_t n = NumelOf(shape);
  DT_CHECK_ARG(offset >= 0 && offset + n <= numel_,
               "view [" << offset << ", " << offset + n << ") out of range for " << ToString());
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + offset * static_cast<int64_t>(DTypeSize(dtype_));
  t.shape_ = shape;
  t.numel_ = n;
  *out = std::move(t);
  return Status::OK();
}

Status Tensor::Reshape(const std::vector<int64_t>& shape, Tensor* out) const {
  DT_CHECK_ARG(NumelOf(shape) == numel_, "reshape of " << ToString() << " changes the element count");
  return View(0, shape, out);
}

Status Tensor::CopyFrom(const Tensor& src, cudaStream_t stream) {
  DT_CHECK_ARG(src.dtype_ == dtype_ && src.numel_ == numel_, "copy from " << src.ToString() << " into " << ToString());
  if (nbytes() == 0) return Status::OK();
  if (device_ == DeviceType::kCPU && src.device_ == DeviceType::kCPU) {
    std::memcpy(data_, src.data_, nbytes());
    return Status::OK();
  }
#if DT_HAVE_CUDA
  DT_CUDA_CHECK(cudaMemcpyAsync(data_, src.data_, nbytes(), cudaMemcpyDefault, stream));
  return Status::OK();
#else
  return Status::Unavailable("device copy requested but dtrain was built without CUDA");
#endif
}

Status Tensor::SetZero(cudaStream_t stream) {
  if (nbytes() == 0) return Status::OK();
  if (device_ == DeviceType::kCPU) {
    std::memset(data_, 0, nbytes());
    return Status::OK();
  }
#if DT_HAVE_CUDA
  DT_CUDA_CHECK(cudaMemsetAsync(data_, 0, nbytes(), stream));
  return Status::OK();
#else
  return Status::Unavailable("device memset requested but dtrain was built without CUDA");
#endif
}

std::string Tensor::ToString() const {
  std::ostringstream os;
  os << DTypeName(dtype_) << "[";
  for (size_t i = 0; i < shape_.size(); ++i) os << (i ? "," : "") << shape_[i];
  os << "]@" << DeviceName(device_);
  return os.str();
}

}  // namespace dtrain
