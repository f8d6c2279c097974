#pragma once
// Cnn: a small ResNet-style image classifier. Implements models::Model (see model.h for the step protocol,
// the flat parameter layout and the gradient-ready contract).
//
//   stem:   conv3x3(in_channels -> channels[0]) -> BN -> ReLU
//   stages: for each s, blocks_per_stage residual blocks of width channels[s]:
//             out = ReLU(BN2(conv3x3(ReLU(BN1(conv3x3_stride(x))))) + skip(x))
//           the first block of every stage after the first has stride 2 (halves H and W, rounding up); a block
//           whose stride or width changes has skip = BN(conv1x1_stride(x)) (projection), otherwise skip = x
//   head:   global average pool -> linear(channels.back() -> num_classes, with bias) -> softmax cross-entropy
// Convolutions have no bias (batch norm's beta is the bias); padding 1 for 3x3, 0 for 1x1.
//
// Parameters (forward layout; backward finalizes them in exactly the reverse order):
//   stem.conv.weight, stem.bn.weight, stem.bn.bias,
//   s<S>.b<B>.{proj.conv.weight, proj.bn.weight, proj.bn.bias,}  (projection blocks only)
//   s<S>.b<B>.conv1.weight, .bn1.weight, .bn1.bias, .conv2.weight, .bn2.weight, .bn2.bias, ...,
//   fc.weight [num_classes, C], fc.bias
// Init from SplitMix64 on the host (same values on CPU and GPU): conv weights Kaiming normal, fan_out mode
// (std = sqrt(2 / (cout*k*k)), as torchvision's ResNet), BN gamma 1 and beta 0, fc weight and bias uniform in
// +-1/sqrt(C) (PyTorch nn.Linear).
//
// Batch norm: training mode (the default) normalizes with batch statistics and updates the running mean/var
// (momentum 0.1); set_training(false) switches to the running statistics (evaluation: no Backward then). The
// running statistics are buffers(), not parameters: "<bn name>.running_mean" / ".running_var", all views into one
// flat tensor of the model's dtype and device; checkpoint them with the parameters. In data-parallel training
// every rank keeps its own (from its local batches); like PyTorch DDP, rank 0's are the ones to save or broadcast.
//
// Inputs f32 [B, in_channels*image_size^2] or [B, in_channels, image_size, image_size]; targets i32 [B].
// Supports f32 on CPU and CUDA (cuDNN convolutions, see kernels/conv2d.h) and f64 on the CPU (gradient
// checks). Activations are (re)allocated when the batch size changes (served from the caching allocator).
//
// Precision::kBf16 (CUDA only; cnn_bf16.cc): activations are bf16 and channels-last ([B, H, W, C]), convolutions
// run on tensor cores through cuDNN's graph API (bf16 in, fp32 accumulation), batch norm is fused with the ReLU
// and the residual add that follow it (kernels/batchnorm_nhwc.h). Parameters, gradients, BN statistics, the
// pooled features, the head and the loss stay f32: each step casts the conv weights to bf16 [K, R, S, C] working
// copies, and each bf16 weight gradient is added to the f32 gradient ([K, C, R, S], the same flat layout as fp32).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
#include "kernels/batchnorm.h"
#include "kernels/conv2d.h"

namespace dtrain::models {

struct CnnOptions {
  int64_t in_channels = 1;
  int64_t image_size = 28;  // square images
  std::vector<int64_t> channels = {32, 64, 128};
  int64_t blocks_per_stage = 1;
  int64_t num_classes = 10;
  DType dtype = DType::kF32;               // kF64 only on the CPU
  Precision precision = Precision::kFp32;  // kBf16: CUDA and dtype f32 only (see above)
};

class Cnn final : public Model {
 public:
  static Status Create(DeviceContext& ctx, const CnnOptions& opts, std::unique_ptr<Cnn>* out);

  const std::vector<ParamInfo>& param_infos() const override { return infos_; }
  Tensor& params() override { return params_; }
  Tensor& grads() override { return grads_; }
  Status InitParams(uint64_t seed) override;  // also resets the running statistics (mean 0, var 1)
  Status Forward(const Tensor& inputs, const Tensor& targets) override;
  const Tensor& losses() const override { return losses_; }
  const Tensor& logits() const override { return logits_; }
  Status Backward(float loss_scale, const GradReadyFn& on_ready) override;
  Status InputsFromBatch(const Tensor& batch_inputs, Tensor* x) const override;
  void set_training(bool training) override { training_ = training; }
  std::vector<std::pair<std::string, Tensor*>> buffers() override;

  bool training() const { return training_; }
  const ops::Conv2dCache& conv_cache() const { return *conv_cache_; }

 private:
  struct Conv {  // weight [cout, cin, k, k], no bias
    int64_t cin = 0, cout = 0, kernel = 0, stride = 1, pad = 0;
    int index = -1;  // parameter index of the weight
    Tensor w, dw;
    Tensor wb, dwb;  // bf16 only: [cout, k, k, cin] working copy of w, and the bf16 gradient before it joins dw
  };
  struct Bn {
    int index = -1;  // parameter index of gamma; beta is index + 1
    std::string name;
    ops::BatchNormTensors t;
    Tensor dgamma, dbeta;
  };
  struct ConvBn {  // conv -> BN; `c` is the conv output that BN normalizes, `dc` its gradient
    Conv conv;
    Bn bn;
    Tensor c, dc;
  };
  struct Block {
    ConvBn u1, u2, proj;
    bool has_proj = false;
    int64_t out_size = 0;         // output H = W
    Tensor b1, r1, db1, dr1;      // BN1 output, ReLU output, and their gradients (bf16: r1 and dr1 only)
    Tensor sum, out, dsum, dout;  // skip + BN2 output, ReLU of it, and their gradients (bf16: sum = projection BN)
  };

  Cnn(DeviceContext& ctx, const CnnOptions& opts) : ctx_(ctx), opts_(opts) {}
  // Appends the parameters of a conv+BN unit to infos_ and fills its geometry.
  void AddConvBn(const std::string& conv_name, const std::string& bn_name, int64_t cin, int64_t cout, int64_t kernel,
                 int64_t stride, ConvBn* u);
  // Every conv+BN unit in parameter order (stem, then per block: projection, conv1, conv2).
  std::vector<ConvBn*> Units();
  Status BindViews();
  Status EnsureActivations(int64_t batch);
  Status AllocUnit(int64_t batch, int64_t size, ConvBn* u);
  Status ConvForward(Conv& conv, const Tensor& x, Tensor* y);
  Status BnForward(Bn& bn, const Tensor& x, Tensor* y, bool accumulate);
  // BN backward (accumulating dgamma/dbeta), then conv backward filter; announces the unit's three params.
  Status ConvBnBackward(ConvBn& u, const Tensor& x, const Tensor& dy, const GradReadyFn& on_ready);
  Status BlockForward(Block& blk, const Tensor& x);
  Status BlockBackward(Block& blk, const Tensor& x, Tensor* dx, const GradReadyFn& on_ready);
  // The bf16 channels-last step (cnn_bf16.cc): the same layers and parameter order as the fp32 one above.
  bool bf16() const { return opts_.precision == Precision::kBf16; }
  Status EnsureActivationsBf16(int64_t batch);
  Status ForwardBf16(int64_t batch);                 // from x_ (f32 NCHW) to losses_ and dlogits_
  Status BackwardBf16(const GradReadyFn& on_ready);  // from dpooled_ to every parameter's gradient
  Status UnitForwardBf16(ConvBn& u, const Tensor& x, const Tensor* residual, bool relu, Tensor* y);
  // BN backward (from the unit's output gradient `dout`, masked by ReLU where `out` is given; `dg` receives the
  // masked gradient), then conv backward filter into the f32 gradient; announces the unit's three params.
  Status UnitBackwardBf16(ConvBn& u, const Tensor& x, const Tensor& dout, const Tensor* out, Tensor* dg,
                          const GradReadyFn& on_ready);

  DeviceContext& ctx_;
  CnnOptions opts_;
  std::unique_ptr<ops::Conv2dCache> conv_cache_;
  std::vector<ParamInfo> infos_;
  Tensor params_, grads_, running_;  // running_: every BN's running mean and var, in BN order
  ConvBn stem_;
  std::vector<Block> blocks_;
  int fc_w_index_ = -1;  // fc.bias is fc_w_index_ + 1
  Tensor fc_w_, fc_b_, dfc_w_, dfc_b_;
  bool training_ = true;
  bool backward_ready_ = false;  // the last Forward ran in training mode
  int64_t batch_ = -1;
  Tensor x_;                                        // the caller's inputs, viewed as [B, C, H, W]
  Tensor xb_;                                       // bf16 only: x_ as bf16 [B, H, W, C]
  Tensor stem_b_, stem_out_, stem_db_, stem_dout_;  // stem BN output, ReLU output, gradients
  Tensor pooled_, dpooled_, logits_, dlogits_, losses_;
};

}  // namespace dtrain::models
