#pragma once
// RestoreSink: where a resuming trainer's CheckpointManager::Load puts the checkpoint (the LoadSink of
// runtime/checkpoint/checkpoint.h): straight into the training state, chunk by chunk, while later chunks are still
// being read — no host copy of the whole checkpoint is made.
//
// The state is given as StateSlices (runtime/optim/state_slice.h: params.bin into the parameters, the optimizer
// state files into the optimizer's tensors or this rank's ZeRO-1 shards). A file whose name has slices, all
// expecting its size, goes to them:
//   - one slice taking the whole file into a host tensor: read straight into that tensor (the CPU trainer: its
//     parameters and optimizer state exist and are written already, so no page is faulted in during the read);
//   - otherwise through a few staging buffers of `slot_bytes` (pinned on a CUDA build, allocated as first needed,
//     at most `max_slots`): each chunk is read into one, checksummed there while in cache, and copied on into its
//     slices — cudaMemcpyAsync on a copy stream of the sink's own for device tensors (the buffer is reused once
//     that copy is done), memcpy for host ones.
// Every other file (no slices, or another size: the trainer then reports the mismatch) is read into a host buffer
// of its own (Files()), never zero-filled. A slice into a bf16 tensor (bf16 params or optimizer state: the files hold
// f32, runtime/checkpoint/dtype_convert.h) always goes through the staging buffers, where each chunk's part is
// rounded to nearest even in place before it is copied on — or, for split masters (StateSlice::low), split in place
// into high halves and the slot's buffer of low halves (runtime/train/master_halves.h), both copied on.
//
// A failed Load restores nothing, but chunks written before the failure was known are in the state by then:
// touched() says so, and the trainer initialises the state again when no checkpoint loads in the end (a later Load
// that succeeds writes every slice of its files completely).
//
// Ownership: owns the staging and host buffers; borrows the slices' tensors and the allocator, which must outlive
// it. Thread-safety: Begin/Finish/Files/in_place from the owner thread; Acquire/Release from Load's reader threads.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/optim/state_slice.h"
#if DT_HAVE_CUDA
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {

class RestoreSink : public LoadSink {
 public:
  // `device`: the CUDA device of the device tensors among the slices, -1 when there are none. `alloc` allocates
  // the staging and host buffers. `slot_bytes` >= the Load's chunk size; `max_slots` >= 1 (the reader threads and
  // a few more keep them all busy).
  static Status Create(std::vector<StateSlice> slices, int device, Allocator* alloc, uint64_t slot_bytes,
                       size_t max_slots, std::unique_ptr<RestoreSink>* out);
  ~RestoreSink() override;

  Status Begin(const proto::CheckpointManifest& m) override;
  Status Acquire(size_t file, uint64_t offset, uint64_t size, char** out) override;
  Status Release(size_t file, uint64_t offset, uint64_t size, char* buf, bool filled) override;

  // Waits for the copies into the state. Call after every Load, before the state or Files() is used.
  Status Finish();
  // The files of the last Load that went to host buffers: name -> f32 host tensor (valid while the sink lives).
  std::map<std::string, Tensor> Files() const;
  // The files of the last Load that went into their slices (complete once that Load succeeded and Finish returned).
  const std::set<std::string>& in_place() const { return in_place_; }
  // Some Load, failed or not, wrote into a slice.
  bool touched() const { return touched_.load(); }
  // Staging buffers allocated so far.
  size_t slots() const { return slots_.size(); }

 private:
  struct Route {  // where one file of the Load goes
    std::string name;
    std::vector<const StateSlice*> slices;  // empty: into `host`
    char* direct = nullptr;                 // the one host tensor taking the whole file, read into directly
    Tensor host;
  };
  struct Slot {
    Tensor buf;
    Tensor low;  // split masters' low halves of a chunk (a slice with StateSlice::low among the slices only)
#if DT_HAVE_CUDA
    CudaEvent copied;  // recorded after the copies out of buf
#endif
  };

  RestoreSink(std::vector<StateSlice> slices, int device, Allocator* alloc, uint64_t slot_bytes, size_t max_slots)
      : slices_(std::move(slices)), device_(device), alloc_(alloc), slot_bytes_(slot_bytes), max_slots_(max_slots) {}
  Status TakeSlot(Slot** out);
  void GiveSlot(Slot* slot);
  Status CopyOut(const Route& r, uint64_t offset, uint64_t size, char* buf, Slot* slot);

  const std::vector<StateSlice> slices_;
  bool splits_ = false;                // a slice has StateSlice::low
  [[maybe_unused]] const int device_;  // (read by the CUDA path only)
  Allocator* const alloc_;
  const uint64_t slot_bytes_;
  const size_t max_slots_;
  std::vector<Route> routes_;  // by manifest index, for the current Load
  std::set<std::string> in_place_;
  std::atomic<bool> touched_{false};

  std::mutex mu_;  // guards slots_, free_, busy_
  std::condition_variable slot_freed_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_;
  std::map<const char*, Slot*> busy_;  // buffer -> its slot, between Acquire and Release
#if DT_HAVE_CUDA
  CudaStream copy_stream_;  // the copies into device tensors
#endif
};

}  // namespace dtrain::runtime
