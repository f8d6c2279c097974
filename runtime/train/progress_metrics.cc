#include "runtime/train/progress_metrics.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace dtrain::runtime {

std::vector<ProgressMetric> IntervalMetrics(double loss, double lr, double samples_per_s, const StepPhases& p,
                                            double peak_mem_mib) {
  return {
      {"loss", "train", loss, "loss %.4f"},
      {"lr", "train", lr, "lr %.3e"},
      {"samples_per_s", "train", samples_per_s, "%.0f samples/s"},
      {"step_ms", "time", p.step_ms, "step %.2f ms"},
      {"data_ms", "time", p.data_ms, nullptr},  // data .. ckpt: as shares in the step breakdown
      {"fwd_bwd_ms", "time", p.fwd_bwd_ms, nullptr},
      {"comm_exposed_ms", "time", p.comm_exposed_ms, nullptr},
      {"optim_ms", "time", p.optim_ms, nullptr},
      {"ckpt_stall_ms", "time", p.ckpt_stall_ms, nullptr},
      {"peak_mem_mib", nullptr, peak_mem_mib, "peak %.0f MiB", /*line_if_positive=*/true, /*line_whole=*/true},
  };
}

std::string ProgressLine(int64_t epoch, int64_t epochs, int64_t step, int64_t total_steps,
                         const std::vector<ProgressMetric>& metrics, const StepPhases& p) {
  std::string out = "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs) + " step " + std::to_string(step) +
                    "/" + std::to_string(total_steps);
  for (const ProgressMetric& m : metrics) {
    if (m.line == nullptr || (m.line_if_positive && !(m.value > 0))) continue;
    char buf[96];
    std::snprintf(buf, sizeof(buf), m.line, m.line_whole ? std::trunc(m.value) : m.value);
    out += std::string(" | ") + buf;
    if (std::strcmp(m.key, "step_ms") == 0) out += " (" + FormatStepBreakdown(p) + ")";
  }
  return out;
}

std::vector<std::pair<std::string, double>> TensorBoardScalars(const std::vector<ProgressMetric>& metrics) {
  std::vector<std::pair<std::string, double>> out;
  for (const ProgressMetric& m : metrics) {
    if (m.group != nullptr) out.emplace_back(std::string(m.group) + "/" + m.key, m.value);
  }
  return out;
}

void AddMetrics(const std::vector<ProgressMetric>& metrics, JsonLine* line) {
  for (const ProgressMetric& m : metrics) line->Add(m.key, m.value);
}

}  // namespace dtrain::runtime
