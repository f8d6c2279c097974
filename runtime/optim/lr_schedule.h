#pragma once
// LrSchedule: the learning rate of each optimizer step, a pure function of the schedule step.
//
//   kind "constant": linear warmup, then base_lr forever.
//   kind "cosine":   linear warmup, then cosine decay from base_lr to min_lr_ratio * base_lr, reached
//                    at total_steps and held after it.
// Warmup (both kinds, when warmup_steps > 0): step s in [0, warmup_steps) gives
// base_lr * (s + 1) / warmup_steps, so the first step uses base_lr / warmup_steps and step
// warmup_steps - 1 uses base_lr. For s in [warmup_steps, total_steps] the cosine kind gives
//   min + (base - min) * (1 + cos(pi * (s - warmup_steps) / (total_steps - warmup_steps))) / 2.
// `step` is the 0-based index of the update about to run (Optimizer::step() before Step()), or, with
// schedule.samples_per_step, samples seen / samples_per_step: a fraction between two whole steps lies on the same
// curves (for a whole step both give the same double).
// Immutable after Create(): LrAt() is thread-safe.

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace dtrain::runtime {

class LrSchedule {
 public:
  enum class Kind { kConstant, kCosine };

  // Validates and builds a schedule. InvalidArgument for an unknown kind, a negative or non-finite
  // base_lr, negative step counts, min_lr_ratio outside [0, 1], a cosine schedule without
  // total_steps > 0 (the constant kind accepts total_steps = 0, meaning "unknown"). A warmup longer than
  // total_steps > 0 is clipped to total_steps: the LR rises over the whole run (runtime/train/run_check.h
  // warns about it before the run starts).
  static Status Create(const std::string& kind, double base_lr, int64_t warmup_steps, int64_t total_steps,
                       double min_lr_ratio, std::unique_ptr<LrSchedule>* out);

  // The LR for 0-based step `step` (negative steps are treated as 0).
  double LrAt(double step) const;

  Kind kind() const { return kind_; }
  double base_lr() const { return base_lr_; }
  int64_t warmup_steps() const { return warmup_steps_; }
  int64_t total_steps() const { return total_steps_; }
  double min_lr() const { return base_lr_ * min_lr_ratio_; }

 private:
  LrSchedule() = default;
  Kind kind_ = Kind::kConstant;
  double base_lr_ = 0.0;
  int64_t warmup_steps_ = 0;
  int64_t total_steps_ = 0;
  double min_lr_ratio_ = 0.0;
};

}  // namespace dtrain::runtime
