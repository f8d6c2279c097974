#include "runtime/train/restore_sink.h"

#include <cstring>

#include "core/check.h"
#if DT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#endif

namespace dtrain::runtime {

Status RestoreSink::Create(Tensor* params, int device, Allocator* alloc, std::function<Buffers()> reuse,
                           std::unique_ptr<RestoreSink>* out) {
  std::unique_ptr<RestoreSink> sink(new RestoreSink(params, device, alloc, std::move(reuse)));
#if DT_HAVE_CUDA
  if (device >= 0) DT_RETURN_IF_ERROR(CudaStream::Create(&sink->copy_stream_));
#endif
  *out = std::move(sink);
  return Status::OK();
}

RestoreSink::~RestoreSink() {
#if DT_HAVE_CUDA
  if (device_ >= 0) copy_stream_.SynchronizeForTeardown("RestoreSink");  // copies may still read the buffers
#endif
}

Status RestoreSink::Buffer(size_t index, const proto::CheckpointFile& f, char** out) {
  if (index == 0) {  // a new Load: the buffers of the last one return to the spares, once no copy reads them
    DT_RETURN_IF_ERROR(Finish());
    for (auto& file : files_) spare_.push_back(std::move(file));
    files_.clear();
    params_file_ = -1;
    if (reuse_) {
      for (auto& b : reuse_()) spare_.push_back(std::move(b));
      reuse_ = nullptr;
    }
  }
  if (f.size() % sizeof(float) != 0) {
    return Status::DataLoss(f.name() + ": " + std::to_string(f.size()) + " bytes, not a whole number of f32 values");
  }
  const int64_t numel = static_cast<int64_t>(f.size() / sizeof(float));
  Tensor t;
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->first == f.name() && it->second.numel() == numel) {
      t = std::move(it->second);
      spare_.erase(it);
      break;
    }
  }
  if (t.data() == nullptr && numel > 0) {
    DT_RETURN_IF_ERROR(Tensor::Empty({numel}, DType::kF32, alloc_, &t).WithContext("restore buffer " + f.name()));
  }
  if (f.name() == "params.bin" && numel == params_->numel()) params_file_ = static_cast<int>(index);
  files_.emplace_back(f.name(), std::move(t));
  *out = static_cast<char*>(files_.back().second.data());
  return Status::OK();
}

Status RestoreSink::OnChunk(size_t index, uint64_t offset, uint64_t size) {
  if (static_cast<int>(index) != params_file_) return Status::OK();
  touched_ = true;
  const char* src = static_cast<const char*>(files_[index].second.data()) + offset;
  char* dst = static_cast<char*>(params_->data()) + offset;
#if DT_HAVE_CUDA
  if (device_ >= 0) {
    DT_CUDA_CHECK(cudaSetDevice(device_));  // a reader thread: the parameters' device
    DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, size, cudaMemcpyHostToDevice, copy_stream_.get()));
    return Status::OK();
  }
#endif
  std::memcpy(dst, src, size);
  return Status::OK();
}

Status RestoreSink::Finish() {
#if DT_HAVE_CUDA
  // Sync point: the parameter copies are done before the buffers are reused or the compute stream reads them.
  if (device_ >= 0) DT_CUDA_CHECK(cudaStreamSynchronize(copy_stream_.get()));
#endif
  return Status::OK();
}

std::map<std::string, Tensor> RestoreSink::Files() const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : files_) out[name] = t;
  return out;
}

RestoreSink::Buffers RestoreSink::TakeBuffers() {
  Buffers out = std::move(files_);
  for (auto& b : spare_) out.push_back(std::move(b));
  files_.clear();
  spare_.clear();
  params_file_ = -1;
  return out;
}

}  // namespace dtrain::runtime
