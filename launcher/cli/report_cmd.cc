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
#include "launcher/cli/cli_parse.h"
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

}  // namespace

CLI::App* AddReportCommand(CLI::App* parent, ReportArgs* out) {
  *out = ReportArgs();
  CLI::App* app = parent->add_subcommand(
      "report", "run summary: wall time, GPU-hours, cost, preemptions, restarts, steps recomputed");
  app->footer(kReportFooter);
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->add_option("RUN_DIR", out->run_dir, "a run directory, or its metrics.jsonl");
  app->add_option("--price", out->price,
                  "price of one GPU-hour (default: run.price_per_gpu_hour of RUN_DIR/config.yaml)")
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
