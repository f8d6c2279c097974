#pragma once
// RestoreSink: where a resuming trainer's CheckpointManager::Load puts the checkpoint (the LoadSink of
// runtime/checkpoint/checkpoint.h): one host buffer per file, never zero-filled — pinned on a CUDA build, and the
// snapshot buffers (runtime/checkpoint/snapshot_pool.h) where their name and size match a file, so that the same
// pinned memory serves the restore and then the first save — and params.bin copied on into the model's parameters
// chunk by chunk while later chunks are still being read: cudaMemcpyAsync on a side stream of its own on a CUDA
// build, memcpy on the reader thread (while the chunk is in cache) on the CPU.
//
// A failed Load restores nothing, but chunks copied before the failure was known are in the parameters by then:
// touched_params() says so, and the trainer initialises them again when no checkpoint loads in the end.
//
// Ownership: owns the buffers (TakeBuffers hands them over); borrows `params` and the allocator, which must outlive
// it. Thread-safety: Buffer/Finish/Files/TakeBuffers from the owner thread; OnChunk from Load's reader threads.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/checkpoint/checkpoint.h"
#if DT_HAVE_CUDA
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {

class RestoreSink : public LoadSink {
 public:
  using Buffers = std::vector<std::pair<std::string, Tensor>>;  // file name -> f32 host tensor

  // `params`: the model's flat f32 parameters (device or host); `device`: its CUDA device, -1 on the CPU;
  // `alloc`: allocates the buffers that `reuse` does not provide. `reuse` (may be empty) is called once, at the
  // first Buffer call (so nothing waits for it when there is nothing to load); its tensors are taken over.
  static Status Create(Tensor* params, int device, Allocator* alloc, std::function<Buffers()> reuse,
                       std::unique_ptr<RestoreSink>* out);
  ~RestoreSink() override;

  Status Buffer(size_t index, const proto::CheckpointFile& f, char** out) override;
  Status OnChunk(size_t index, uint64_t offset, uint64_t size) override;

  // Waits for the copies into the parameters. Call after every Load, before the buffers or the parameters are used.
  Status Finish();
  // The files of the last Load: name -> f32 host tensor (valid while the sink lives; after a successful Load).
  std::map<std::string, Tensor> Files() const;
  // params.bin of the last Load went into the parameters (with its size: the caller copies nothing more of it).
  bool params_copied() const { return params_file_ >= 0; }
  // Some Load, failed or not, wrote into the parameters.
  bool touched_params() const { return touched_.load(); }
  // Gives up every buffer, those of the last Load first in manifest order (the snapshot buffers of the first save).
  Buffers TakeBuffers();

 private:
  RestoreSink(Tensor* params, int device, Allocator* alloc, std::function<Buffers()> reuse)
      : params_(params), device_(device), alloc_(alloc), reuse_(std::move(reuse)) {}

  Tensor* params_;
  int device_;
  Allocator* alloc_;
  std::function<Buffers()> reuse_;          // until called
  Buffers spare_;                           // reusable tensors not given to a file
  std::vector<Buffers::value_type> files_;  // by manifest index
  int params_file_ = -1;                    // index of params.bin when its chunks go into the parameters
  std::atomic<bool> touched_{false};
#if DT_HAVE_CUDA
  CudaStream copy_stream_;  // the parameter copies (CUDA builds)
#endif
};

}  // namespace dtrain::runtime
