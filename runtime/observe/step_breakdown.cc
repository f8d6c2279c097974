#include "runtime/observe/step_breakdown.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace dtrain::runtime {
namespace {

int Percent(double ms, double step_ms) { return static_cast<int>(std::lround(100.0 * ms / step_ms)); }

struct Rule {
  const char* verdict;  // "input-bound"
  const char* what;     // "data wait"
  std::string advice;   // "raise data.workers (4) or data.prefetch (4)"
  double ms;
  double threshold;
};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string CommAdvice(const TuningSettings& s) {
  return "raise dist.bucket_mb (" + Num(s.bucket_mb) + ")" + (s.bf16_compress ? "" : ", set dist.bf16_compress") +
         ", or do more work per step (data.batch_size " + std::to_string(s.batch_size) + ", train.grad_accum_steps " +
         std::to_string(s.grad_accum_steps) + ")";
}

std::string CheckpointAdvice(const TuningSettings& s) {
  const std::string every = "checkpoint.every_steps (" + std::to_string(s.checkpoint_every_steps) + ")";
  return s.checkpoint_async ? "raise " + every + " (checkpoint.async is on: the stall is the snapshot)"
                            : "set checkpoint.async or raise " + every;
}

std::string OptimizerAdvice(const TuningSettings& s) {
  const std::string accum = "train.grad_accum_steps (" + std::to_string(s.grad_accum_steps) + ")";
  if (s.offload) {  // the update is the PCIe transfer of the state, not the kernel
    return "optim.offload cpu moves the optimizer state not kept on the GPU over PCIe each update: raise " + accum +
           (s.zero1 ? "" : ", set dist.zero1 on several GPUs (each rank moves only its shard)") +
           ", or keep more of it on the GPU (optim.offload auto keeps what the memory plan leaves, a stronger "
           "activation checkpointing policy leaves more; dtrain launch --dry-run)";
  }
  return s.zero1 ? "raise " + accum + " (dist.zero1 already shards the update)"
                 : "set dist.zero1 to shard the update, or raise " + accum;
}

}  // namespace

double StepPhases::other_ms() const {
  const double other = step_ms - (data_ms + fwd_bwd_ms + comm_exposed_ms + optim_ms + ckpt_stall_ms);
  return other > 0 ? other : 0;
}

std::string FormatStepBreakdown(const StepPhases& p) {
  if (p.step_ms <= 0) return "";
  char buf[160];
  std::snprintf(buf, sizeof(buf), "data %d%% | fwd+bwd %d%% | comm %d%% | optim %d%% | ckpt %d%% | other %d%%",
                Percent(p.data_ms, p.step_ms), Percent(p.fwd_bwd_ms, p.step_ms), Percent(p.comm_exposed_ms, p.step_ms),
                Percent(p.optim_ms, p.step_ms), Percent(p.ckpt_stall_ms, p.step_ms), Percent(p.other_ms(), p.step_ms));
  return buf;
}

std::string StepVerdict(const StepPhases& p, const TuningSettings& s) {
  if (p.step_ms <= 0) return "";
  const Rule rules[] = {
      {"input-bound", "data wait",
       "raise data.workers (" + std::to_string(s.data_workers) + ") or data.prefetch (" +
           std::to_string(s.data_prefetch) + ")",
       p.data_ms, kInputBoundShare},
      {"communication-bound", "exposed all-reduce", CommAdvice(s), p.comm_exposed_ms, kCommBoundShare},
      {"checkpoint-bound", "checkpoint stall", CheckpointAdvice(s), p.ckpt_stall_ms, kCheckpointBoundShare},
      {"optimizer-bound", "optimizer", OptimizerAdvice(s), p.optim_ms, kOptimizerBoundShare},
      {"host-bound", "time outside the measured phases",
       "record a trace (run.trace_steps) to see where the host spends it", p.other_ms(), kHostBoundShare},
  };
  const Rule* worst = nullptr;
  for (const Rule& r : rules) {
    if (r.ms >= r.threshold * p.step_ms && (worst == nullptr || r.ms > worst->ms)) worst = &r;
  }
  char buf[320];
  if (worst != nullptr) {
    std::snprintf(buf, sizeof(buf), "%s: %s %d%% of the step; ", worst->verdict, worst->what,
                  Percent(worst->ms, p.step_ms));
    return buf + worst->advice;
  }
  if (p.fwd_bwd_ms >= kComputeBoundShare * p.step_ms) {
    std::snprintf(buf, sizeof(buf), "compute-bound: forward+backward %d%% of the step (the healthy case)",
                  Percent(p.fwd_bwd_ms, p.step_ms));
    return buf;
  }
  return "";
}

void StepTimeWindow::Add(const StepPhases& p) {
  sum_.data_ms += p.data_ms;
  sum_.fwd_bwd_ms += p.fwd_bwd_ms;
  sum_.comm_exposed_ms += p.comm_exposed_ms;
  sum_.optim_ms += p.optim_ms;
  sum_.ckpt_stall_ms += p.ckpt_stall_ms;
  sum_.step_ms += p.step_ms;
  ++count_;
}

StepPhases StepTimeWindow::Mean() const {
  if (count_ == 0) return StepPhases();
  const double n = static_cast<double>(count_);
  StepPhases m;
  m.data_ms = sum_.data_ms / n;
  m.fwd_bwd_ms = sum_.fwd_bwd_ms / n;
  m.comm_exposed_ms = sum_.comm_exposed_ms / n;
  m.optim_ms = sum_.optim_ms / n;
  m.ckpt_stall_ms = sum_.ckpt_stall_ms / n;
  m.step_ms = sum_.step_ms / n;
  return m;
}

}  // namespace dtrain::runtime
