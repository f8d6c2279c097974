// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), with decoupled weight decay as in
// lion-pytorch and optax.lion: the update of kernels/lion_update.h. Reads optim.beta1 (the interpolation whose sign
// is the step) and optim.beta2 (the momentum kept), both in [0, 1) — the paper's defaults are 0.9 and 0.99, while
// the config's beta2 default is AdamW's 0.999, so set optim.beta2: 0.99 — and optim.weight_decay
// (p *= 1 - lr * wd). optim.eps, momentum and nesterov are not used. State: "exp_avg" (lion-pytorch's name).
#include "core/check.h"
#include "kernels/lion_update.h"
#include "runtime/optim/optim_algorithm.h"

namespace dtrain::runtime {
namespace {

class Lion final : public OptimAlgorithm {
 public:
  explicit Lion(const OptimizerOptions& opts) : opts_(opts) {}

  void Prepare(double lr, int64_t /*t*/, StagedConstants* staged) override {
    h_.lr = lr;
    h_.beta1 = opts_.beta1;
    h_.beta2 = opts_.beta2;
    h_.weight_decay = opts_.weight_decay;
    if (staged != nullptr) staged->Set(ops::StagedArgsFor(h_));
  }

  Status Update(DeviceContext& ctx, Tensor* params, const Tensor& grads, const std::vector<Tensor*>& state,
                const Tensor* scale, const Tensor* skip, const Tensor* staged, int64_t /*offset*/) const override {
    return ops::LionUpdate(ctx, h_, params, grads, state.at(0), scale, skip, staged);
  }

 private:
  OptimizerOptions opts_;
  ops::LionHyper h_;
};

Status Create(const OptimizerOptions& opts, std::unique_ptr<OptimAlgorithm>* out) {
  DT_CHECK_ARG(opts.beta1 >= 0.0 && opts.beta1 < 1.0, "lion beta1 must be in [0, 1), got " << opts.beta1);
  DT_CHECK_ARG(opts.beta2 >= 0.0 && opts.beta2 < 1.0, "lion beta2 must be in [0, 1), got " << opts.beta2);
  *out = std::make_unique<Lion>(opts);
  return Status::OK();
}

}  // namespace

const OptimAlgorithmSpec& LionAlgorithm() {
  static const OptimAlgorithmSpec spec{"lion", {"exp_avg"}, &Create, /*bf16_storage=*/false};
  return spec;
}

}  // namespace dtrain::runtime
