#pragma once
// StepGraph: the training step as one CUDA graph (train.cuda_graphs; core/cuda_graph.h). The trainer runs the
// first steps eagerly (cuDNN and cuBLASLt pick their algorithms, lazily made buffers appear, the allocator's
// cache fills), then captures one whole step — zeroing the gradients, forward, loss, backward and the
// optimizer's device work for every micro-batch — and replays it for every later step. Per step the host only
// stages the optimizer's per-step constants (ParameterUpdater::StageStep) and launches the graph.
//
// Inputs: no staging copy. The graph reads the micro-batches where the loader put them. The loader rotates a fixed
// set of device buffers (data/loader.h: two), so there is one graph per set of input addresses the step has seen,
// each captured the first time its set comes up. They run one at a time on the compute stream, so they share the
// model's activations and one memory pool (core/cuda_graph.h): what the step allocates is held once, not per graph.
//
// What cannot be graphed runs eagerly, the reason logged once (Blocker): CPU runs, the config switch off,
// updaters with host work per step (fp16 loss scaling, ZeRO-1, multi-process exchange). A capture that fails
// (an op doing host work or allocating outside the cache) runs that step eagerly and turns graphs off for the
// run, with the reason; so do inputs from more than kMaxGraphs buffer sets. Anything that may reallocate the
// model's activations (an evaluation with another batch shape) must be followed by Reset(): the graphs are dropped
// and re-captured after kEagerSteps eager steps.
//
// Ownership: borrows the DeviceContext (outlives it). Not thread-safe: the trainer's thread only.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "proto/config.pb.h"
#include "runtime/optim/parameter_updater.h"

namespace dtrain {
class CudaGraphPool;
}  // namespace dtrain

namespace dtrain::runtime {

class StepGraph {
 public:
  // Eager steps after the start and after each Reset() before a capture.
  static constexpr int64_t kEagerSteps = 2;
  // Graphs kept at once: one per input buffer set. The trainer gives the loader 2 * accum device buffers (and
  // synthetic data as many buffers), so a step's micro-batches come from one of two sets.
  static constexpr size_t kMaxGraphs = 4;
  // Above this train.grad_accum_steps the step is not graphed (the loader would need too many device buffers).
  static constexpr int64_t kMaxAccum = 32;

  // One micro-batch of the step, on the device, at an address that the loader reuses.
  struct MicroBatch {
    Tensor inputs, targets;
  };
  // Queues one step's device work reading `batches` (during a capture: its graph's input buffers).
  using Body = std::function<Status(const std::vector<MicroBatch>& batches)>;

  // Why this run's steps cannot be graphed ("" when they can).
  static std::string Blocker(const proto::Config& cfg, const DeviceContext& ctx, const ParameterUpdater& updater);

  explicit StepGraph(DeviceContext& ctx);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // True when the coming step should go through Run (enough eager steps since the start or Reset, and
  // graphs not turned off). Call once per step: it counts the eager ones.
  bool WantStep();

  // Replays the graph of these micro-batches' buffers, capturing body(batches) first when there is none (*captured
  // then says so). When the capture fails, or the step brings more than kMaxGraphs buffer sets, body runs eagerly
  // instead, graphs are off for the rest of the run and *off_reason says why (empty otherwise). InvalidArgument when
  // a batch's shape or dtype differs from the first graph's (the graphs share the model's activations). Errors of
  // the eager body or of a launch are returned.
  Status Run(const std::vector<MicroBatch>& batches, const Body& body, bool* captured, std::string* off_reason);
  // Drops the graphs (their held memory back to the cache); new ones are captured after kEagerSteps eager steps.
  void Reset();
  size_t num_graphs() const;
  size_t num_nodes() const;   // of the most recently captured graph
  size_t held_bytes() const;  // by all the graphs together

 private:
  struct Captured;
  // The first graph's batch shapes; later batches must match them.
  Status CheckShapes(const std::vector<MicroBatch>& batches);

  [[maybe_unused]] DeviceContext& ctx_;  // (read by the CUDA path only)
  std::vector<Captured> graphs_;         // in capture order
  std::shared_ptr<CudaGraphPool> pool_;  // their memory (null until the first capture)
  std::vector<MicroBatch> shapes_;       // the first captured step's batches (shapes and dtypes are what count)
  int64_t eager_steps_ = 0;              // since the start or the last Reset
  bool off_ = false;                     // a capture failed: eager for the rest of the run
};

}  // namespace dtrain::runtime
