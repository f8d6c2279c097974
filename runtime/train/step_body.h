#pragma once
// The device work of one optimizer step, written once and run two ways: eagerly (Trainer::TrainStep: batches taken
// from the DataSource as the loop reaches them, phases timed, trace spans) or inside a CUDA-graph capture
// (Trainer::GraphedStep through StepGraph: batches taken before, no host work besides the queueing). What differs
// between the two is a StepHooks object; the sequence of device work is this file's alone:
//
//   zero the gradients; for each of accum micro-batches m {
//     the model's inputs from the batch; the model told the coming Backward's scale (set_backward_scale); Forward;
//     m == 0: the updater's loss scale (fp16: waits for the previous step's scale update, overlapping this forward);
//     loss_acc += mean loss / accum (on the device, no sync);
//     Backward at scale / accum, announcing gradients to the updater (OnGradReady) on the last micro-batch only;
//   }
//   Finalize (the gradient exchange is launched; the compute stream waits for it); hooks.Update() (the optimizer).
//
// No host synchronization and no allocation of its own; one virtual call per hook point.

#include <cstdint>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "models/model.h"
#include "runtime/optim/parameter_updater.h"

namespace dtrain::runtime {

// How a step gets its batches and its update, and what it observes on the way. Not thread-safe: one step at a time.
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // Micro-batch m's tensors on the device (valid until the step's work is queued).
  virtual Status TakeBatch(int64_t m, const Tensor** inputs, const Tensor** targets) = 0;
  // The optimizer's device work after Finalize: eager updater.Step(lr); captured updater.ApplyStep() (the host
  // half, StageStep, runs before each replay).
  virtual Status Update() = 0;
  // Observation points (eager: phases and trace spans); a capture leaves them empty.
  virtual Status BeforeForward(int64_t m) { return Status::OK(); }
  virtual Status AfterBackward(int64_t m) { return Status::OK(); }
  virtual Status BeforeFinalize() { return Status::OK(); }
  virtual Status AfterFinalize() { return Status::OK(); }
};

// The parts a step works on (borrowed; they outlive the call).
struct StepParts {
  DeviceContext& ctx;
  models::Model& model;
  ParameterUpdater& updater;
  Tensor& loss_acc;  // [1,1] f32 on the device: += mean loss of each micro-batch / accum
};

// Queues one optimizer step of `accum` micro-batches (see the sequence above) on ctx's compute stream.
Status RunStepBody(const StepParts& p, int64_t accum, StepHooks& hooks);

}  // namespace dtrain::runtime
