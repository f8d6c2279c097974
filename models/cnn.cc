#include "models/cnn.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/nvtx.h"
#include "core/random.h"
#include "kernels/bias.h"
#include "kernels/matmul.h"
#include "kernels/pool.h"
#include "kernels/reduce.h"
#include "kernels/relu.h"
#include "kernels/softmax_xent.h"

namespace dtrain::models {

namespace {

// H (= W) after a convolution with padding (kernel - 1) / 2.
int64_t OutSize(int64_t size, int64_t kernel, int64_t stride) {
  const int64_t pad = (kernel - 1) / 2;
  return (size + 2 * pad - kernel) / stride + 1;
}

// Standard normal from two uniforms (Box-Muller); platform-independent, unlike std::normal_distribution.
double Normal(SplitMix64& rng) {
  const double u1 = 1.0 - rng.Uniform();  // (0, 1]: log is finite
  const double u2 = rng.Uniform();
  constexpr double kTwoPi = 6.283185307179586476925;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace

void Cnn::AddConvBn(const std::string& conv_name, const std::string& bn_name, int64_t cin, int64_t cout, int64_t kernel,
                    int64_t stride, ConvBn* u) {
  int64_t offset = infos_.empty() ? 0 : infos_.back().offset + infos_.back().numel;
  u->conv = Conv{cin, cout, kernel, stride, (kernel - 1) / 2, static_cast<int>(infos_.size()), {}, {}, {}, {}};
  infos_.push_back({conv_name + ".weight", {cout, cin, kernel, kernel}, offset, cout * cin * kernel * kernel});
  offset += cout * cin * kernel * kernel;
  u->bn.index = static_cast<int>(infos_.size());
  u->bn.name = bn_name;
  infos_.push_back({bn_name + ".weight", {cout}, offset, cout});
  infos_.push_back({bn_name + ".bias", {cout}, offset + cout, cout});
}

Status Cnn::Create(DeviceContext& ctx, const CnnOptions& opts, std::unique_ptr<Cnn>* out) {
  DT_CHECK_ARG(opts.in_channels > 0 && opts.image_size >= 1 && opts.num_classes > 1 && opts.blocks_per_stage >= 1,
               "Cnn: in_channels, image_size, blocks_per_stage must be positive and num_classes > 1");
  DT_CHECK_ARG(!opts.channels.empty(), "Cnn: channels must list at least one stage width");
  for (int64_t c : opts.channels) DT_CHECK_ARG(c > 0, "Cnn: stage widths must be positive");
  DT_CHECK_ARG(opts.dtype == DType::kF32 || (opts.dtype == DType::kF64 && !ctx.is_cuda()),
               "Cnn supports f32 (CPU, CUDA) and f64 (CPU only)");
  DT_CHECK_ARG(opts.precision == Precision::kFp32 || (opts.precision == Precision::kBf16 && ctx.is_cuda()),
               "Cnn: precision bf16 needs a CUDA device (the CPU path is fp32); fp16 is not implemented for the CNN");
  std::unique_ptr<Cnn> m(new Cnn(ctx, opts));  // private constructor
  m->conv_cache_ = std::make_unique<ops::Conv2dCache>(ctx.allocator());

  m->AddConvBn("stem.conv", "stem.bn", opts.in_channels, opts.channels[0], 3, 1, &m->stem_);
  int64_t cin = opts.channels[0], size = opts.image_size;
  for (size_t s = 0; s < opts.channels.size(); ++s) {
    for (int64_t b = 0; b < opts.blocks_per_stage; ++b) {
      const std::string p = "s" + std::to_string(s) + ".b" + std::to_string(b) + ".";
      const int64_t cout = opts.channels[s], stride = (s > 0 && b == 0) ? 2 : 1;
      Block blk;
      blk.has_proj = stride != 1 || cin != cout;
      if (blk.has_proj) m->AddConvBn(p + "proj.conv", p + "proj.bn", cin, cout, 1, stride, &blk.proj);
      m->AddConvBn(p + "conv1", p + "bn1", cin, cout, 3, stride, &blk.u1);
      m->AddConvBn(p + "conv2", p + "bn2", cout, cout, 3, 1, &blk.u2);
      size = OutSize(size, 3, stride);
      blk.out_size = size;
      m->blocks_.push_back(std::move(blk));
      cin = cout;
    }
  }
  const ParamInfo& last = m->infos_.back();
  const int64_t offset = last.offset + last.numel;
  m->fc_w_index_ = static_cast<int>(m->infos_.size());
  m->infos_.push_back({"fc.weight", {opts.num_classes, cin}, offset, opts.num_classes * cin});
  m->infos_.push_back({"fc.bias", {opts.num_classes}, offset + opts.num_classes * cin, opts.num_classes});
  DT_RETURN_IF_ERROR(m->BindViews());
  *out = std::move(m);
  return Status::OK();
}

// Allocates params/grads/running stats and points every layer at its views.
Status Cnn::BindViews() {
  const int64_t total = infos_.back().offset + infos_.back().numel;
  DT_RETURN_IF_ERROR(Tensor::Empty({total}, opts_.dtype, ctx_.allocator(), &params_));
  DT_RETURN_IF_ERROR(Tensor::Empty({total}, opts_.dtype, ctx_.allocator(), &grads_));
  DT_RETURN_IF_ERROR(grads_.SetZero(ctx_.stream()));
  auto view = [&](const Tensor& flat, int index, Tensor* out) {
    return flat.View(infos_[index].offset, infos_[index].shape, out);
  };
  const std::vector<ConvBn*> units = Units();
  int64_t running_numel = 0;
  for (ConvBn* u : units) running_numel += 2 * u->conv.cout;
  DT_RETURN_IF_ERROR(Tensor::Empty({running_numel}, opts_.dtype, ctx_.allocator(), &running_));
  int64_t running_offset = 0;
  for (ConvBn* u : units) {
    const int64_t c = u->conv.cout;
    DT_RETURN_IF_ERROR(view(params_, u->conv.index, &u->conv.w));
    DT_RETURN_IF_ERROR(view(grads_, u->conv.index, &u->conv.dw));
    DT_RETURN_IF_ERROR(view(params_, u->bn.index, &u->bn.t.gamma));
    DT_RETURN_IF_ERROR(view(params_, u->bn.index + 1, &u->bn.t.beta));
    DT_RETURN_IF_ERROR(view(grads_, u->bn.index, &u->bn.dgamma));
    DT_RETURN_IF_ERROR(view(grads_, u->bn.index + 1, &u->bn.dbeta));
    DT_RETURN_IF_ERROR(running_.View(running_offset, {c}, &u->bn.t.running_mean));
    DT_RETURN_IF_ERROR(running_.View(running_offset + c, {c}, &u->bn.t.running_var));
    running_offset += 2 * c;
    DT_RETURN_IF_ERROR(Tensor::Empty({c}, opts_.dtype, ctx_.allocator(), &u->bn.t.save_mean));
    DT_RETURN_IF_ERROR(Tensor::Empty({c}, opts_.dtype, ctx_.allocator(), &u->bn.t.save_inv_std));
    if (bf16()) {
      const Conv& cv = u->conv;
      for (Tensor* t : {&u->conv.wb, &u->conv.dwb}) {
        DT_RETURN_IF_ERROR(Tensor::Empty({cv.cout, cv.kernel, cv.kernel, cv.cin}, DType::kBF16, ctx_.allocator(), t));
      }
    }
  }
  DT_RETURN_IF_ERROR(view(params_, fc_w_index_, &fc_w_));
  DT_RETURN_IF_ERROR(view(params_, fc_w_index_ + 1, &fc_b_));
  DT_RETURN_IF_ERROR(view(grads_, fc_w_index_, &dfc_w_));
  return view(grads_, fc_w_index_ + 1, &dfc_b_);
}

std::vector<Cnn::ConvBn*> Cnn::Units() {
  std::vector<ConvBn*> units = {&stem_};
  for (Block& blk : blocks_) {
    if (blk.has_proj) units.push_back(&blk.proj);
    units.push_back(&blk.u1);
    units.push_back(&blk.u2);
  }
  return units;
}

std::vector<std::pair<std::string, Tensor*>> Cnn::buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (ConvBn* u : Units()) {
    out.emplace_back(u->bn.name + ".running_mean", &u->bn.t.running_mean);
    out.emplace_back(u->bn.name + ".running_var", &u->bn.t.running_var);
  }
  return out;
}

Status Cnn::InitParams(uint64_t seed) {
  // Generated on the host in f64 so that every device and dtype starts from the same values.
  std::vector<double> host(params_.numel());
  SplitMix64 rng(seed);
  for (size_t i = 0; i < infos_.size(); ++i) {
    const ParamInfo& p = infos_[i];
    double* v = host.data() + p.offset;
    const bool is_fc = static_cast<int>(i) >= fc_w_index_;
    const bool is_conv = !is_fc && p.shape.size() == 4;
    const bool is_gamma = !is_fc && !is_conv && infos_[i - 1].shape.size() == 4;  // BN gamma follows its conv
    if (is_conv) {
      const double std = std::sqrt(2.0 / static_cast<double>(p.shape[0] * p.shape[2] * p.shape[3]));
      for (int64_t k = 0; k < p.numel; ++k) v[k] = std * Normal(rng);
    } else if (is_fc) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(infos_[fc_w_index_].shape[1]));
      for (int64_t k = 0; k < p.numel; ++k) v[k] = (2.0 * rng.Uniform() - 1.0) * bound;
    } else {
      for (int64_t k = 0; k < p.numel; ++k) v[k] = is_gamma ? 1.0 : 0.0;
    }
  }
  // Running stats: mean 0, var 1 for every BN (laid out [mean C, var C] per BN).
  std::vector<double> running;
  const auto named = buffers();  // running_mean, running_var, ... in layout order
  for (size_t i = 0; i < named.size(); ++i) running.insert(running.end(), named[i].second->numel(), i % 2 ? 1.0 : 0.0);
  for (auto [flat, values] : {std::make_pair(&params_, &host), std::make_pair(&running_, &running)}) {
    Tensor staging;
    DT_RETURN_IF_ERROR(Tensor::Empty({flat->numel()}, opts_.dtype, ctx_.host_allocator(), &staging));
    for (int64_t i = 0; i < flat->numel(); ++i) {
      if (opts_.dtype == DType::kF64) {
        staging.data<double>()[i] = (*values)[i];
      } else {
        staging.data<float>()[i] = static_cast<float>((*values)[i]);
      }
    }
    DT_RETURN_IF_ERROR(flat->CopyFrom(staging, ctx_.stream()));
    // `staging` is pageable host memory: the copy is staged before CopyFrom returns, but sync anyway
    // before it is freed.
    DT_RETURN_IF_ERROR(ctx_.Synchronize());
  }
  return Status::OK();
}

Status Cnn::AllocUnit(int64_t batch, int64_t size, ConvBn* u) {
  DT_RETURN_IF_ERROR(Tensor::Empty({batch, u->conv.cout, size, size}, opts_.dtype, ctx_.allocator(), &u->c));
  return Tensor::Empty({batch, u->conv.cout, size, size}, opts_.dtype, ctx_.allocator(), &u->dc);
}

Status Cnn::EnsureActivations(int64_t batch) {
  if (batch == batch_) return Status::OK();
  batch_ = -1;
  if (bf16()) {
    DT_RETURN_IF_ERROR(EnsureActivationsBf16(batch));
    batch_ = batch;
    return Status::OK();
  }
  auto alloc = [&](const std::vector<int64_t>& shape, Tensor* t) {
    return Tensor::Empty(shape, opts_.dtype, ctx_.allocator(), t);
  };
  const int64_t s0 = opts_.image_size, c0 = opts_.channels[0];
  DT_RETURN_IF_ERROR(AllocUnit(batch, s0, &stem_));
  for (Tensor* t : {&stem_b_, &stem_out_, &stem_db_, &stem_dout_}) DT_RETURN_IF_ERROR(alloc({batch, c0, s0, s0}, t));
  for (Block& blk : blocks_) {
    const int64_t c = blk.u2.conv.cout, s = blk.out_size;
    DT_RETURN_IF_ERROR(AllocUnit(batch, s, &blk.u1));
    DT_RETURN_IF_ERROR(AllocUnit(batch, s, &blk.u2));
    if (blk.has_proj) DT_RETURN_IF_ERROR(AllocUnit(batch, s, &blk.proj));
    for (Tensor* t : {&blk.b1, &blk.r1, &blk.db1, &blk.dr1, &blk.sum, &blk.out, &blk.dsum, &blk.dout}) {
      DT_RETURN_IF_ERROR(alloc({batch, c, s, s}, t));
    }
  }
  const int64_t c_last = opts_.channels.back();
  DT_RETURN_IF_ERROR(alloc({batch, c_last}, &pooled_));
  DT_RETURN_IF_ERROR(alloc({batch, c_last}, &dpooled_));
  DT_RETURN_IF_ERROR(alloc({batch, opts_.num_classes}, &logits_));
  DT_RETURN_IF_ERROR(alloc({batch, opts_.num_classes}, &dlogits_));
  DT_RETURN_IF_ERROR(alloc({batch}, &losses_));
  batch_ = batch;
  return Status::OK();
}

// ---- forward ---------------------------------------------------------------------------------------------------

Status Cnn::ConvForward(Conv& conv, const Tensor& x, Tensor* y) {
  return ops::Conv2dForward(ctx_, conv_cache_.get(), x, conv.w, conv.stride, conv.pad, y);
}

Status Cnn::BnForward(Bn& bn, const Tensor& x, Tensor* y, bool accumulate) {
  return training_ ? ops::BatchNormForwardTraining(ctx_, x, &bn.t, y, accumulate)
                   : ops::BatchNormForwardEval(ctx_, x, bn.t, y, accumulate);
}

Status Cnn::BlockForward(Block& blk, const Tensor& x) {
  DT_RETURN_IF_ERROR(ConvForward(blk.u1.conv, x, &blk.u1.c));
  DT_RETURN_IF_ERROR(BnForward(blk.u1.bn, blk.u1.c, &blk.b1, false));
  DT_RETURN_IF_ERROR(ops::ReluForward(ctx_, blk.b1, &blk.r1));
  DT_RETURN_IF_ERROR(ConvForward(blk.u2.conv, blk.r1, &blk.u2.c));
  // sum = skip(x), then sum += BN2(conv2): the residual add rides on batch norm's accumulate.
  if (blk.has_proj) {
    DT_RETURN_IF_ERROR(ConvForward(blk.proj.conv, x, &blk.proj.c));
    DT_RETURN_IF_ERROR(BnForward(blk.proj.bn, blk.proj.c, &blk.sum, false));
  } else {
    DT_RETURN_IF_ERROR(blk.sum.CopyFrom(x, ctx_.stream()));
  }
  DT_RETURN_IF_ERROR(BnForward(blk.u2.bn, blk.u2.c, &blk.sum, true));
  return ops::ReluForward(ctx_, blk.sum, &blk.out);
}

Status Cnn::Forward(const Tensor& inputs, const Tensor& targets) {
  DT_NVTX_RANGE("cnn.forward");
  const int64_t c = opts_.in_channels, s = opts_.image_size;
  DT_CHECK_ARG((inputs.ndim() == 2 && inputs.dim(1) == c * s * s) ||
                   (inputs.ndim() == 4 && inputs.dim(1) == c && inputs.dim(2) == s && inputs.dim(3) == s),
               "Cnn expects inputs [B, " << c * s * s << "] or [B, " << c << ", " << s << ", " << s << "], got "
                                         << inputs.ToString());
  DT_CHECK_ARG(targets.ndim() == 1 && targets.dim(0) == inputs.dim(0),
               "targets " << targets.ToString() << " do not match inputs " << inputs.ToString());
  DT_CHECK_ARG(inputs.dtype() == opts_.dtype,
               "Cnn: inputs " << inputs.ToString() << " are not " << DTypeName(opts_.dtype));
  const int64_t batch = inputs.dim(0);
  backward_ready_ = false;
  DT_RETURN_IF_ERROR(EnsureActivations(batch));
  DT_RETURN_IF_ERROR(inputs.Reshape({batch, c, s, s}, &x_));

  if (bf16()) {
    DT_RETURN_IF_ERROR(ForwardBf16(batch));
  } else {
    DT_RETURN_IF_ERROR(ConvForward(stem_.conv, x_, &stem_.c));
    DT_RETURN_IF_ERROR(BnForward(stem_.bn, stem_.c, &stem_b_, false));
    DT_RETURN_IF_ERROR(ops::ReluForward(ctx_, stem_b_, &stem_out_));
    const Tensor* a = &stem_out_;
    for (Block& blk : blocks_) {
      DT_RETURN_IF_ERROR(BlockForward(blk, *a));
      a = &blk.out;
    }
    DT_RETURN_IF_ERROR(ops::GlobalAvgPoolForward(ctx_, *a, &pooled_));
  }
  // logits = pooled @ W^T + b
  DT_RETURN_IF_ERROR(ops::Matmul(ctx_, pooled_, false, fc_w_, true, &logits_));
  DT_RETURN_IF_ERROR(ops::BiasAdd(ctx_, fc_b_, &logits_));
  // Fused softmax cross-entropy: per-example losses and d(mean loss)/d(logits) (training only).
  DT_RETURN_IF_ERROR(ops::SoftmaxCrossEntropy(ctx_, logits_, targets, &losses_, training_ ? &dlogits_ : nullptr,
                                              1.0f / static_cast<float>(batch)));
  backward_ready_ = training_;
  return Status::OK();
}

// ---- backward --------------------------------------------------------------------------------------------------

Status Cnn::ConvBnBackward(ConvBn& u, const Tensor& x, const Tensor& dy, const GradReadyFn& on_ready) {
  DT_RETURN_IF_ERROR(ops::BatchNormBackward(ctx_, u.c, dy, u.bn.t, &u.dc, &u.bn.dgamma, &u.bn.dbeta, true));
  if (on_ready) {
    DT_RETURN_IF_ERROR(on_ready(u.bn.index + 1));
    DT_RETURN_IF_ERROR(on_ready(u.bn.index));
  }
  DT_RETURN_IF_ERROR(ops::Conv2dBackwardFilter(ctx_, conv_cache_.get(), x, u.dc, u.conv.stride, u.conv.pad, &u.conv.dw,
                                               /*accumulate=*/true));
  return on_ready ? on_ready(u.conv.index) : Status::OK();
}

Status Cnn::BlockBackward(Block& blk, const Tensor& x, Tensor* dx, const GradReadyFn& on_ready) {
  DT_RETURN_IF_ERROR(ops::ReluBackward(ctx_, blk.out, blk.dout, &blk.dsum));
  // Main path: BN2 <- conv2 <- ReLU <- BN1 <- conv1.
  DT_RETURN_IF_ERROR(ConvBnBackward(blk.u2, blk.r1, blk.dsum, on_ready));
  DT_RETURN_IF_ERROR(ops::Conv2dBackwardData(ctx_, conv_cache_.get(), blk.u2.dc, blk.u2.conv.w, blk.u2.conv.stride,
                                             blk.u2.conv.pad, &blk.dr1));
  DT_RETURN_IF_ERROR(ops::ReluBackward(ctx_, blk.r1, blk.dr1, &blk.db1));
  DT_RETURN_IF_ERROR(ConvBnBackward(blk.u1, x, blk.db1, on_ready));
  // dx = skip'(dsum), then dx += conv1^T(dc1).
  if (blk.has_proj) {
    DT_RETURN_IF_ERROR(ConvBnBackward(blk.proj, x, blk.dsum, on_ready));
    DT_RETURN_IF_ERROR(ops::Conv2dBackwardData(ctx_, conv_cache_.get(), blk.proj.dc, blk.proj.conv.w,
                                               blk.proj.conv.stride, blk.proj.conv.pad, dx));
  } else {
    DT_RETURN_IF_ERROR(dx->CopyFrom(blk.dsum, ctx_.stream()));
  }
  return ops::Conv2dBackwardData(ctx_, conv_cache_.get(), blk.u1.dc, blk.u1.conv.w, blk.u1.conv.stride, blk.u1.conv.pad,
                                 dx, /*accumulate=*/true);
}

Status Cnn::Backward(float loss_scale, const GradReadyFn& on_ready) {
  DT_NVTX_RANGE("cnn.backward");
  if (!backward_ready_) {
    return Status::FailedPrecondition("Cnn::Backward needs a preceding training-mode Forward (set_training(true))");
  }
  backward_ready_ = false;  // activation gradients are consumed: one Backward per Forward
  if (loss_scale != 1.0f) DT_RETURN_IF_ERROR(ops::Scale(ctx_, &dlogits_, loss_scale));
  // Head: dW += dlogits^T @ pooled, db += colsum(dlogits), dpooled = dlogits @ W.
  DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dlogits_, true, pooled_, false, &dfc_w_, 1.0f, 1.0f));
  DT_RETURN_IF_ERROR(ops::BiasGrad(ctx_, dlogits_, &dfc_b_, /*accumulate=*/true));
  if (on_ready) {
    DT_RETURN_IF_ERROR(on_ready(fc_w_index_ + 1));
    DT_RETURN_IF_ERROR(on_ready(fc_w_index_));
  }
  DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dlogits_, false, fc_w_, false, &dpooled_));
  if (bf16()) return BackwardBf16(on_ready);
  DT_RETURN_IF_ERROR(ops::GlobalAvgPoolBackward(ctx_, dpooled_, &blocks_.back().dout));
  for (size_t i = blocks_.size(); i-- > 0;) {
    const Tensor& x = i == 0 ? stem_out_ : blocks_[i - 1].out;
    Tensor* dx = i == 0 ? &stem_dout_ : &blocks_[i - 1].dout;
    DT_RETURN_IF_ERROR(BlockBackward(blocks_[i], x, dx, on_ready));
  }
  DT_RETURN_IF_ERROR(ops::ReluBackward(ctx_, stem_out_, stem_dout_, &stem_db_));
  return ConvBnBackward(stem_, x_, stem_db_, on_ready);
}

Status Cnn::InputsFromBatch(const Tensor& batch_inputs, Tensor* x) const {
  const int64_t rows = batch_inputs.dim(0), per_row = rows > 0 ? batch_inputs.numel() / rows : 0;
  const int64_t c = opts_.in_channels, hw = opts_.image_size;
  if (per_row != c * hw * hw) {
    return Status::InvalidArgument("model.cnn expects " + std::to_string(c) + "x" + std::to_string(hw) + "x" +
                                   std::to_string(hw) + " images but the dataset's samples have " +
                                   std::to_string(per_row) + " values");
  }
  return batch_inputs.Reshape({rows, c, hw, hw}, x);
}

}  // namespace dtrain::models
