#include "runtime/optim/replicated_updater.h"

#include "core/check.h"
#include "runtime/optim/offloaded_state.h"

namespace dtrain::runtime {

ReplicatedUpdater::ReplicatedUpdater(DeviceContext& ctx, models::Model& model, std::unique_ptr<Optimizer> optimizer,
                                     std::unique_ptr<GradientReducer> reducer, std::unique_ptr<LossScaler> scaler)
    : ParameterUpdater(ctx, model.params().numel(), std::move(scaler)),
      model_(model),
      optimizer_(std::move(optimizer)),
      reducer_(std::move(reducer)) {}

Status ReplicatedUpdater::OnGradReady(int param_index) {
  return reducer_ ? reducer_->MarkReady(param_index) : Status::OK();
}

Status ReplicatedUpdater::Finalize() { return reducer_ ? reducer_->Finalize() : Status::OK(); }

Status ReplicatedUpdater::StageStep(double lr) { return optimizer_->Stage(ctx_, lr, scaler()); }

Status ReplicatedUpdater::ApplyStep() { return optimizer_->Apply(ctx_, model_.params(), model_.grads(), scaler()); }

std::string ReplicatedUpdater::GraphBlocker() const {
  if (optimizer_->offloaded()) return "optim.offload cpu streams the optimizer state over three streams (not captured)";
  if (scaler() != nullptr) return "fp16 dynamic loss scaling reads the loss scale on the host every step";
  if (reducer_ != nullptr) return "the gradient all-reduce across processes is not captured yet (one process only)";
  return "";
}

std::string ReplicatedUpdater::placement() const {
  return optimizer_->offloaded() ? "replicated, " + optimizer_->offloaded()->Placement() : "replicated";
}

void ReplicatedUpdater::set_trace(DeviceTrace* trace) {
  if (reducer_) reducer_->set_trace(trace);
}

Status ReplicatedUpdater::TakeExposedCommMs(double* ms) {
  DT_CHECK_ARG(ms != nullptr, "ms is null");
  *ms = 0;
  return reducer_ ? reducer_->TakeExposedCommMs(ms) : Status::OK();
}

size_t ReplicatedUpdater::state_bytes() const {
  size_t bytes = 0;  // (split masters' low halves included: OptimizerStateDTypes)
  for (DType d : OptimizerStateDTypes(*FindOptimAlgorithm(options().name), options()))
    bytes += static_cast<size_t>(optimizer_->num_params()) * DTypeSize(d);
  return bytes;
}

Status ReplicatedUpdater::CopyStateTo(const std::vector<Tensor*>& dst) {
  if (dst.empty()) return Status::OK();           // every rank holds the whole state: nothing to take part in
  DT_RETURN_IF_ERROR(optimizer_->SettleState());  // offloaded: the copies read host memory on the host
  const auto state = optimizer_->state();
  for (size_t i = 0; i < state.size(); ++i) DT_RETURN_IF_ERROR(dst[i]->CopyFrom(*state[i].second, ctx_.stream()));
  return Status::OK();
}

void ReplicatedUpdater::DescribeSharding(proto::ShardingState* out) const {
  out->set_zero1(false);
  out->set_world_size(1);
  out->set_num_buckets(0);
  out->set_shard_numel(0);
}

void ReplicatedUpdater::StateSlices(std::vector<StateSlice>* out) {
  out->clear();
  // (A restore writes them before the first update: nothing of an offloaded state is in flight.)
  for (const auto& [name, tensor] : optimizer_->state()) {
    out->push_back({name + ".bin", tensor->numel(), 0, tensor->numel(), tensor, 0});
  }
}

Status ReplicatedUpdater::MasterLow(Tensor** out) {
  DT_CHECK_ARG(out != nullptr, "out is null");
  *out = optimizer_->master_low();
  return *out != nullptr ? optimizer_->SettleState() : Status::OK();
}

Status ReplicatedUpdater::LoadState(const std::map<std::string, Tensor>& full) {
  DT_RETURN_IF_ERROR(optimizer_->SettleState());
  for (const auto& [name, tensor] : optimizer_->state()) {
    const auto it = full.find(name);
    if (it == full.end()) return Status::InvalidArgument("no '" + name + "' for optimizer " + options().name);
    DT_RETURN_IF_ERROR(tensor->CopyFrom(it->second, ctx_.stream()));
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
