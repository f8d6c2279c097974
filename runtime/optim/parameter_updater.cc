#include "runtime/optim/parameter_updater.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "core/logging.h"
#include "kernels/bf16_round.h"
#include "models/model_spec.h"
#include "runtime/optim/optim_algorithm.h"
#include "runtime/optim/replicated_updater.h"
#include "runtime/optim/sharded_updater.h"

namespace dtrain::runtime {

ParameterUpdater::ParameterUpdater(DeviceContext& ctx, int64_t numel, std::unique_ptr<LossScaler> scaler)
    : ctx_(ctx), numel_(numel), scaler_(std::move(scaler)) {}

ParameterUpdater::~ParameterUpdater() = default;

Status ParameterUpdater::LossScale(float* scale) {
  DT_CHECK_ARG(scale != nullptr, "scale is null");
  *scale = 1.0f;
  return scaler_ ? scaler_->Scale(scale) : Status::OK();
}

Status ParameterUpdater::Step(double lr) {
  DT_RETURN_IF_ERROR(StageStep(lr));
  return ApplyStep();
}

std::vector<std::string> ParameterUpdater::state_names() const {
  // The name was found when the optimizer was made.
  const OptimAlgorithmSpec* spec = FindOptimAlgorithm(options().name);
  return spec != nullptr ? spec->state_names : std::vector<std::string>{};
}

Status ParameterUpdater::SaveState(const std::vector<Tensor*>& dst, proto::CheckpointManifest* m) {
  DT_CHECK_ARG(m != nullptr, "manifest is null");
  DT_CHECK_ARG(dst.empty() || dst.size() == state_names().size(),
               "SaveState: " << dst.size() << " destinations for " << state_names().size() << " state tensors");
  DT_RETURN_IF_ERROR(CopyStateTo(dst));
  m->set_optimizer(options().name);
  m->set_optimizer_step(step());
  m->set_state_dtype(DTypeName(options().state_dtype));
  DescribeSharding(m->mutable_sharding());
  if (scaler_) DT_RETURN_IF_ERROR(scaler_->Save(m->mutable_loss_scaler()));
  return Status::OK();
}

Status ParameterUpdater::RestoreState(const proto::CheckpointManifest& m, const std::map<std::string, Tensor>& files,
                                      const std::string& where, const std::set<std::string>& in_place) {
  if (m.optimizer() != options().name) {
    return Status::InvalidArgument(where + " was saved with optimizer '" + m.optimizer() + "', the config says '" +
                                   options().name + "'");
  }
  // The files hold the full state (whichever strategy saved it), as f32 (runtime/checkpoint/dtype_convert.h); the
  // strategy keeps what this rank needs. bf16 state (optim.state_dtype) not restored in place (RestoreSink narrows
  // what it streams in) is narrowed here, on the host: round to nearest even, exact for values that were bf16.
  const DType state_dtype = options().state_dtype;
  std::map<std::string, Tensor> full;
  for (const std::string& name : state_names()) {
    const std::string file = name + ".bin";
    if (in_place.count(file) != 0) continue;
    const auto it = files.find(file);
    if (it == files.end()) return Status::DataLoss(where + ": no " + file + " in the checkpoint");
    if (it->second.numel() != numel_ || it->second.dtype() != DType::kF32) {  // files are f32 (dtype_convert.h)
      return Status::InvalidArgument(where + "/" + file + " holds " + std::to_string(it->second.numel()) +
                                     " values but this model has " + std::to_string(numel_) +
                                     ": the checkpoint belongs to another model (its config is in the manifest)");
    }
    if (state_dtype == DType::kF32) {
      full[name] = it->second;
      continue;
    }
    Tensor narrow;
    DT_RETURN_IF_ERROR(Tensor::Empty({numel_}, state_dtype, ctx_.host_allocator(), &narrow));
    const float* src = it->second.data<float>();
    uint16_t* dst = narrow.data<uint16_t>();
    for (int64_t i = 0; i < numel_; ++i) dst[i] = RoundBf16Rne(src[i]);
    full[name] = narrow;
  }
  if (!full.empty()) DT_RETURN_IF_ERROR(LoadState(full).WithContext(where));
  // Sync point: the narrowed host buffers go with `full` (restores only).
  if (!full.empty() && state_dtype != DType::kF32) DT_RETURN_IF_ERROR(ctx_.Synchronize());
  set_step(m.optimizer_step());
  if (scaler_ && m.has_loss_scaler()) DT_RETURN_IF_ERROR(scaler_->Restore(ctx_, m.loss_scaler()));
  return Status::OK();
}

Status ParameterUpdater::ResetState() {
  std::vector<StateSlice> slices;
  StateSlices(&slices);
  std::set<Tensor*> zeroed;
  for (const StateSlice& s : slices) {
    if (zeroed.insert(s.dst).second) DT_RETURN_IF_ERROR(s.dst->SetZero(ctx_.stream()));
  }
  Tensor* low = nullptr;
  DT_RETURN_IF_ERROR(MasterLow(&low));
  if (low != nullptr) DT_RETURN_IF_ERROR(low->SetZero(ctx_.stream()));  // the masters are the bf16 params again
  set_step(0);
  return Status::OK();
}

OptimizerOptions OptimizerOptionsFromConfig(const proto::OptimConfig& o) {
  OptimizerOptions oo;
  oo.name = o.name();
  oo.lr = o.lr();
  oo.momentum = o.momentum();
  oo.nesterov = o.nesterov();
  oo.beta1 = o.beta1();
  oo.beta2 = o.beta2();
  oo.eps = o.eps();
  oo.weight_decay = o.weight_decay();
  oo.grad_clip = o.grad_clip();
  oo.state_dtype = o.state_dtype() == "bf16" ? DType::kBF16 : DType::kF32;  // (choices) fp32|bf16
  // (choices) none|cpu|auto: FitMemory resolves auto to none or cpu with a kept part; unresolved, all of it offloaded
  oo.offload = o.offload() == "cpu" || o.offload() == "auto";
  oo.offload_keep_bytes = o.offload() == "cpu" ? static_cast<int64_t>(std::ldexp(o.offload_keep_gib(), 30)) : 0;
  return oo;
}

Status CheckZeroOneStorage(const proto::TrainConfig& train, int world_size, bool zero1) {
  if (world_size <= 1 || !zero1) return Status::OK();
  const std::string on = " does not run with dist.zero1 on " + std::to_string(world_size) + " ranks (ZeRO-1 ";
  if (train.gradients() == "bf16") {
    return Status::InvalidArgument("train.gradients bf16" + on +
                                   "reduce-scatters fp32 gradients): set dist.zero1 false (the all-reduce takes bf16 "
                                   "gradients) or train.gradients fp32");
  }
  if (models::Bf16Params(train)) {
    return Status::InvalidArgument("train.master_weights " + train.master_weights() + on +
                                   "all-gathers fp32 params): set dist.zero1 false (16-bit masters run replicated) or "
                                   "train.master_weights fp32");
  }
  return Status::OK();
}

Status MakeParameterUpdater(const proto::Config& cfg, DeviceContext& ctx, models::Model& model,
                            comm::Communicator* grad_comm, int rank, int world,
                            std::unique_ptr<ParameterUpdater>* out) {
  DT_CHECK_ARG(out != nullptr, "out is null");
  OptimizerOptions oo = OptimizerOptionsFromConfig(cfg.optim());
  oo.param_dtype = model.params().dtype();  // the model keeps its masters as train.master_weights says
  oo.split_masters = cfg.train().master_weights() == "split";
  oo.grad_dtype = model.grads().dtype();  // and its gradients as train.gradients says
  oo.seed = cfg.train().seed();
  std::unique_ptr<LossScaler> scaler;
  if (cfg.train().precision() == "fp16") DT_RETURN_IF_ERROR(LossScaler::Create(ctx, &scaler));
  const bool exchange = grad_comm != nullptr && world > 1;
  DT_RETURN_IF_ERROR(CheckZeroOneStorage(cfg.train(), exchange ? world : 1, cfg.dist().zero1()));
  if (exchange && cfg.dist().zero1()) {
    if (cfg.dist().bf16_compress() && rank == 0) {
      DT_LOG_WARN(kRuntime, "dist.bf16_compress is ignored with dist.zero1 (reduce-scatter runs in fp32)");
    }
    std::unique_ptr<Zero1Optimizer> zero1;
    DT_RETURN_IF_ERROR(Zero1Optimizer::Create(ctx, oo, model, grad_comm, rank, world, cfg.dist().bucket_mb(), &zero1));
    *out = std::make_unique<ShardedUpdater>(ctx, model, std::move(zero1), world, std::move(scaler));
    return Status::OK();
  }
  std::unique_ptr<Optimizer> optimizer;
  DT_RETURN_IF_ERROR(Optimizer::Create(ctx, oo, model.params().numel(), &optimizer));
  std::unique_ptr<GradientReducer> reducer;
  if (exchange) {
    GradientReducer::Options ro;
    ro.bucket_bytes = static_cast<size_t>(cfg.dist().bucket_mb() * (1 << 20));
    ro.bf16_compress = cfg.dist().bf16_compress();
    DT_RETURN_IF_ERROR(GradientReducer::Create(ctx, grad_comm, model.param_infos(), &model.grads(), ro, &reducer));
  }
  *out = std::make_unique<ReplicatedUpdater>(ctx, model, std::move(optimizer), std::move(reducer), std::move(scaler));
  return Status::OK();
}

}  // namespace dtrain::runtime
