#pragma once
// ShardedUpdater: the ParameterUpdater (runtime/optim/parameter_updater.h) of ZeRO-1 (dist.zero1 with
// world > 1) — Zero1Optimizer reduce-scatters the gradients in buckets overlapped with backward, updates this
// rank's shard of the parameters with its shard of the optimizer state, and all-gathers the parameters.
// With fp16 the loss scaler's found-inf check and unscale run on the reduce-scattered shard, the found-inf
// flag being the all-reduced sum of squares (every rank skips the same steps). Checkpoints: the shards are
// gathered bucket by bucket into the writing rank's snapshot (a collective; the full state never exists on a
// device), and any full state is re-sharded on load, whatever world size saved it; the manifest records the
// sharding.
//
// Ownership: owns the Zero1Optimizer and the loss scaler (nullable); borrows ctx and the model. Not thread-safe.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/optim/parameter_updater.h"
#include "runtime/optim/zero1.h"

namespace dtrain::runtime {

class ShardedUpdater : public ParameterUpdater {
 public:
  ShardedUpdater(DeviceContext& ctx, models::Model& model, std::unique_ptr<Zero1Optimizer> zero1, int world,
                 std::unique_ptr<LossScaler> scaler);

  Status OnGradReady(int param_index) override { return zero1_->OnGradReady(param_index); }
  Status Finalize() override { return zero1_->Finalize(); }
  Status StageStep(double lr) override {
    lr_ = lr;
    return Status::OK();
  }
  Status ApplyStep() override { return zero1_->Step(ctx_, lr_, scaler()); }
  std::string GraphBlocker() const override { return "ZeRO-1 (dist.zero1) keeps host-side bucket state per step"; }

  void set_trace(DeviceTrace* trace) override { zero1_->set_trace(trace); }
  bool exchanges() const override { return true; }
  Status TakeExposedCommMs(double* ms) override { return zero1_->TakeExposedCommMs(ms); }
  const Tensor* grad_norm() const override { return zero1_->grad_norm(); }
  size_t state_bytes() const override { return zero1_->state_bytes(); }
  std::string placement() const override {
    return "ZeRO-1: sharded over " + std::to_string(world_) + " ranks" +
           (zero1_->offloaded() ? ", " + zero1_->offloaded()->Placement() : "");
  }

  const OptimizerOptions& options() const override { return zero1_->options(); }
  int64_t step() const override { return zero1_->step(); }
  void StateSlices(std::vector<StateSlice>* out) override { zero1_->StateSlices(out); }
  Status MasterLow(Tensor** out) override {  // ZeRO-1 takes f32 params only
    *out = nullptr;
    return Status::OK();
  }

 protected:
  Status CopyStateTo(const std::vector<Tensor*>& dst) override { return zero1_->GatherStateInto(dst); }
  void DescribeSharding(proto::ShardingState* out) const override;
  Status LoadState(const std::map<std::string, Tensor>& full) override { return zero1_->LoadState(full); }
  void set_step(int64_t step) override { zero1_->set_step(step); }

 private:
  std::unique_ptr<Zero1Optimizer> zero1_;
  int world_ = 1;
  double lr_ = 0;  // staged by StageStep for ApplyStep
};

}  // namespace dtrain::runtime
