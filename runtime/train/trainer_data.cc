// The trainer's run length, LR schedule position and evaluation (runtime/train/trainer.h); the batches come from its
// DataSource (runtime/train/data_source.h).
#include <algorithm>
#include <limits>

#include "core/check.h"
#include "core/logging.h"
#include "core/nvtx.h"
#include "runtime/train/trainer.h"

namespace dtrain::runtime {

int64_t Trainer::ScheduleSteps() const {
  const int64_t max_steps = cfg_.train().max_steps();
  const int64_t steps = data_->ScheduleSteps(cfg_.train().epochs(), cfg_.schedule().samples_per_step());
  return max_steps > 0 ? std::min(steps, max_steps) : steps;
}

int64_t Trainer::EndStep() const {
  const int64_t epochs = cfg_.train().epochs(), max_steps = cfg_.train().max_steps();
  const int64_t global = cfg_.data().batch_size() * cfg_.train().grad_accum_steps() * world_;
  int64_t left = data_->StepsLeft(data_->Position(), epochs);  // INT64_MAX without epochs
  if (max_steps > 0) {
    const int64_t sps = cfg_.schedule().samples_per_step();
    const int64_t to_max = sps == 0 ? max_steps - start_step_ : (max_steps * sps - samples_seen_ + global - 1) / global;
    left = std::min(left, std::max<int64_t>(to_max, 0));
  }
  return start_step_ + left;
}

double Trainer::StepLr(int64_t step) const {
  const int64_t sps = cfg_.schedule().samples_per_step();
  return schedule_->LrAt(sps == 0 ? static_cast<double>(step)
                                  : static_cast<double>(samples_seen_) / static_cast<double>(sps));
}

Status Trainer::Evaluate(double* loss, double* accuracy) {
  DT_NVTX_RANGE("evaluate");
  *loss = *accuracy = std::numeric_limits<double>::quiet_NaN();
  if (!data_->has_eval()) return Status::OK();
  comm::WatchdogScope armed(watchdog_, "evaluation (device syncs, metric all-reduce)");
  model_->set_training(false);
  int64_t batches = 0;
  DT_RETURN_IF_ERROR(data_->BeginEval(cfg_.train().eval_batches(), &batches));
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  for (int64_t k = 0; k < batches; ++k) {
    data::Batch b;
    DT_RETURN_IF_ERROR(data_->NextEval(&b));
    Tensor x;
    DT_RETURN_IF_ERROR(model_->InputsFromBatch(b.inputs, &x));
    DT_RETURN_IF_ERROR(model_->EvalBatch(ctx_, x, b.targets, b.num_real, &loss_sum, &correct, &count));
  }
  model_->set_training(true);
  // Evaluation batches may have reallocated the model's activations: the step graph must be captured anew.
  if (step_graph_) step_graph_->Reset();
  std::vector<double> v = {loss_sum, static_cast<double>(correct), static_cast<double>(count)};
  DT_RETURN_IF_ERROR(AllReduceHost(&v));
  if (v[2] > 0) {
    *loss = v[0] / v[2];
    *accuracy = v[1] / v[2];
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
