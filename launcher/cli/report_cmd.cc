#include "launcher/cli/report_cmd.h"

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "launcher/cli_parse.h"
#include "runtime/config/config.h"
#include "runtime/observe/elastic_report.h"
#include "runtime/observe/run_report.h"

namespace dtrain::launcher {
namespace {

constexpr const char* kReportFooter =
    "Steps recomputed after a restart = the previous attempt's last logged step - the resume step;\n"
    "a lower bound (by < train.log_every per restart) when the attempt was killed without an end record.\n"
    "\n"
    "example: dtrain report runs/gpt2_tiny --price 2.50\n";

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string CheckPrice(const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double p = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(p) || p < 0) {
    return "expects a number >= 0, got '" + v + "'";
  }
  return "";
}

// Figures no run can have (a negative or non-finite duration, more than a million years: a clock that jumped, a
// damaged or hand-edited record) are shown as 0 with a note naming them, instead of "-3h" or "$-inf".
void ClampUnbelievable(runtime::RunSummary* s, std::string* note) {
  constexpr double kMaxSeconds = 3.2e13;  // a million years
  const auto clamp = [note](const std::string& name, double* v, double max) {
    if (std::isfinite(*v) && *v >= 0 && *v <= max) {
      *v += 0.0;  // -0.0 prints as "-0.0 s"
      return;
    }
    char was[64];
    std::snprintf(was, sizeof(was), "%g", *v);
    *note += "  note: " + name + " was " + was + " in the records (a clock jump or a damaged record?): shown as 0\n";
    *v = 0;
  };
  clamp("the wall time", &s->wall_s, kMaxSeconds);
  clamp("the GPU-hours", &s->gpu_hours, kMaxSeconds / 3600 * 1e6);
  clamp("the recompute time", &s->recompute_s, kMaxSeconds);
  clamp("the mean step time", &s->mean_step_ms, kMaxSeconds * 1e3);
  clamp("the checkpoint stall", &s->checkpoint_stall_s, kMaxSeconds);
  clamp("the checkpoint wait", &s->checkpoint_wait_s, kMaxSeconds);
  clamp("the restart time", &s->restart_s, kMaxSeconds);
  for (size_t i = 0; i < s->attempts.size(); ++i) {
    runtime::AttemptSummary& a = s->attempts[i];
    const std::string which = "attempt " + std::to_string(i + 1) + "'s ";
    double span = a.last_time - a.start_time;
    clamp(which + "duration", &span, kMaxSeconds);
    if (!std::isfinite(a.start_time)) a.start_time = 0;
    a.last_time = a.start_time + span;
    clamp(which + "restart gap", &a.restart_gap_s, kMaxSeconds);
    clamp(which + "GPU busy time", &a.gpu_busy_s, kMaxSeconds);
    clamp(which + "GPU timed span", &a.gpu_timed_s, kMaxSeconds);
  }
  if (s->steps_recomputed < 0) {
    *note += "  note: steps recomputed was " + std::to_string(s->steps_recomputed) + ": shown as 0\n";
    s->steps_recomputed = 0;
  }
}

}  // namespace

CLI::App* AddReportCommand(CLI::App* parent, ReportArgs* out) {
  *out = ReportArgs();
  CLI::App* app = parent->add_subcommand(
      "report",
      "run summary: wall time, GPU-hours (rank-hours for a CPU run), cost, preemptions, restarts, steps recomputed");
  app->footer(kReportFooter);
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->add_option("RUN_DIR", out->run_dir, "a run directory, or its metrics.jsonl");
  app->add_option(
         "--price", out->price,
         "price of one GPU-hour, or rank-hour for a CPU run (default: run.price_per_gpu_hour of RUN_DIR/config.yaml)")
      ->type_name("P")
      ->check(CheckPrice);
  app->add_option("--price-spot", out->price_spot, "elastic runs: spot price of one rank-hour (cost per 1M samples)")
      ->type_name("P")
      ->check(CheckPrice);
  app->add_option("--price-on-demand", out->price_on_demand,
                  "elastic runs: on-demand price of one rank-hour (cost per 1M samples of an uninterrupted run)")
      ->type_name("P")
      ->check(CheckPrice);
  app->callback([out] {
    if (out->run_dir.empty()) FailParse("expected a RUN_DIR (usage: dtrain report RUN_DIR [--price P])");
  });
  return app;
}

Status BuildReport(const std::vector<std::string>& args, std::string* text) {
  ReportArgs a;
  std::vector<std::string> words = {"report"};
  words.insert(words.end(), args.begin(), args.end());
  ParseResult r;
  DT_RETURN_IF_ERROR(ParseWithCli([&a](CLI::App* root) { AddReportCommand(root, &a); }, words, &r));
  if (r.help) {
    *text = r.help_text;
    return Status::OK();
  }
  return BuildReportText(a, text);
}

Status BuildReportText(const ReportArgs& args, std::string* text) {
  const std::string& run_dir = args.run_dir;
  double price = args.price;
  const bool is_dir = IsDirectory(run_dir);
  const std::string metrics = is_dir ? run_dir + "/metrics.jsonl" : run_dir;
  runtime::RunSummary summary;
  DT_RETURN_IF_ERROR(runtime::LoadRunSummary(metrics, &summary));

  std::string note;
  ClampUnbelievable(&summary, &note);
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
      note += "  note: price not read from " + config_path + ": " + st.ToString() + "\n";
    }
  }
  *text = runtime::FormatRunSummary(summary, price) + note;
  if (!is_dir) return Status::OK();
  std::ifstream elastic(run_dir + "/elastic.jsonl", std::ios::binary);
  if (!elastic) return Status::OK();  // not an elastic launch
  std::ostringstream body;
  body << elastic.rdbuf();
  std::vector<runtime::ElasticAttemptRecord> records;
  DT_RETURN_IF_ERROR(runtime::ParseElasticAttempts(body.str(), run_dir + "/elastic.jsonl", &records));
  *text +=
      runtime::FormatElasticSummary(runtime::SummarizeElastic(records, summary), args.price_on_demand, args.price_spot);
  return Status::OK();
}

Status RunReport(const ReportArgs& args) {
  std::string text;
  DT_RETURN_IF_ERROR(BuildReportText(args, &text));
  std::fputs(text.c_str(), stdout);
  return Status::OK();
}

}  // namespace dtrain::launcher
