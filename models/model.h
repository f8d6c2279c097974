#pragma once
// Model: the interface every workload (MLP, CNN, GPT-2) implements.
//
// Parameters and gradients each live in ONE flat contiguous f32 buffer (params(), grads()); each
// parameter is a view at ParamInfo::offset. Layout is forward order (layer 0 first), so backward,
// which runs layers in reverse, finishes gradients from the END of the flat buffer towards its
// start: the GradientReducer's buckets are contiguous ranges of grads().
//
// Step protocol (one micro-batch):
//   1. Forward(inputs, targets): computes the per-example loss and keeps what backward needs.
//   2. Backward(loss_scale, on_ready): ACCUMULATES d(loss_scale * mean loss)/d(param) into grads()
//      (callers zero grads() at the start of each optimizer step, so gradient accumulation is a
//      sequence of Forward/Backward pairs), and calls on_ready(i) for every parameter i, in the
//      order their gradients become final — all work producing grad i has been QUEUED on the
//      context's stream (not necessarily finished) when on_ready(i) runs. A non-OK return from
//      on_ready aborts the backward and is returned.
// All device work is queued on ctx.stream(); nothing here synchronizes with the host, except EvalBatch.
// The model owns its inputs: InputsFromBatch shapes a loader batch for Forward, and EvalBatch scores one
// evaluation batch, so a trainer calls no op kernel itself.
// Not thread-safe; one model per worker.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::models {

// Arithmetic of a model's forward/backward. Parameters and gradients stay f32 (the "master" copy) in every mode
// (except Llama's params under train.master_weights bf16: bf16, see models/llama.h; the optimizer state follows
// optim.state_dtype); kBf16/kFp16 run activations and GEMM inputs in 16 bits (CUDA only); kFp8 (GPT-2 and
// Llama, CUDA sm_89+) is kBf16 with some linear layers as FP8 GEMMs (models/fp8_linears.h).
enum class Precision { kFp32, kBf16, kFp16, kFp8 };

struct ParamInfo {
  std::string name;            // "fc1.weight"
  std::vector<int64_t> shape;  // {out, in}
  int64_t offset = 0;          // element offset into params()/grads()
  int64_t numel = 0;
};

using GradReadyFn = std::function<Status(int param_index)>;

class Model {
 public:
  virtual ~Model() = default;

  virtual const std::vector<ParamInfo>& param_infos() const = 0;
  virtual Tensor& params() = 0;  // flat, f32 (bf16 with train.master_weights bf16), on the context's device
  virtual Tensor& grads() = 0;   // flat, f32, same layout as params()

  // Deterministic initialisation from `seed` (the same values on CPU and GPU, on every rank).
  virtual Status InitParams(uint64_t seed) = 0;

  // inputs: model-specific (MLP: f32 [B, input_dim]); targets: i32 [B]. Both on the model's device.
  virtual Status Forward(const Tensor& inputs, const Tensor& targets) = 0;
  // Per-example losses of the last Forward, f32 [B] on the device.
  virtual const Tensor& losses() const = 0;
  // Logits of the last Forward, f32 [B, num_classes] on the device (for accuracy).
  virtual const Tensor& logits() const = 0;

  virtual Status Backward(float loss_scale, const GradReadyFn& on_ready) = 0;
  // The loss_scale the next Backward will be called with, told before its Forward (RunStepBody: the updater's scale
  // / accum; until told: 1). A model that runs part of its backward inside a training Forward (Llama's chunked loss,
  // model.llama.loss_chunk_tokens: the LM head's gradient) applies it there, and its Backward refuses another scale
  // (FailedPrecondition). fp16's dynamic scale of micro-batch 0 is known only after that Forward, so such a model
  // refuses fp16. Default: ignored.
  virtual void set_backward_scale(float loss_scale) {}

  // The loader's batch inputs (dim 0 = samples, each sample's values flat) in the shape Forward takes
  // (MLP: [B, input_dim]; CNN: [B, C, H, W]); a view, no copy. InvalidArgument naming the model's config key
  // when a sample does not have the size the model expects. Default: the inputs as they are.
  virtual Status InputsFromBatch(const Tensor& batch_inputs, Tensor* x) const {
    *x = batch_inputs;
    return Status::OK();
  }
  // acc (f32 [1, 1] on ctx's device) += weight * the mean of the last Forward's losses(), as a [1,n] x [n,1]
  // product on ctx's stream: the running training loss stays on the device, no host sync. (models/model.cc)
  Status AddMeanLoss(DeviceContext& ctx, float weight, Tensor* acc);
  // Evaluation of one batch (the caller sets eval mode): Forward(inputs, targets), then over the rows of
  // the first `num_real` samples (padding samples come last and are skipped; GPT-2 has one row per token):
  // *loss_sum += the sum of their losses, *correct += the rows whose prediction (argmax over the class
  // columns of logits()) equals the target, *count += the rows scored. Synchronizes the host with ctx's stream
  // to read the results. (models/model.cc)
  virtual Status EvalBatch(DeviceContext& ctx, const Tensor& inputs, const Tensor& targets, int64_t num_real,
                           double* loss_sum, int64_t* correct, int64_t* count);

  // Training (the default) or evaluation mode. Only models with mode-dependent layers (batch norm:
  // batch statistics vs running statistics) care; the trainer sets false around evaluation.
  virtual void set_training(bool training) {}
  // One line for the run's log when the model's precision needs more than train.precision to be told (which layers
  // of an fp8 run are FP8); empty otherwise.
  virtual std::string precision_summary() const { return ""; }
  // Named state that is not a parameter but belongs in checkpoints (batch-norm running mean/var),
  // on the model's device, updated by Forward in training mode. Empty for models without any.
  virtual std::vector<std::pair<std::string, Tensor*>> buffers() { return {}; }

 protected:
  // How many leading columns of logits() are classes for EvalBatch's argmax (GPT-2: the unpadded
  // vocabulary); -1: all of them.
  virtual int64_t num_eval_classes() const { return -1; }
  // EvalBatch's predictions of the last (eval-mode) Forward into pred (i32 [rows], on ctx's device). Default: the
  // argmax over the first num_eval_classes() columns of logits(). A model whose logits never exist whole (Llama's
  // chunked loss) keeps them from its Forward.
  virtual Status Predict(DeviceContext& ctx, Tensor* pred);

 private:
  Tensor loss_ones_;  // [n, 1] ones for AddMeanLoss, grown to the largest losses() seen
};

}  // namespace dtrain::models
