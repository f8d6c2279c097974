#pragma once
// StagedArgs: a small device buffer the host refreshes once per step on the compute stream — the optimizer's
// per-step constants (LR, bias corrections) that a replayed CUDA graph reads from device memory (see
// kernels/optim_update.h, "Staged hyper-parameters").
//
// Stage() writes the bytes into the next slot of a ring of pinned host slots and queues the slot's copy into the
// device buffer on ctx.stream(): no host sync, no pageable copy. A slot is written again only after its previous
// copy has finished (one event per slot; with the ring's depth that wait is normally long over). On the CPU the
// "device" buffer is host memory and Stage copies at once.
//
// Ownership: allocated from ctx's allocators in Create; ctx must outlive it. Not thread-safe.

#include <cstddef>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain {
class CudaEvent;
}  // namespace dtrain

namespace dtrain::runtime {

class StagedArgs {
 public:
  // A buffer of `bytes` (> 0) on ctx's device.
  static Status Create(DeviceContext& ctx, size_t bytes, std::unique_ptr<StagedArgs>* out);
  ~StagedArgs();
  StagedArgs(const StagedArgs&) = delete;
  StagedArgs& operator=(const StagedArgs&) = delete;

  // Queues device() = data[0, n) on ctx.stream(); n <= the buffer's bytes. `data` may be reused on return.
  Status Stage(DeviceContext& ctx, const void* data, size_t n);
  // The buffer (u8[bytes] on ctx's device); its address never changes.
  const Tensor& device() const { return device_; }

 private:
  StagedArgs() = default;
  static constexpr int kSlots = 8;
  size_t bytes_ = 0;
  Tensor device_;
#if DT_HAVE_CUDA
  Tensor pinned_;  // kSlots * bytes_
  std::vector<std::unique_ptr<CudaEvent>> copied_;
  std::vector<bool> in_flight_;
  int next_ = 0;
#endif
};

}  // namespace dtrain::runtime
