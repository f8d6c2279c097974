#pragma once
// StepGraph: the training step as one CUDA graph (train.cuda_graphs; core/cuda_graph.h). The trainer runs the
// first steps eagerly (cuDNN and cuBLASLt pick their algorithms, lazily made buffers appear, the allocator's
// cache fills), then captures one whole step — zeroing the gradients, forward, loss, backward and the
// optimizer's device work for every micro-batch — and replays it for every later step. Per step the host only
// copies the step's micro-batches into fixed input buffers (Stage), stages the optimizer's per-step constants
// (ParameterUpdater::StageStep) and launches the graph.
//
// What cannot be graphed runs eagerly, the reason logged once (Blocker): CPU runs, the config switch off,
// updaters with host work per step (fp16 loss scaling, ZeRO-1, multi-process exchange). A capture that fails
// (an op doing host work or allocating outside the cache) runs that step eagerly and turns graphs off for the
// run, with the reason. Anything that may reallocate the model's activations (an evaluation with another batch
// shape) must be followed by Reset(): the graph is dropped and re-captured after kEagerSteps eager steps.
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
class CudaGraph;
}  // namespace dtrain

namespace dtrain::runtime {

class StepGraph {
 public:
  // Eager steps after the start and after each Reset() before a capture.
  static constexpr int64_t kEagerSteps = 2;

  // Why this run's steps cannot be graphed ("" when they can).
  static std::string Blocker(const proto::Config& cfg, const DeviceContext& ctx, const ParameterUpdater& updater);

  // `accum`: micro-batches per step (train.grad_accum_steps).
  StepGraph(DeviceContext& ctx, int64_t accum);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // True when the coming step should go through Stage/Run (enough eager steps since the start or Reset, and
  // graphs not turned off by a failed capture). Call once per step: it counts the eager ones.
  bool WantStep();
  // Queues the copy of micro-batch m's inputs and targets into the fixed buffers on the compute stream
  // (allocated at the first call with the batch's shapes). InvalidArgument when the shape differs from theirs.
  Status Stage(int64_t m, const Tensor& inputs, const Tensor& targets);
  const Tensor& inputs(int64_t m) const { return inputs_[m]; }
  const Tensor& targets(int64_t m) const { return targets_[m]; }

  // Replays the step graph, capturing `body` first when there is none. `body` queues one step's device work
  // reading inputs()/targets(). When the capture fails, body runs eagerly instead, graphs are off for the rest
  // of the run and *off_reason says why (empty otherwise). Errors of the eager body or of a launch are returned.
  Status Run(const std::function<Status()>& body, std::string* off_reason);
  // Drops the graph (its held memory back to the cache); a new one is captured after kEagerSteps eager steps.
  void Reset();
  bool captured() const;
  size_t num_nodes() const;

 private:
  DeviceContext& ctx_;
  std::vector<Tensor> inputs_, targets_;  // one pair per micro-batch, fixed addresses
#if DT_HAVE_CUDA
  std::unique_ptr<CudaGraph> graph_;
#endif
  int64_t eager_steps_ = 0;  // since the start or the last Reset
  bool off_ = false;         // a capture failed: eager for the rest of the run
};

}  // namespace dtrain::runtime
