#include "runtime/optim/loss_scaler.h"

#include <cmath>

#include "core/check.h"
#include "core/nvtx.h"
#if DT_HAVE_CUDA
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {

namespace {

void ToHost(const float* s, LossScalerState* out) {
  out->scale = s[ops::kLossScaleScale];
  out->good_steps = static_cast<int64_t>(s[ops::kLossScaleGoodSteps]);
  out->skipped_steps = static_cast<int64_t>(s[ops::kLossScaleSkippedSteps]);
  out->last_found_inf = s[ops::kLossScaleFoundInf] != 0.0f;
}

}  // namespace

ops::LossScaleHyper LossScaler::DefaultHyper() {
  ops::LossScaleHyper h;
  h.growth_factor = kGrowthFactor;
  h.backoff_factor = kBackoffFactor;
  h.growth_interval = kGrowthInterval;
  return h;
}

LossScaler::~LossScaler() = default;

Status LossScaler::Create(DeviceContext& ctx, std::unique_ptr<LossScaler>* out, const ops::LossScaleHyper& hyper) {
  DT_CHECK_ARG(out != nullptr, "LossScaler::Create: out is null");
  DT_CHECK_ARG(hyper.growth_factor > 1.0 && hyper.backoff_factor > 0.0 && hyper.backoff_factor < 1.0 &&
                   hyper.growth_interval >= 1 && hyper.growth_interval < (int64_t{1} << 24),
               "LossScaler: need growth_factor > 1, 0 < backoff_factor < 1, 1 <= growth_interval < 2^24, got "
                   << hyper.growth_factor << ", " << hyper.backoff_factor << ", " << hyper.growth_interval);
  std::unique_ptr<LossScaler> s(new LossScaler());  // private constructor
  s->hyper_ = hyper;
  DT_RETURN_IF_ERROR(Tensor::Empty({ops::kLossScaleStateSize}, DType::kF32, ctx.allocator(), &s->state_));
  DT_RETURN_IF_ERROR(s->state_.View(ops::kLossScaleFoundInf, {1}, &s->found_inf_));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    DT_RETURN_IF_ERROR(Tensor::Empty({ops::kLossScaleStateSize}, DType::kF32, ctx.pinned_allocator(), &s->staging_));
    s->done_ = std::make_unique<CudaEvent>();
    DT_RETURN_IF_ERROR(CudaEvent::Create(s->done_.get()));
#else
    return Status::Unavailable("LossScaler: CUDA context in a build without CUDA");
#endif
  }
  proto::LossScalerState init;
  init.set_scale(kInitScale);
  DT_RETURN_IF_ERROR(s->Restore(ctx, init));
  *out = std::move(s);
  return Status::OK();
}

Status LossScaler::Sync() {
  if (!pending_) return Status::OK();
#if DT_HAVE_CUDA
  // Sync point: the state copy queued by the last Update (normally long done: see the header).
  DT_RETURN_IF_ERROR(done_->Synchronize());
#endif
  ToHost(staging_.data<float>(), &host_);
  pending_ = false;
  return Status::OK();
}

Status LossScaler::Scale(float* scale) {
  DT_CHECK_ARG(scale != nullptr, "LossScaler::Scale: scale is null");
  DT_RETURN_IF_ERROR(Sync());
  *scale = static_cast<float>(host_.scale);
  return Status::OK();
}

Status LossScaler::state(LossScalerState* out) {
  DT_CHECK_ARG(out != nullptr, "LossScaler::state: out is null");
  DT_RETURN_IF_ERROR(Sync());
  *out = host_;
  return Status::OK();
}

Status LossScaler::Update(DeviceContext& ctx, const Tensor& sum_squares, double max_norm, Tensor* norm, Tensor* coef) {
  DT_NVTX_RANGE("loss_scaler.update");
  DT_CHECK_ARG(ctx.type() == state_.device(), "LossScaler::Update on a " << DeviceName(ctx.type())
                                                                         << " context, but the scaler lives on "
                                                                         << DeviceName(state_.device()));
  // The previous copy must have landed before the staging buffer is overwritten (and its skip counted).
  DT_RETURN_IF_ERROR(Sync());
  DT_RETURN_IF_ERROR(ops::LossScaleStep(ctx, hyper_, max_norm, sum_squares, &state_, norm, coef));
  if (!ctx.is_cuda()) {
    ToHost(state_.data<float>(), &host_);
    return Status::OK();
  }
#if DT_HAVE_CUDA
  DT_RETURN_IF_ERROR(staging_.CopyFrom(state_, ctx.stream()));
  DT_RETURN_IF_ERROR(done_->Record(ctx.stream()));
  pending_ = true;
#endif
  return Status::OK();
}

Status LossScaler::Save(proto::LossScalerState* out) {
  DT_CHECK_ARG(out != nullptr, "LossScaler::Save: out is null");
  DT_RETURN_IF_ERROR(Sync());
  out->set_scale(host_.scale);
  out->set_good_steps(host_.good_steps);
  out->set_skipped_steps(host_.skipped_steps);
  return Status::OK();
}

Status LossScaler::Restore(DeviceContext& ctx, const proto::LossScalerState& in) {
  DT_CHECK_ARG(std::isfinite(in.scale()) && in.scale() > 0.0 && in.good_steps() >= 0 && in.skipped_steps() >= 0 &&
                   in.skipped_steps() < (int64_t{1} << 24),
               "LossScaler::Restore: bad state scale " << in.scale() << ", good_steps " << in.good_steps()
                                                       << ", skipped_steps " << in.skipped_steps());
  DT_RETURN_IF_ERROR(Sync());  // no copy in flight into staging_ / host_
  float host[ops::kLossScaleStateSize] = {};
  host[ops::kLossScaleScale] = static_cast<float>(in.scale());
  host[ops::kLossScaleGoodSteps] = static_cast<float>(in.good_steps());
  host[ops::kLossScaleSkippedSteps] = static_cast<float>(in.skipped_steps());
  DT_RETURN_IF_ERROR(
      state_.CopyFrom(Tensor::Wrap(host, {ops::kLossScaleStateSize}, DType::kF32, DeviceType::kCPU), ctx.stream()));
  // `host` is pageable stack memory: the copy is staged before CopyFrom returns, but wait anyway (restore is rare).
  DT_RETURN_IF_ERROR(ctx.Synchronize());
  ToHost(host, &host_);
  return Status::OK();
}

}  // namespace dtrain::runtime
