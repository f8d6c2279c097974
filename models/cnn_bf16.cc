// The CNN's bf16 channels-last step (Precision::kBf16, see models/cnn.h): the same layers, parameters and
// gradient-ready order as the fp32 step in cnn.cc, with bf16 [B, H, W, C] activations, tensor-core convolutions,
// and batch norm fused with the ReLU and the residual add that follow it.
#include <vector>

#include "core/check.h"
#include "core/nvtx.h"
#include "models/cnn.h"
#include "kernels/batchnorm_nhwc.h"
#include "kernels/elementwise.h"
#include "kernels/layout.h"
#include "kernels/pool.h"

namespace dtrain::models {

Status Cnn::EnsureActivationsBf16(int64_t batch) {
  auto nhwc = [&](int64_t size, int64_t c, Tensor* t) {
    return Tensor::Empty({batch, size, size, c}, DType::kBF16, ctx_.allocator(), t);
  };
  auto unit = [&](int64_t size, ConvBn* u) {
    DT_RETURN_IF_ERROR(nhwc(size, u->conv.cout, &u->c));
    return nhwc(size, u->conv.cout, &u->dc);
  };
  const int64_t s0 = opts_.image_size, c0 = opts_.channels[0];
  DT_RETURN_IF_ERROR(nhwc(s0, opts_.in_channels, &xb_));
  DT_RETURN_IF_ERROR(unit(s0, &stem_));
  for (Tensor* t : {&stem_out_, &stem_dout_}) DT_RETURN_IF_ERROR(nhwc(s0, c0, t));
  for (Block& blk : blocks_) {
    const int64_t c = blk.u2.conv.cout, s = blk.out_size;
    DT_RETURN_IF_ERROR(unit(s, &blk.u1));
    DT_RETURN_IF_ERROR(unit(s, &blk.u2));
    if (blk.has_proj) {
      DT_RETURN_IF_ERROR(unit(s, &blk.proj));
      DT_RETURN_IF_ERROR(nhwc(s, c, &blk.sum));
    }
    for (Tensor* t : {&blk.r1, &blk.dr1, &blk.out, &blk.dsum, &blk.dout}) DT_RETURN_IF_ERROR(nhwc(s, c, t));
  }
  const int64_t c_last = opts_.channels.back();
  auto f32 = [&](const std::vector<int64_t>& shape, Tensor* t) {
    return Tensor::Empty(shape, DType::kF32, ctx_.allocator(), t);
  };
  DT_RETURN_IF_ERROR(f32({batch, c_last}, &pooled_));
  DT_RETURN_IF_ERROR(f32({batch, c_last}, &dpooled_));
  DT_RETURN_IF_ERROR(f32({batch, opts_.num_classes}, &logits_));
  DT_RETURN_IF_ERROR(f32({batch, opts_.num_classes}, &dlogits_));
  return f32({batch}, &losses_);
}

// ---- forward ---------------------------------------------------------------------------------------------------

Status Cnn::UnitForwardBf16(ConvBn& u, const Tensor& x, const Tensor* residual, bool relu, Tensor* y) {
  DT_RETURN_IF_ERROR(ops::Conv2dForward(ctx_, conv_cache_.get(), x, u.conv.wb, u.conv.stride, u.conv.pad, &u.c));
  return training_ ? ops::BatchNormNhwcForwardTraining(ctx_, u.c, &u.bn.t, residual, relu, y)
                   : ops::BatchNormNhwcForwardEval(ctx_, u.c, u.bn.t, residual, relu, y);
}

Status Cnn::ForwardBf16(int64_t batch) {
  DT_NVTX_RANGE("cnn.forward_bf16");
  // The step's bf16 operands: the images and this step's weights, channels-last.
  DT_RETURN_IF_ERROR(ops::NchwToNhwc(ctx_, x_, &xb_));
  for (ConvBn* u : Units()) DT_RETURN_IF_ERROR(ops::NchwToNhwc(ctx_, u->conv.w, &u->conv.wb));
  DT_RETURN_IF_ERROR(UnitForwardBf16(stem_, xb_, nullptr, /*relu=*/true, &stem_out_));
  const Tensor* a = &stem_out_;
  for (Block& blk : blocks_) {
    // out = ReLU(BN2(conv2(ReLU(BN1(conv1(x))))) + skip), skip = BN(proj(x)) or x.
    DT_RETURN_IF_ERROR(UnitForwardBf16(blk.u1, *a, nullptr, /*relu=*/true, &blk.r1));
    const Tensor* skip = a;
    if (blk.has_proj) {
      DT_RETURN_IF_ERROR(UnitForwardBf16(blk.proj, *a, nullptr, /*relu=*/false, &blk.sum));
      skip = &blk.sum;
    }
    DT_RETURN_IF_ERROR(UnitForwardBf16(blk.u2, blk.r1, skip, /*relu=*/true, &blk.out));
    a = &blk.out;
  }
  return ops::GlobalAvgPoolNhwcForward(ctx_, *a, &pooled_);
}

// ---- backward --------------------------------------------------------------------------------------------------

Status Cnn::UnitBackwardBf16(ConvBn& u, const Tensor& x, const Tensor& dout, const Tensor* out, Tensor* dg,
                             const GradReadyFn& on_ready) {
  DT_RETURN_IF_ERROR(
      ops::BatchNormNhwcBackward(ctx_, u.c, dout, out, u.bn.t, &u.dc, dg, &u.bn.dgamma, &u.bn.dbeta, true));
  if (on_ready) {
    DT_RETURN_IF_ERROR(on_ready(u.bn.index + 1));
    DT_RETURN_IF_ERROR(on_ready(u.bn.index));
  }
  DT_RETURN_IF_ERROR(
      ops::Conv2dBackwardFilter(ctx_, conv_cache_.get(), x, u.dc, u.conv.stride, u.conv.pad, &u.conv.dwb));
  // The f32 gradient [K, C, R, S] accumulates (micro-steps); the bf16 one [K, R, S, C] is this micro-step's.
  DT_RETURN_IF_ERROR(ops::NhwcToNchw(ctx_, u.conv.dwb, &u.conv.dw, /*accumulate=*/true));
  return on_ready ? on_ready(u.conv.index) : Status::OK();
}

Status Cnn::BackwardBf16(const GradReadyFn& on_ready) {
  DT_NVTX_RANGE("cnn.backward_bf16");
  DT_RETURN_IF_ERROR(ops::GlobalAvgPoolNhwcBackward(ctx_, dpooled_, &blocks_.back().dout));
  for (size_t i = blocks_.size(); i-- > 0;) {
    Block& blk = blocks_[i];
    const Tensor& x = i == 0 ? stem_out_ : blocks_[i - 1].out;
    Tensor* dx = i == 0 ? &stem_dout_ : &blocks_[i - 1].dout;
    // BN2's backward masks dout by the block's ReLU and keeps that gradient (dsum) for the skip path.
    DT_RETURN_IF_ERROR(UnitBackwardBf16(blk.u2, blk.r1, blk.dout, &blk.out, &blk.dsum, on_ready));
    DT_RETURN_IF_ERROR(ops::Conv2dBackwardData(ctx_, conv_cache_.get(), blk.u2.dc, blk.u2.conv.wb, blk.u2.conv.stride,
                                               blk.u2.conv.pad, &blk.dr1));
    DT_RETURN_IF_ERROR(UnitBackwardBf16(blk.u1, x, blk.dr1, &blk.r1, nullptr, on_ready));
    if (blk.has_proj) {
      // dx = proj^T(dc_proj) + conv1^T(dc1)
      DT_RETURN_IF_ERROR(UnitBackwardBf16(blk.proj, x, blk.dsum, nullptr, nullptr, on_ready));
      DT_RETURN_IF_ERROR(ops::Conv2dBackwardData(ctx_, conv_cache_.get(), blk.proj.dc, blk.proj.conv.wb,
                                                 blk.proj.conv.stride, blk.proj.conv.pad, dx));
      DT_RETURN_IF_ERROR(ops::Conv2dBackwardData(ctx_, conv_cache_.get(), blk.u1.dc, blk.u1.conv.wb, blk.u1.conv.stride,
                                                 blk.u1.conv.pad, dx, /*accumulate=*/true));
    } else {
      // dx = conv1^T(dc1) + dsum (the identity skip)
      DT_RETURN_IF_ERROR(ops::Conv2dBackwardData(ctx_, conv_cache_.get(), blk.u1.dc, blk.u1.conv.wb, blk.u1.conv.stride,
                                                 blk.u1.conv.pad, dx));
      DT_RETURN_IF_ERROR(ops::Add(ctx_, *dx, blk.dsum, dx));
    }
  }
  return UnitBackwardBf16(stem_, xb_, stem_dout_, &stem_out_, nullptr, on_ready);
}

}  // namespace dtrain::models
