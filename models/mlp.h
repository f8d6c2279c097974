#pragma once
// Mlp: a multi-layer perceptron classifier, input_dim -> hidden... -> num_classes, ReLU or GELU
// between layers, softmax cross-entropy loss. Implements models::Model (see model.h for the step
// protocol, the flat parameter layout and the gradient-ready contract).
//
// Parameter order (forward): fc0.weight [h0, in], fc0.bias [h0], fc1.weight, fc1.bias, ...
// Weights use PyTorch nn.Linear's layout and default init bound 1/sqrt(fan_in) (uniform), drawn
// from a SplitMix64 stream on the host, so CPU and GPU replicas start identical.
// Supports f32 on CPU and CUDA, and f64 on the CPU (used by gradient checks).

#include <memory>
#include <vector>

#include "models/model.h"

namespace dtrain::models {

struct MlpOptions {
  int64_t input_dim = 784;
  std::vector<int64_t> hidden = {256, 128};
  int64_t num_classes = 10;
  bool gelu = false;          // ReLU when false
  DType dtype = DType::kF32;  // kF64 only on the CPU
};

class Mlp final : public Model {
 public:
  static Status Create(DeviceContext& ctx, const MlpOptions& opts, std::unique_ptr<Mlp>* out);

  const std::vector<ParamInfo>& param_infos() const override { return infos_; }
  Tensor& params() override { return params_; }
  Tensor& grads() override { return grads_; }
  Status InitParams(uint64_t seed) override;
  Status Forward(const Tensor& inputs, const Tensor& targets) override;
  const Tensor& losses() const override { return losses_; }
  const Tensor& logits() const override { return z_.back(); }
  Status Backward(float loss_scale, const GradReadyFn& on_ready) override;
  Status InputsFromBatch(const Tensor& batch_inputs, Tensor* x) const override;

 private:
  explicit Mlp(DeviceContext& ctx, const MlpOptions& opts) : ctx_(ctx), opts_(opts) {}
  int num_layers() const { return static_cast<int>(opts_.hidden.size()) + 1; }
  // (Re)allocates the activation buffers when the batch size changes (served from the cache).
  Status EnsureActivations(int64_t batch);

  DeviceContext& ctx_;
  MlpOptions opts_;
  std::vector<ParamInfo> infos_;
  Tensor params_, grads_;
  std::vector<Tensor> w_, b_, dw_, db_;  // views into params_/grads_
  int64_t batch_ = -1;
  std::vector<Tensor> a_;   // a_[l]: input of layer l ([B, fan_in]); a_[0] is the caller's inputs
  std::vector<Tensor> z_;   // z_[l]: pre-activation output of layer l; z_.back() = logits
  std::vector<Tensor> dz_;  // gradient w.r.t. z_[l]; dz_.back() = dlogits, set by Forward
  std::vector<Tensor> da_;  // gradient w.r.t. a_[l], l >= 1
  Tensor losses_;
};

}  // namespace dtrain::models
