#pragma once
// ReplicatedUpdater: the ParameterUpdater (runtime/optim/parameter_updater.h) of plain data parallelism —
// GradientReducer averages the gradients with bucketed all-reduces overlapped with backward (no reducer for
// one process), then Optimizer updates the full parameter buffer with the full optimizer state, the same on
// every rank. Checkpoints: the state is already full; no sharding is recorded.
//
// Ownership: owns the optimizer, the reducer (nullable) and the loss scaler (nullable); borrows ctx and the
// model. Not thread-safe.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/optim/gradient_reducer.h"
#include "runtime/optim/parameter_updater.h"

namespace dtrain::runtime {

class ReplicatedUpdater : public ParameterUpdater {
 public:
  // The optimizer must be sized for model.params(); `reducer` (nullable) reduces model.grads().
  ReplicatedUpdater(DeviceContext& ctx, models::Model& model, std::unique_ptr<Optimizer> optimizer,
                    std::unique_ptr<GradientReducer> reducer, std::unique_ptr<LossScaler> scaler);

  Status OnGradReady(int param_index) override;
  Status Finalize() override;
  Status StageStep(double lr) override;
  Status ApplyStep() override;
  std::string GraphBlocker() const override;

  void set_trace(DeviceTrace* trace) override;
  bool exchanges() const override { return reducer_ != nullptr; }
  Status TakeExposedCommMs(double* ms) override;
  const Tensor* grad_norm() const override { return optimizer_->grad_norm(); }
  size_t state_bytes() const override;
  std::string placement() const override;

  const OptimizerOptions& options() const override { return optimizer_->options(); }
  int64_t step() const override { return optimizer_->step(); }
  void StateSlices(std::vector<StateSlice>* out) override;
  Status MasterLow(Tensor** out) override;

 protected:
  Status CopyStateTo(const std::vector<Tensor*>& dst) override;
  void DescribeSharding(proto::ShardingState* out) const override;
  Status LoadState(const std::map<std::string, Tensor>& full) override;
  void set_step(int64_t step) override { optimizer_->set_step(step); }

 private:
  models::Model& model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<GradientReducer> reducer_;  // null without exchange
};

}  // namespace dtrain::runtime
