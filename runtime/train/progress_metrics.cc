#include "runtime/train/progress_metrics.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/observe/run_report.h"

namespace dtrain::runtime {

std::vector<ProgressMetric> IntervalMetrics(double loss, double lr, double samples_per_s, int64_t tokens_per_sample,
                                            const StepPhases& p, double peak_mem_mib) {
  std::vector<ProgressMetric> out = {
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
  if (tokens_per_sample > 0) {
    out.insert(out.begin() + 3,
               {"tokens_per_s", "train", samples_per_s * static_cast<double>(tokens_per_sample), "%.0f tokens/s"});
  }
  return out;
}

void AddGradNorm(double grad_norm, std::vector<ProgressMetric>* metrics) {
  if (!std::isfinite(grad_norm)) return;
  auto at = metrics->begin();
  while (at != metrics->end() && std::strcmp(at->key, "loss") != 0) ++at;
  if (at != metrics->end()) ++at;
  metrics->insert(at, {"grad_norm", "train", grad_norm, "gnorm %.4f"});
}

void AddGpuMetrics(double util_pct, double mem_used_mib, double power_w, const GpuWindow& own,
                   std::vector<ProgressMetric>* metrics) {
  metrics->push_back({"gpu_util_pct", "gpu", util_pct, "gpu %.0f%%"});
  metrics->push_back({"gpu_mem_used_mib", "gpu", mem_used_mib, "gpu mem %.0f MiB", false, true});
  metrics->push_back({"gpu_power_w", "gpu", power_w, nullptr});
  metrics->push_back({"gpu_temp_c", "gpu", own.temp_c, nullptr});
  metrics->push_back({"gpu_sm_clock_mhz", "gpu", own.sm_clock_mhz, nullptr});
}

std::string ProgressLine(int64_t epoch, int64_t epochs, int64_t step, int64_t total_steps,
                         const std::vector<ProgressMetric>& metrics, const StepPhases& p, double elapsed_s,
                         double eta_s) {
  std::string out = "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs) + " step " + std::to_string(step) +
                    "/" + std::to_string(total_steps);
  for (const ProgressMetric& m : metrics) {
    if (m.line == nullptr || (m.line_if_positive && !(m.value > 0))) continue;
    char buf[96];
    std::snprintf(buf, sizeof(buf), m.line, m.line_whole ? std::trunc(m.value) : m.value);
    out += std::string(" | ") + buf;
    if (std::strcmp(m.key, "step_ms") == 0) out += " (" + FormatStepBreakdown(p) + ")";
  }
  const int percent = total_steps > 0 ? static_cast<int>(100 * step / total_steps) : 0;
  return out + " | " + std::to_string(percent) + "% " + FormatDuration(elapsed_s) + " elapsed, eta " +
         FormatDuration(eta_s);
}

std::string ProgressBar(int64_t step, int64_t total_steps, double elapsed_s, double eta_s) {
  constexpr int kWidth = 30;
  const double done = total_steps > 0 ? static_cast<double>(step) / static_cast<double>(total_steps) : 0;
  const int filled = static_cast<int>(done * kWidth);
  char pct[8];
  std::snprintf(pct, sizeof(pct), "%3d%%", static_cast<int>(100 * done));
  return "[" + std::string(filled, '#') + std::string(kWidth - filled, '-') + "] " + pct + " step " +
         std::to_string(step) + "/" + std::to_string(total_steps) + " | " + FormatDuration(elapsed_s) +
         " elapsed, eta " + FormatDuration(eta_s);
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
