#include "runtime/train/step_body.h"

#include "core/check.h"

namespace dtrain::runtime {

Status RunStepBody(const StepParts& p, int64_t accum, StepHooks& hooks) {
  DT_RETURN_IF_ERROR(p.model.grads().SetZero(p.ctx.stream()));
  float loss_scale = 1.0f;
  for (int64_t m = 0; m < accum; ++m) {
    const Tensor* inputs = nullptr;
    const Tensor* targets = nullptr;
    DT_RETURN_IF_ERROR(hooks.TakeBatch(m, &inputs, &targets));
    DT_RETURN_IF_ERROR(hooks.BeforeForward(m));
    Tensor x;
    DT_RETURN_IF_ERROR(p.model.InputsFromBatch(*inputs, &x));
    // The Backward's scale below, for a model that runs part of its backward in Forward (fp16's scale of m == 0 is
    // not known yet: such a model refuses fp16; 1 otherwise, as below).
    p.model.set_backward_scale(loss_scale / static_cast<float>(accum));
    DT_RETURN_IF_ERROR(p.model.Forward(x, *targets));
    // The loss scale of this step (fp16: waits for the previous step's device-side update, which this
    // forward overlaps; 1 otherwise, and always 1 in a captured step: StepGraph::Blocker).
    if (m == 0) DT_RETURN_IF_ERROR(p.updater.LossScale(&loss_scale));
    // loss_acc += mean(losses) / accum, on the device: no sync.
    DT_RETURN_IF_ERROR(p.model.AddMeanLoss(p.ctx, 1.0f / static_cast<float>(accum), &p.loss_acc));
    // Gradients are exchanged only on the last micro-batch; earlier ones just accumulate locally.
    models::GradReadyFn on_ready;
    if (m + 1 == accum) on_ready = [&p](int i) { return p.updater.OnGradReady(i); };
    DT_RETURN_IF_ERROR(p.model.Backward(loss_scale / static_cast<float>(accum), on_ready));
    DT_RETURN_IF_ERROR(hooks.AfterBackward(m));
  }
  DT_RETURN_IF_ERROR(hooks.BeforeFinalize());
  DT_RETURN_IF_ERROR(p.updater.Finalize());
  DT_RETURN_IF_ERROR(hooks.AfterFinalize());
  return hooks.Update();
}

}  // namespace dtrain::runtime
