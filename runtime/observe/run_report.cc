#include "runtime/observe/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dtrain::runtime {
namespace {

using Json = nlohmann::json;

// One metrics record: a JSON object (anything else, or text that is not JSON, is false). No exceptions:
// the parser reports bad text as a discarded value.
bool ParseObject(const std::string& line, Json* out) {
  *out = Json::parse(line, /*cb=*/nullptr, /*allow_exceptions=*/false);
  return out->is_object();
}

bool Has(const Json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number();
}

double Num(const Json& r, const char* key, double dflt = 0) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : dflt;
}

std::string Str(const Json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_string() ? it->get<std::string>() : "";
}

bool Blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Folds one record (not a start) into the current attempt and the run totals.
void Apply(const std::string& kind, const Json& r, AttemptSummary* a, RunSummary* s, double* step_ms_sum,
           int64_t* step_ms_count) {
  const double since = Has(r, "time") ? std::max(0.0, Num(r, "time") - a->last_time) : 0.0;
  if (Has(r, "time")) a->last_time = std::max(a->last_time, Num(r, "time"));
  if (Has(r, "step")) a->last_step = std::max<int64_t>(a->last_step, static_cast<int64_t>(Num(r, "step")));
  if (kind == "train" && Has(r, "gpu_util_pct")) {  // weighted by the interval the record closes
    a->gpu_busy_s += since * Num(r, "gpu_util_pct") / 100.0;
    a->gpu_timed_s += since;
  }
  if (kind == "train") {
    if (Has(r, "loss")) {
      s->has_loss = true;
      s->last_loss = Num(r, "loss");
    }
    if (Has(r, "step_ms")) {
      *step_ms_sum += Num(r, "step_ms");
      ++*step_ms_count;
    }
  } else if (kind == "eval") {
    s->has_eval = true;
    s->eval_loss = Num(r, "eval_loss");
    s->eval_accuracy = Num(r, "eval_accuracy");
    s->has_eval_ppl = Has(r, "eval_ppl");
    s->eval_ppl = s->has_eval_ppl ? Num(r, "eval_ppl") : 0;
  } else if (kind == "checkpoint") {
    ++s->checkpoints;
    s->checkpoint_stall_s += Num(r, "stall_ms") / 1000.0;
    s->checkpoint_wait_s += Num(r, "wait_ms") / 1000.0;
  } else if (kind == "end") {
    a->end_status = Str(r, "status");
  } else if (kind == "first_step") {
    a->first_step_time = Num(r, "time");
  }
}

}  // namespace

Status SummarizeMetrics(const std::string& text, const std::string& source, RunSummary* out) {
  RunSummary s;
  s.source = source;
  std::vector<std::string> lines;
  {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  size_t last_nonblank = lines.size();
  for (size_t i = lines.size(); i-- > 0;) {
    if (!Blank(lines[i])) {
      last_nonblank = i;
      break;
    }
  }

  double step_ms_sum = 0;
  int64_t step_ms_count = 0;
  Json r;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (Blank(line)) continue;
    if (!ParseObject(line, &r)) {
      if (i == last_nonblank) {
        s.truncated_last_line = true;
        continue;
      }
      // A write cut short by a kill, continued on the same line by the next attempt's append.
      ++s.skipped_lines;
      const size_t pos = line.rfind("{\"kind\"");
      if (pos == 0 || pos == std::string::npos || !ParseObject(line.substr(pos), &r)) continue;
    }
    const std::string kind = Str(r, "kind");
    if (kind.empty()) {
      ++s.skipped_lines;
      continue;
    }
    if (kind == "start") {
      AttemptSummary a;
      a.start_time = a.last_time = Num(r, "time");
      a.restart = static_cast<int64_t>(Num(r, "restart"));
      a.resume_step = a.last_step = static_cast<int64_t>(Num(r, "resume_step"));
      a.world = static_cast<int64_t>(Num(r, "world"));
      a.device = Str(r, "device");
      a.global_batch = static_cast<int64_t>(Num(r, "global_batch"));
      s.total_steps = static_cast<int64_t>(Num(r, "total_steps"));
      // A fresh start (step 0, not a launcher restart) in a directory that already had attempts begins a new run
      // (resume never --overwrite): the summary is of that run.
      if (!s.attempts.empty() && a.resume_step == 0 && a.restart == 0) {
        s.attempts.clear();
        s.restarts = 0;
      }
      // A restart recovers an attempt that did not finish (a launcher restart, or a start after a preempted, failed
      // or killed attempt); a start after a finished one (a longer schedule, say) is a continuation, not a restart.
      const bool recovers = a.restart > 0 || (!s.attempts.empty() && s.attempts.back().end_status != "done");
      if (recovers && !s.attempts.empty()) {
        const AttemptSummary& prev = s.attempts.back();
        a.steps_recomputed = std::max<int64_t>(0, prev.last_step - a.resume_step);
        a.restart_gap_s = std::max(0.0, a.start_time - prev.last_time);
      }
      if (recovers) ++s.restarts;
      s.attempts.push_back(a);
      continue;
    }
    // The restore record of an attempt is written before its start record (runtime/train/checkpoint_coordinator.cc):
    // it is not the previous attempt's, whose last record and step it would otherwise move.
    if (kind == "restore") continue;
    if (s.attempts.empty()) {
      return Status::DataLoss(source + ":" + std::to_string(i + 1) + ": a '" + kind +
                              "' record before the first 'start' record");
    }
    Apply(kind, r, &s.attempts.back(), &s, &step_ms_sum, &step_ms_count);
  }
  if (s.attempts.empty()) return Status::DataLoss(source + ": no 'start' record (not a dtrain metrics file?)");

  double last_time = s.attempts.front().start_time;
  for (const AttemptSummary& a : s.attempts) {
    s.gpu_hours += (a.last_time - a.start_time) * static_cast<double>(a.world) / 3600.0;
    if (a.end_status == "preempted") ++s.preemptions;
    s.steps_recomputed += a.steps_recomputed;
    s.restart_s += a.restart_gap_s;
    last_time = std::max(last_time, a.last_time);
  }
  s.wall_s = last_time - s.attempts.front().start_time;
  s.final_step = s.attempts.back().last_step;
  s.mean_step_ms = step_ms_count > 0 ? step_ms_sum / static_cast<double>(step_ms_count) : 0;
  s.recompute_s = static_cast<double>(s.steps_recomputed) * s.mean_step_ms / 1000.0;
  *out = std::move(s);
  return Status::OK();
}

Status LoadRunSummary(const std::string& path, RunSummary* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound("no metrics file '" + path + "' (is this a dtrain run directory?)");
  std::ostringstream text;
  text << f.rdbuf();
  if (f.bad()) return Status::IoError("reading '" + path + "'");
  return SummarizeMetrics(text.str(), path, out);
}

std::string FormatDuration(double seconds) {
  if (seconds < 60) return Fmt("%.1f s", seconds);
  const int64_t t = static_cast<int64_t>(std::llround(seconds));
  char buf[48];
  if (t < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm %02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh %02lldm %02llds", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  }
  return buf;
}

std::string FormatRunSummary(const RunSummary& s, double price_per_gpu_hour) {
  if (s.attempts.empty()) return "run summary: " + s.source + ": no attempts\n";
  const AttemptSummary& last = s.attempts.back();
  const std::string hours = last.device == "cpu" ? "rank-hours" : "GPU-hours";
  const std::string of = s.total_steps > 0 ? " of " + std::to_string(s.total_steps) : "";
  std::ostringstream o;
  auto row = [&o](const std::string& key, const std::string& value) {
    o << "  " << key << std::string(key.size() < 15 ? 15 - key.size() : 1, ' ') << value << "\n";
  };
  o << "run summary: " << s.source << "\n";
  const std::string status = last.end_status.empty() ? "no end record (killed, or still running)" : last.end_status;
  row("status", status + " at step " + std::to_string(s.final_step) + of);
  row("wall time", FormatDuration(s.wall_s) + " (first start to last record)");
  row(hours, Fmt("%.3f", s.gpu_hours) + " (" + std::to_string(s.attempts.size()) +
                 (s.attempts.size() == 1 ? " attempt" : " attempts") + ")");
  if (price_per_gpu_hour > 0) {
    row("cost", Fmt("$%.2f", s.gpu_hours * price_per_gpu_hour) + " at " + Fmt("$%.2f", price_per_gpu_hour) + " per " +
                    hours.substr(0, hours.size() - 1));
  } else {
    row("cost", "(no price: set run.price_per_gpu_hour or pass --price)");
  }
  row("preemptions", std::to_string(s.preemptions));
  row("restarts", std::to_string(s.restarts) + ", " + FormatDuration(s.restart_s) + " restarting");
  row("recomputed", std::to_string(s.steps_recomputed) + " steps, ~" + FormatDuration(s.recompute_s) +
                        " (a lower bound: see dtrain report --help)");
  double busy = 0, timed = 0;
  for (const AttemptSummary& a : s.attempts) {
    busy += a.gpu_busy_s;
    timed += a.gpu_timed_s;
  }
  if (timed > 0) {
    row("gpu busy", Fmt("%.0f%%", 100.0 * busy / timed) + " (NVML utilization, time-weighted over " +
                        FormatDuration(timed) + " of logged training)");
  }
  row("checkpointing", FormatDuration(s.checkpoint_stall_s) + " stalled in " + std::to_string(s.checkpoints) +
                           " checkpoints, " + FormatDuration(s.checkpoint_wait_s) + " waiting for async saves");
  if (s.has_loss || s.has_eval) {
    std::string v = s.has_loss ? Fmt("%.4f", s.last_loss) : "-";
    if (s.has_eval) {
      v += Fmt("; eval loss %.4f", s.eval_loss) +
           (s.has_eval_ppl ? Fmt(", ppl %.2f", s.eval_ppl) : Fmt(", accuracy %.2f%%", 100.0 * s.eval_accuracy));
    }
    row("loss", v);
  }
  for (size_t i = 0; i < s.attempts.size(); ++i) {
    const AttemptSummary& a = s.attempts[i];
    std::string v = "world " + std::to_string(a.world) + " " + a.device + ", ";
    if (i > 0) {
      v += "resumed at " + std::to_string(a.resume_step) + " (" + std::to_string(a.steps_recomputed) +
           " recomputed) after " + FormatDuration(a.restart_gap_s) + ", ";
    }
    v += "steps " + std::to_string(a.resume_step) + " -> " + std::to_string(a.last_step) + " in " +
         FormatDuration(a.last_time - a.start_time) + ", " + (a.end_status.empty() ? "no end record" : a.end_status);
    if (a.gpu_timed_s > 0) v += Fmt(", gpu %.0f%% busy", 100.0 * a.gpu_busy_s / a.gpu_timed_s);
    row("attempt " + std::to_string(i + 1), v);
  }
  if (s.truncated_last_line) o << "  note: ignored a truncated last line (a write cut short)\n";
  if (s.skipped_lines > 0) o << "  note: skipped " << s.skipped_lines << " unreadable line(s)\n";
  return o.str();
}

}  // namespace dtrain::runtime
