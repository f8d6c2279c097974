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

std::vector<ProgressMetric> EvalMetrics(double loss, double accuracy, bool tokens, double seconds) {
  std::vector<ProgressMetric> out = {{"eval_loss", "eval", loss, nullptr},
                                     {"eval_accuracy", "eval", accuracy, nullptr}};
  if (tokens) out.push_back({"eval_ppl", "eval", std::exp(loss), nullptr});
  out.push_back({"eval_s", "eval", seconds, nullptr});
  return out;
}

std::string EvalLine(int64_t epoch, int64_t epochs, int64_t step, int64_t total_steps, double loss, double accuracy,
                     bool tokens, double seconds) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "epoch %lld/%lld step %lld/%lld eval | loss %.4f | ", static_cast<long long>(epoch),
                static_cast<long long>(epochs), static_cast<long long>(step), static_cast<long long>(total_steps),
                loss);
  std::string out = buf;
  if (tokens) {
    std::snprintf(buf, sizeof(buf), "ppl %.2f", std::exp(loss));
  } else {
    std::snprintf(buf, sizeof(buf), "accuracy %.2f%%", 100.0 * accuracy);
  }
  out += buf;
  std::snprintf(buf, sizeof(buf), " | %.2f s", seconds);
  return out + buf;
}

const std::vector<std::string>& CsvColumns() {
  static const std::vector<std::string> kColumns = {"kind",
                                                    "epoch",
                                                    "step",
                                                    "time",
                                                    "loss",
                                                    "grad_norm",
                                                    "lr",
                                                    "samples_per_s",
                                                    "tokens_per_s",
                                                    "step_ms",
                                                    "data_ms",
                                                    "fwd_bwd_ms",
                                                    "comm_exposed_ms",
                                                    "optim_ms",
                                                    "ckpt_stall_ms",
                                                    "peak_mem_mib",
                                                    "gpu_util_pct",
                                                    "gpu_mem_used_mib",
                                                    "gpu_power_w",
                                                    "gpu_temp_c",
                                                    "gpu_sm_clock_mhz",
                                                    "eval_loss",
                                                    "eval_accuracy",
                                                    "eval_ppl",
                                                    "eval_s",
                                                    "verdict"};
  return kColumns;
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
