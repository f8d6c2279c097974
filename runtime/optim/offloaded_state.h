#pragma once
// OffloadedState: an optimizer's state tensors kept in page-locked host memory instead of on the GPU
// (optim.offload: cpu), and the update that streams them through the GPU. The update is the algorithm's own fused
// CUDA kernel (OptimAlgorithm::Update, the same bits as state on the device), run chunk by chunk: each chunk's
// state is copied in on an H2D stream, updated on the compute stream, copied back on a D2H stream, through a ring of
// kSlots device buffers, so the copies in, the kernels and the copies out of different chunks overlap. The copies
// in of the first kSlots chunks wait for nothing on the compute stream: queued when Update is called (after the
// host has queued the backward), they overlap the step's backward; the copies out of the last ones overlap the next
// step's forward. The rest is bound by the PCIe link: about 2 x the streamed state's bytes cross it per step.
//
// Kept part (optim.offload_keep_gib, or what optim.offload auto finds free): elements [0, keep) of each state tensor
// stay on the device and are updated there in place, never crossing PCIe; their chunks are interleaved with the
// streamed ones on the compute stream, which otherwise waits for the link.
//
// GPU memory: the kept part plus kSlots x chunk x the state tensors (128 MiB for f32 AdamW at the default chunk). The
// tensors may differ in dtype (split masters' low halves beside f32 moments: OptimizerStateDTypes).
// CPU contexts: the state is host memory anyway; Update runs the algorithm over the host state chunk by chunk, in
// place (no ring, no copies) — the CPU reference of the chunking, with the same offsets; the kept part is a separate
// tensor of ctx's allocator there too, so the same upload and settle run.
//
// Ordering (contract): host() is the state whenever Settle() has returned and no Update ran since. Update's copies
// back finish some time after it returns; Settle() waits for them on the host and copies the kept part back, and
// must run before anything reads or writes host() outside Update (a checkpoint's snapshot, a restore, a reset). The
// first Update after Create or after a Settle first copies the kept part in from host(), so whatever was written
// there counts. Update orders itself after the previous Update's copies back.
//
// Ownership: owns the host tensors (ctx.pinned_allocator()), the kept part and the device ring (ctx.allocator()),
// the two copy streams and the events; the destructor waits for the copy streams. Not thread-safe: one optimizer's
// thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/optim/optim_algorithm.h"

namespace dtrain::runtime {

class OffloadedState {
 public:
  static constexpr int kSlots = 4;                            // chunks in flight on the device
  static constexpr int64_t kDefaultChunk = int64_t{4} << 20;  // elements per chunk (16 MiB of each f32 state)

  // One host tensor of `numel` elements per entry of `dtypes`, zeroed; `chunk` elements per streamed chunk (<= 0:
  // kDefaultChunk; tests use small ones to cross chunk boundaries); the first `keep` elements of each kept on ctx's
  // device (clamped to [0, numel]).
  static Status Create(DeviceContext& ctx, int64_t numel, const std::vector<DType>& dtypes, int64_t chunk, int64_t keep,
                       std::unique_ptr<OffloadedState>* out);
  ~OffloadedState();
  OffloadedState(const OffloadedState&) = delete;
  OffloadedState& operator=(const OffloadedState&) = delete;

  // The state (numel elements each, in the algorithm's state order). See Ordering.
  std::vector<Tensor>& host() { return host_; }

  // One contiguous range of an update: params and grads views of the same numel on ctx's device, whose element 0
  // is element `offset` of the whole flat buffer (for the stochastic rounding) and whose state is host() elements
  // [state_offset, state_offset + numel). A ZeRO-1 shard is one segment per bucket this rank owns a part of.
  struct Segment {
    Tensor* params = nullptr;
    const Tensor* grads = nullptr;
    int64_t offset = 0;
    int64_t state_offset = 0;
  };

  // algo.Update over every segment with its state, chunk by chunk (a chunk never spans two segments; the ring
  // runs on across them); `scale`, `skip`, `staged` as OptimAlgorithm::Update takes them. Queued on ctx's streams;
  // no host sync. Segments must not overlap in the state.
  Status Update(DeviceContext& ctx, const OptimAlgorithm& algo, const std::vector<Segment>& segments,
                const Tensor* scale, const Tensor* skip, const Tensor* staged);
  // The whole state as one segment: params and grads of numel elements, state_offset 0.
  Status Update(DeviceContext& ctx, const OptimAlgorithm& algo, Tensor* params, const Tensor& grads,
                const Tensor* scale, const Tensor* skip, const Tensor* staged, int64_t offset);

  // Host sync point: waits until the last Update's copies back are in host() and copies the kept part there.
  Status Settle();

  int64_t kept() const { return keep_; }
  // Where the state is, for the progress line: "in host memory (optim.offload cpu)", and the kept part when there is
  // one ("..., 25.63 GiB of it kept on the GPU").
  std::string Placement() const;

  // Elements of each state tensor the device ring holds for `numel` streamed elements (what the memory plan counts
  // on the GPU beside the kept part): kSlots chunks, or fewer when less is streamed (0 for none).
  static int64_t RingNumel(int64_t numel, int64_t chunk);
  // The elements of each state tensor (one per entry of `dtypes`) that `keep_bytes` of device memory hold, at most
  // `numel` (optim.offload_keep_gib over the state tensors).
  static int64_t KeepNumel(int64_t keep_bytes, const std::vector<DType>& dtypes, int64_t numel);

 private:
  OffloadedState() = default;
  struct Gpu;

  // One chunk of an Update: `count` elements of `seg` from its element `begin`, state element `at`.
  struct Piece {
    const Segment* seg;
    int64_t begin, count, at;
  };
  Status UpdateKept(DeviceContext& ctx, const OptimAlgorithm& algo, const Piece& c, const Tensor* scale,
                    const Tensor* skip, const Tensor* staged);
  Status UpdateStreamed(DeviceContext& ctx, const OptimAlgorithm& algo, const Piece& c, int64_t i, const Tensor* scale,
                        const Tensor* skip, const Tensor* staged);

  int64_t numel_ = 0, chunk_ = 0, keep_ = 0;
  std::vector<Tensor> host_;
  std::vector<Tensor> kept_;  // per state tensor: elements [0, keep_) on ctx's device
  bool upload_ = true;        // the next Update copies the kept part in from host() first
  std::unique_ptr<Gpu> gpu_;  // null on the CPU
};

}  // namespace dtrain::runtime
