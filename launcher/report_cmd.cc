#include "launcher/report_cmd.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/check.h"
#include "runtime/config/config.h"
#include "runtime/observe/run_report.h"

namespace dtrain::launcher {
namespace {

constexpr const char* kReportUsage =
    "usage: dtrain report RUN_DIR [--price P]\n"
    "  The run summary of RUN_DIR/metrics.jsonl (RUN_DIR may also be the metrics.jsonl file):\n"
    "  wall time, GPU-hours, cost, preemptions, restarts, steps recomputed, time checkpointing and\n"
    "  restarting, one line per attempt.\n"
    "  --price P   price of one GPU-hour (default: run.price_per_gpu_hour of RUN_DIR/config.yaml)\n"
    "  Steps recomputed after a restart = the previous attempt's last logged step - the resume step;\n"
    "  a lower bound (by < train.log_every per restart) when the attempt was killed without an end record.\n";

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status ParsePrice(const std::string& v, double* price) {
  errno = 0;
  char* end = nullptr;
  const double p = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(p) || p < 0) {
    return Status::InvalidArgument("report: --price expects a number >= 0, got '" + v + "'");
  }
  *price = p;
  return Status::OK();
}

}  // namespace

Status BuildReport(const std::vector<std::string>& args, std::string* text) {
  std::string run_dir;
  double price = -1;  // -1: from config.yaml
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      *text = kReportUsage;
      return Status::OK();
    }
    if (a == "--price") {
      if (i + 1 == args.size()) return Status::InvalidArgument("report: --price needs a value");
      DT_RETURN_IF_ERROR(ParsePrice(args[++i], &price));
    } else if (a.rfind("-", 0) == 0) {
      return Status::InvalidArgument("report: unknown flag '" + a + "'\n" + kReportUsage);
    } else if (run_dir.empty()) {
      run_dir = a;
    } else {
      return Status::InvalidArgument("report: expected one RUN_DIR, got '" + run_dir + "' and '" + a + "'");
    }
  }
  if (run_dir.empty()) return Status::InvalidArgument(std::string("report: expected a RUN_DIR\n") + kReportUsage);

  const bool is_dir = IsDirectory(run_dir);
  const std::string metrics = is_dir ? run_dir + "/metrics.jsonl" : run_dir;
  runtime::RunSummary summary;
  DT_RETURN_IF_ERROR(runtime::LoadRunSummary(metrics, &summary));

  std::string note;
  if (price < 0) {
    price = 0;
    std::string dir = is_dir ? run_dir : std::filesystem::path(metrics).parent_path().string();
    if (dir.empty()) dir = ".";
    const std::string config_path = dir + "/config.yaml";
    dtrain::proto::Config cfg;
    const Status st = runtime::LoadConfig(config_path, {}, &cfg);
    if (st.ok()) {
      price = cfg.run().price_per_gpu_hour();
    } else if (st.code() != Status::Code::kNotFound) {
      note = "  note: price not read from " + config_path + ": " + st.ToString() + "\n";
    }
  }
  *text = runtime::FormatRunSummary(summary, price) + note;
  return Status::OK();
}

Status RunReport(const std::vector<std::string>& args) {
  std::string text;
  DT_RETURN_IF_ERROR(BuildReport(args, &text));
  std::fputs(text.c_str(), stdout);
  return Status::OK();
}

}  // namespace dtrain::launcher
