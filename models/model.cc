#include "models/model.h"

#include <vector>

#include "core/check.h"
#include "kernels/matmul.h"
#include "kernels/softmax_xent.h"

namespace dtrain::models {

Status Model::AddMeanLoss(DeviceContext& ctx, float weight, Tensor* acc) {
  DT_CHECK_ARG(acc != nullptr, "AddMeanLoss: acc is null");
  const Tensor& l = losses();
  const int64_t n = l.numel();
  DT_CHECK_ARG(n > 0 && l.dtype() == DType::kF32, "AddMeanLoss: losses " << l.ToString() << " must be f32, non-empty");
  if (loss_ones_.numel() < n) {
    std::vector<float> host(n, 1.0f);
    DT_RETURN_IF_ERROR(Tensor::Empty({n, 1}, DType::kF32, ctx.allocator(), &loss_ones_));
    DT_RETURN_IF_ERROR(
        loss_ones_.CopyFrom(Tensor::Wrap(host.data(), {n, 1}, DType::kF32, DeviceType::kCPU), ctx.stream()));
    // Sync point (first call, or a larger batch, only): `host` is pageable and goes away here.
    DT_RETURN_IF_ERROR(ctx.Synchronize());
  }
  Tensor row, ones;
  DT_RETURN_IF_ERROR(l.Reshape({1, n}, &row));
  DT_RETURN_IF_ERROR(loss_ones_.View(0, {n, 1}, &ones));
  return ops::Matmul(ctx, row, false, ones, false, acc, weight / static_cast<float>(n), 1.0f);
}

Status Model::Predict(DeviceContext& ctx, Tensor* pred) { return ops::Argmax(ctx, logits(), pred, num_eval_classes()); }

Status Model::EvalBatch(DeviceContext& ctx, const Tensor& inputs, const Tensor& targets, int64_t num_real,
                        double* loss_sum, int64_t* correct, int64_t* count) {
  DT_CHECK_ARG(loss_sum != nullptr && correct != nullptr && count != nullptr, "EvalBatch: null output");
  DT_RETURN_IF_ERROR(Forward(inputs, targets));
  const Tensor& l = losses();
  const int64_t batch = inputs.dim(0), rows = l.numel();
  DT_CHECK_ARG(batch > 0 && rows % batch == 0 && targets.numel() == rows,
               "EvalBatch: " << rows << " losses and " << targets.numel() << " targets for " << batch << " samples");
  DT_CHECK_ARG(num_real >= 0 && num_real <= batch, "EvalBatch: " << num_real << " real samples of " << batch);
  DT_CHECK_ARG(l.dtype() == DType::kF32 || l.dtype() == DType::kF64, "EvalBatch: losses " << l.ToString());
  // Rows of losses/logits per sample (GPT-2: one per token); padding rows come last.
  const int64_t real = num_real * (rows / batch);

  Tensor pred;
  DT_RETURN_IF_ERROR(Tensor::Empty({rows}, DType::kI32, ctx.allocator(), &pred));
  DT_RETURN_IF_ERROR(Predict(ctx, &pred));
  std::vector<int32_t> host_pred(rows), host_label(rows);
  const bool f32 = l.dtype() == DType::kF32;
  std::vector<float> loss32(f32 ? rows : 0);
  std::vector<double> loss64(f32 ? 0 : rows);
  Tensor flat_targets;
  DT_RETURN_IF_ERROR(targets.Reshape({rows}, &flat_targets));
  DT_RETURN_IF_ERROR(
      Tensor::Wrap(host_pred.data(), {rows}, DType::kI32, DeviceType::kCPU).CopyFrom(pred, ctx.stream()));
  DT_RETURN_IF_ERROR(
      Tensor::Wrap(host_label.data(), {rows}, DType::kI32, DeviceType::kCPU).CopyFrom(flat_targets, ctx.stream()));
  void* loss_dst = f32 ? static_cast<void*>(loss32.data()) : static_cast<void*>(loss64.data());
  DT_RETURN_IF_ERROR(Tensor::Wrap(loss_dst, {rows}, l.dtype(), DeviceType::kCPU).CopyFrom(l, ctx.stream()));
  // Sync point (evaluation only): the predictions, labels and losses are read on the host.
  DT_RETURN_IF_ERROR(ctx.Synchronize());
  for (int64_t i = 0; i < real; ++i) {
    *loss_sum += f32 ? static_cast<double>(loss32[i]) : loss64[i];
    *correct += host_pred[i] == host_label[i];
  }
  *count += real;
  return Status::OK();
}

}  // namespace dtrain::models
