// A custom model trained by the full dtrain runtime (data loader, gradient all-reduce, checkpoints,
// `launch`), built against the INSTALLED dtrain package (README "Custom model in C++").
//
//   ./custom_trainer launch --nproc-per-node 2 fashion_mnist_two_layer.yaml --set train.device=cpu
//
// TwoLayerMlp: logits = relu(x W1^T + b1) W2^T + b2 with softmax cross-entropy, written with
// dtrain's ops (kernels/*.h), so the same code runs on the CPU and, in a CUDA build of dtrain, on
// the GPU. It follows the models::Model contract (models/model.h): one flat f32 parameter buffer and
// one flat gradient buffer in forward order, gradients ACCUMULATED in Backward, and each parameter
// announced to `on_ready` as soon as its gradient is final (that is what lets the runtime all-reduce
// gradients while backward is still running).
//
// The config names it `model.kind: two_layer_mlp`; its shapes come from the config's model.mlp
// section (input_dim, hidden: [H], num_classes): a factory receives the whole config.

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/random.h"
#include "kernels/bias.h"
#include "kernels/matmul.h"
#include "kernels/reduce.h"
#include "kernels/relu.h"
#include "kernels/softmax_xent.h"
#include "launcher/cli/cli.h"
#include "models/model.h"
#include "runtime/train/model_factory.h"

namespace {

using dtrain::DeviceContext;
using dtrain::DType;
using dtrain::Status;
using dtrain::Tensor;
namespace ops = dtrain::ops;

class TwoLayerMlp final : public dtrain::models::Model {
 public:
  // The factory registered for `model.kind: two_layer_mlp`.
  static Status Build(const dtrain::proto::Config& cfg, DeviceContext& ctx,
                      std::unique_ptr<dtrain::models::Model>* out) {
    const auto& m = cfg.model().mlp();
    if (m.hidden_size() != 1) {
      return Status::InvalidArgument("two_layer_mlp has one hidden layer: set model.mlp.hidden to [H]");
    }
    std::unique_ptr<TwoLayerMlp> model(new TwoLayerMlp(ctx));
    DT_RETURN_IF_ERROR(model->Allocate(m.input_dim(), m.hidden(0), m.num_classes()));
    *out = std::move(model);
    return Status::OK();
  }

  const std::vector<dtrain::models::ParamInfo>& param_infos() const override { return infos_; }
  Tensor& params() override { return params_; }
  Tensor& grads() override { return grads_; }
  const Tensor& losses() const override { return losses_; }
  const Tensor& logits() const override { return z2_; }

  // Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) from the seed, on the host: every rank starts equal.
  Status InitParams(uint64_t seed) override {
    std::vector<float> host(params_.numel());
    dtrain::SplitMix64 rng(seed);
    for (size_t k = 0; k < infos_.size(); ++k) {
      const auto& p = infos_[k];
      const int64_t fan_in = infos_[k - k % 2].shape[1];  // a bias takes its layer's weight fan-in
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      for (int64_t i = 0; i < p.numel; ++i) host[p.offset + i] = static_cast<float>((2 * rng.Uniform() - 1) * bound);
    }
    Tensor staging = Tensor::Wrap(host.data(), {params_.numel()}, DType::kF32, dtrain::DeviceType::kCPU);
    DT_RETURN_IF_ERROR(params_.CopyFrom(staging, ctx_.stream()));
    return ctx_.Synchronize();  // `host` goes out of scope
  }

  Status Forward(const Tensor& inputs, const Tensor& targets) override {
    const int64_t batch = inputs.dim(0);
    DT_CHECK_ARG(batch > 0 && inputs.numel() == batch * in_,
                 "two_layer_mlp expects " << in_ << " values per sample, got " << inputs.ToString());
    DT_RETURN_IF_ERROR(inputs.Reshape({batch, in_}, &x_));  // e.g. Fashion-MNIST's [B, 28, 28]
    DT_RETURN_IF_ERROR(EnsureActivations(batch));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, x_, false, w1_, true, &z1_));  // z1 = x W1^T + b1
    DT_RETURN_IF_ERROR(ops::BiasAdd(ctx_, b1_, &z1_));
    DT_RETURN_IF_ERROR(ops::ReluForward(ctx_, z1_, &h_));               // h = relu(z1)
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, h_, false, w2_, true, &z2_));  // z2 = h W2^T + b2
    DT_RETURN_IF_ERROR(ops::BiasAdd(ctx_, b2_, &z2_));
    // Per-example losses and d(mean loss)/d(z2) in one pass.
    return ops::SoftmaxCrossEntropy(ctx_, z2_, targets, &losses_, &dz2_, 1.0f / static_cast<float>(batch));
  }

  // Parameter order is fc1.weight, fc1.bias, fc2.weight, fc2.bias; backward finishes them in reverse.
  Status Backward(float loss_scale, const dtrain::models::GradReadyFn& on_ready) override {
    DT_CHECK_ARG(x_.defined(), "Backward called before Forward");
    if (loss_scale != 1.0f) DT_RETURN_IF_ERROR(ops::Scale(ctx_, &dz2_, loss_scale));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dz2_, true, h_, false, &dw2_, 1.0f, 1.0f));  // dW2 += dz2^T h
    DT_RETURN_IF_ERROR(ops::BiasGrad(ctx_, dz2_, &db2_, /*accumulate=*/true));        // db2 += colsum(dz2)
    DT_RETURN_IF_ERROR(Announce(on_ready, {3, 2}));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dz2_, false, w2_, false, &dh_));             // dh = dz2 W2
    DT_RETURN_IF_ERROR(ops::ReluBackward(ctx_, h_, dh_, &dz1_));                      // dz1 = dh * (h > 0)
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dz1_, true, x_, false, &dw1_, 1.0f, 1.0f));  // dW1 += dz1^T x
    DT_RETURN_IF_ERROR(ops::BiasGrad(ctx_, dz1_, &db1_, /*accumulate=*/true));
    return Announce(on_ready, {1, 0});
  }

 private:
  explicit TwoLayerMlp(DeviceContext& ctx) : ctx_(ctx) {}

  Status Allocate(int64_t in, int64_t hidden, int64_t classes) {
    in_ = in;
    hidden_ = hidden;
    infos_ = {{"fc1.weight", {hidden, in}, 0, hidden * in},
              {"fc1.bias", {hidden}, hidden * in, hidden},
              {"fc2.weight", {classes, hidden}, hidden * in + hidden, classes * hidden},
              {"fc2.bias", {classes}, hidden * in + hidden + classes * hidden, classes}};
    const int64_t total = infos_.back().offset + classes;
    DT_RETURN_IF_ERROR(Tensor::Empty({total}, DType::kF32, ctx_.allocator(), &params_));
    DT_RETURN_IF_ERROR(Tensor::Empty({total}, DType::kF32, ctx_.allocator(), &grads_));
    DT_RETURN_IF_ERROR(grads_.SetZero(ctx_.stream()));
    Tensor* views[] = {&w1_, &b1_, &w2_, &b2_};
    Tensor* grad_views[] = {&dw1_, &db1_, &dw2_, &db2_};
    for (size_t i = 0; i < infos_.size(); ++i) {
      DT_RETURN_IF_ERROR(params_.View(infos_[i].offset, infos_[i].shape, views[i]));
      DT_RETURN_IF_ERROR(grads_.View(infos_[i].offset, infos_[i].shape, grad_views[i]));
    }
    return Status::OK();
  }

  // Activations for `batch` rows, reallocated only when the batch size changes (e.g. evaluation).
  Status EnsureActivations(int64_t batch) {
    if (batch == batch_) return Status::OK();
    const int64_t classes = w2_.dim(0);
    for (Tensor* t : {&z1_, &h_, &dh_, &dz1_})
      DT_RETURN_IF_ERROR(Tensor::Empty({batch, hidden_}, DType::kF32, ctx_.allocator(), t));
    for (Tensor* t : {&z2_, &dz2_})
      DT_RETURN_IF_ERROR(Tensor::Empty({batch, classes}, DType::kF32, ctx_.allocator(), t));
    DT_RETURN_IF_ERROR(Tensor::Empty({batch}, DType::kF32, ctx_.allocator(), &losses_));
    batch_ = batch;
    return Status::OK();
  }

  static Status Announce(const dtrain::models::GradReadyFn& on_ready, std::initializer_list<int> params) {
    if (!on_ready) return Status::OK();
    for (int i : params) DT_RETURN_IF_ERROR(on_ready(i));
    return Status::OK();
  }

  DeviceContext& ctx_;
  int64_t in_ = 0, hidden_ = 0, batch_ = -1;
  std::vector<dtrain::models::ParamInfo> infos_;
  Tensor params_, grads_;
  Tensor w1_, b1_, w2_, b2_, dw1_, db1_, dw2_, db2_;  // views into params_ / grads_
  Tensor x_, z1_, h_, z2_, dz2_, dh_, dz1_, losses_;
};

}  // namespace

int main(int argc, char** argv) {
  // Register before anything else: `launch` re-executes this binary as `train` workers, and each
  // worker builds its model from the registry.
  const Status st = dtrain::runtime::RegisterModel("two_layer_mlp", &TwoLayerMlp::Build);
  if (!st.ok()) {
    std::fprintf(stderr, "custom_trainer: %s\n", st.ToString().c_str());
    return 1;
  }
  return dtrain::launcher::Main(argc, argv);
}
