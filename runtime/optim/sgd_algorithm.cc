// SGD with momentum (optional Nesterov), PyTorch's torch.optim.SGD with dampening 0 and coupled weight decay:
// the update of kernels/optim_update.h (SgdHyper). Reads optim.momentum in [0, 1], optim.nesterov (needs
// momentum > 0) and optim.weight_decay. State: "momentum_buffer".
#include "core/check.h"
#include "kernels/optim_update.h"
#include "runtime/optim/optim_algorithm.h"

namespace dtrain::runtime {
namespace {

class Sgd final : public OptimAlgorithm {
 public:
  explicit Sgd(const OptimizerOptions& opts) : opts_(opts) {}

  void Prepare(double lr, int64_t /*t*/, StagedConstants* staged) override {
    h_.lr = lr;
    h_.momentum = opts_.momentum;
    h_.weight_decay = opts_.weight_decay;
    h_.nesterov = opts_.nesterov;
    if (staged != nullptr) staged->Set(ops::StagedArgsFor(h_));
  }

  Status Update(DeviceContext& ctx, Tensor* params, const Tensor& grads, const std::vector<Tensor*>& state,
                const Tensor* scale, const Tensor* skip, const Tensor* staged, int64_t /*offset*/) const override {
    return ops::SgdUpdate(ctx, h_, params, grads, state.at(0), scale, skip, staged);
  }

 private:
  OptimizerOptions opts_;
  ops::SgdHyper h_;
};

Status Create(const OptimizerOptions& opts, std::unique_ptr<OptimAlgorithm>* out) {
  DT_CHECK_ARG(opts.momentum >= 0.0 && opts.momentum <= 1.0, "sgd momentum must be in [0, 1], got " << opts.momentum);
  DT_CHECK_ARG(!opts.nesterov || opts.momentum > 0.0, "nesterov needs momentum > 0");
  *out = std::make_unique<Sgd>(opts);
  return Status::OK();
}

}  // namespace

const OptimAlgorithmSpec& SgdAlgorithm() {
  static const OptimAlgorithmSpec spec{"sgd", {"momentum_buffer"}, &Create, /*bf16_storage=*/false};
  return spec;
}

}  // namespace dtrain::runtime
