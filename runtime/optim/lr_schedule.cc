#include "runtime/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"

namespace dtrain::runtime {
namespace {
constexpr double kPi = 3.14159265358979323846;
}  // namespace

Status LrSchedule::Create(const std::string& kind, double base_lr, int64_t warmup_steps, int64_t total_steps,
                          double min_lr_ratio, std::unique_ptr<LrSchedule>* out) {
  DT_CHECK_ARG(out != nullptr, "out is null");
  std::unique_ptr<LrSchedule> s(new LrSchedule());  // private constructor: make_unique cannot reach it
  if (kind == "constant") {
    s->kind_ = Kind::kConstant;
  } else if (kind == "cosine") {
    s->kind_ = Kind::kCosine;
  } else {
    return Status::InvalidArgument("unknown LR schedule '" + kind + "' (expected constant|cosine)");
  }
  DT_CHECK_ARG(std::isfinite(base_lr) && base_lr >= 0.0, "base LR must be finite and >= 0, got " << base_lr);
  DT_CHECK_ARG(warmup_steps >= 0, "warmup_steps must be >= 0, got " << warmup_steps);
  DT_CHECK_ARG(total_steps >= 0, "total_steps must be >= 0, got " << total_steps);
  DT_CHECK_ARG(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0, "min_lr_ratio must be in [0, 1], got " << min_lr_ratio);
  DT_CHECK_ARG(s->kind_ != Kind::kCosine || total_steps > 0, "a cosine schedule needs total_steps > 0");
  s->base_lr_ = base_lr;
  // A warmup longer than the run is clipped to it (CheckRun warns about it before the run starts).
  s->warmup_steps_ = total_steps > 0 ? std::min(warmup_steps, total_steps) : warmup_steps;
  s->total_steps_ = total_steps;
  s->min_lr_ratio_ = min_lr_ratio;
  *out = std::move(s);
  return Status::OK();
}

double LrSchedule::LrAt(double step) const {
  if (step < 0) step = 0;
  const auto warmup = static_cast<double>(warmup_steps_), total = static_cast<double>(total_steps_);
  if (step < warmup) return base_lr_ * (step + 1) / warmup;
  if (kind_ == Kind::kConstant) return base_lr_;
  const double min_lr = base_lr_ * min_lr_ratio_;
  if (step >= total || total_steps_ <= warmup_steps_) return min_lr;
  const double progress = (step - warmup) / (total - warmup);
  return min_lr + (base_lr_ - min_lr) * 0.5 * (1.0 + std::cos(kPi * progress));
}

}  // namespace dtrain::runtime
