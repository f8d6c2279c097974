// AdamW, PyTorch's torch.optim.AdamW with amsgrad off (decoupled weight decay, bias corrections by update number):
// the update of kernels/optim_update.h (AdamWHyper). Reads optim.beta1 and optim.beta2 in [0, 1), optim.eps >= 0
// and optim.weight_decay. State: "exp_avg", "exp_avg_sq". bf16_storage: params and state f32 or bf16 (the mixed
// update of kernels/optim_update.h, its stochastic rounding seeded by OptimizerOptions::seed and the update number).
// split_masters: the low halves are the third state tensor (the mixed update's master_low).
#include "core/check.h"
#include "kernels/optim_update.h"
#include "runtime/optim/optim_algorithm.h"

namespace dtrain::runtime {
namespace {

class AdamW final : public OptimAlgorithm {
 public:
  explicit AdamW(const OptimizerOptions& opts) : opts_(opts) {}

  void Prepare(double lr, int64_t t, StagedConstants* staged) override {
    h_.lr = lr;
    h_.beta1 = opts_.beta1;
    h_.beta2 = opts_.beta2;
    h_.eps = opts_.eps;
    h_.weight_decay = opts_.weight_decay;
    h_.step = t;
    h_.sr_seed = opts_.seed;
    if (staged != nullptr) staged->Set(ops::StagedArgsFor(h_));
  }

  Status Update(DeviceContext& ctx, Tensor* params, const Tensor& grads, const std::vector<Tensor*>& state,
                const Tensor* scale, const Tensor* skip, const Tensor* staged, int64_t offset) const override {
    ops::AdamWHyper h = h_;
    h.sr_offset = offset;
    return ops::AdamWUpdate(ctx, h, params, grads, state.at(0), state.at(1), scale, skip, staged,
                            opts_.split_masters ? state.at(2) : nullptr);
  }

 private:
  OptimizerOptions opts_;
  ops::AdamWHyper h_;
};

Status Create(const OptimizerOptions& opts, std::unique_ptr<OptimAlgorithm>* out) {
  DT_CHECK_ARG(opts.beta1 >= 0.0 && opts.beta1 < 1.0, "adamw beta1 must be in [0, 1), got " << opts.beta1);
  DT_CHECK_ARG(opts.beta2 >= 0.0 && opts.beta2 < 1.0, "adamw beta2 must be in [0, 1), got " << opts.beta2);
  DT_CHECK_ARG(opts.eps >= 0.0, "adamw eps must be >= 0, got " << opts.eps);
  *out = std::make_unique<AdamW>(opts);
  return Status::OK();
}

}  // namespace

const OptimAlgorithmSpec& AdamWAlgorithm() {
  static const OptimAlgorithmSpec spec{"adamw",
                                       {"exp_avg", "exp_avg_sq"},
                                       &Create,
                                       /*bf16_storage=*/true,
                                       /*split_masters=*/true};
  return spec;
}

}  // namespace dtrain::runtime
