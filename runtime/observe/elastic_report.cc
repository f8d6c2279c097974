#include "runtime/observe/elastic_report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dtrain::runtime {
namespace {

using Json = nlohmann::json;

double Num(const Json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : 0;
}

std::string Str(const Json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// The metrics attempt the launcher's attempt `a` started (the last one with restart == a), or null.
const AttemptSummary* Match(const RunSummary& run, int64_t a) {
  const AttemptSummary* found = nullptr;
  for (const AttemptSummary& m : run.attempts) {
    if (m.restart == a) found = &m;
  }
  return found;
}

// Seconds per step of an attempt: measured from its first completed step on, else that first step's own time, else
// the run's mean step time.
double StepSeconds(const AttemptSummary& m, const RunSummary& run) {
  const int64_t after_first = m.last_step - m.resume_step - 1;
  if (m.first_step_time > 0 && after_first > 0) return (m.last_time - m.first_step_time) / after_first;
  if (m.first_step_time > 0) return m.first_step_time - m.start_time;
  return run.mean_step_ms / 1000.0;
}

}  // namespace

Status ParseElasticAttempts(const std::string& text, const std::string& source,
                            std::vector<ElasticAttemptRecord>* out) {
  out->clear();
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    const Json r = Json::parse(lines[i], /*cb=*/nullptr, /*allow_exceptions=*/false);
    if (!r.is_object() || Str(r, "kind") != "attempt") {
      if (i + 1 == lines.size()) break;  // a last line cut short
      return Status::DataLoss(source + ":" + std::to_string(i + 1) + ": not an attempt record: " + lines[i]);
    }
    ElasticAttemptRecord a;
    a.attempt = static_cast<int64_t>(Num(r, "attempt"));
    a.hosts = Str(r, "hosts");
    a.world = static_cast<int64_t>(Num(r, "world"));
    a.start = Num(r, "start");
    a.end = Num(r, "end");
    a.noticed = Num(r, "noticed");
    a.reason = Str(r, "reason");
    a.lost = Str(r, "lost");
    if (a.attempt == 0) out->clear();  // a new launch in the same run directory: report the last one
    out->push_back(a);
  }
  return Status::OK();
}

ElasticSummary SummarizeElastic(const std::vector<ElasticAttemptRecord>& records, const RunSummary& run) {
  ElasticSummary s;
  if (records.empty()) return s;
  for (size_t i = 0; i < records.size(); ++i) {
    ElasticAttemptFigures f;
    f.record = records[i];
    const double billed_from = i == 0 ? records[i].start : records[i - 1].end;
    f.rank_hours = static_cast<double>(records[i].world) * std::max(0.0, records[i].end - billed_from) / 3600.0;
    s.rank_hours += f.rank_hours;
    if (const AttemptSummary* m = Match(run, records[i].attempt)) {
      f.has_metrics = true;
      f.resume_step = m->resume_step;
      f.last_step = m->last_step;
      f.steps_recomputed = m->steps_recomputed;
      int64_t until = m->last_step;
      for (size_t j = i + 1; j < records.size(); ++j) {  // the next attempt that got going redoes from its resume
        if (const AttemptSummary* n = Match(run, records[j].attempt)) {
          until = std::min(until, n->resume_step);
          break;
        }
      }
      f.counted_steps = std::max<int64_t>(0, until - m->resume_step);
      f.counted_s = static_cast<double>(f.counted_steps) * StepSeconds(*m, run);
      if (i > 0 && m->first_step_time > 0) f.recover_s = m->first_step_time - records[i - 1].noticed;
      s.samples += f.counted_steps * m->global_batch;
      s.counted_rank_hours += f.counted_s * static_cast<double>(records[i].world) / 3600.0;
    }
    s.counted_s += f.counted_s;
    s.attempts.push_back(f);
  }
  s.wall_s = records.back().end - records.front().start;
  s.goodput = s.wall_s > 0 ? s.counted_s / s.wall_s : 0;
  return s;
}

std::string FormatElasticSummary(const ElasticSummary& s, double price_on_demand, double price_spot) {
  std::ostringstream o;
  o << "elastic attempts (elastic.jsonl):\n";
  for (const ElasticAttemptFigures& f : s.attempts) {
    const ElasticAttemptRecord& r = f.record;
    o << "  attempt " << r.attempt + 1 << ": world " << r.world << " on " << r.hosts << "; ";
    if (f.has_metrics) {
      o << "steps " << f.resume_step << " -> " << f.last_step << " (" << f.counted_steps << " count";
      if (f.steps_recomputed > 0) o << ", " << f.steps_recomputed << " recomputed";
      o << ")";
    } else {
      o << "no training record";
    }
    if (f.recover_s >= 0) o << "; recovered in " << FormatDuration(f.recover_s);
    o << "; ended: " << r.reason << (r.lost.empty() ? "" : " (" + r.lost + ")") << "\n";
  }
  o << "  goodput        " << Fmt("%.1f%%", 100.0 * s.goodput) << " (" << FormatDuration(s.counted_s)
    << " in steps that count of " << FormatDuration(s.wall_s) << " wall)\n";
  o << "  rank-hours     " << Fmt("%.4f", s.rank_hours) << " held, " << Fmt("%.4f", s.counted_rank_hours)
    << " in steps that count; " << s.samples << " samples\n";
  const double m_samples = static_cast<double>(s.samples) / 1e6;
  if (m_samples > 0 && price_spot > 0) {
    o << "  cost/1M spot   " << Fmt("$%.4f", s.rank_hours * price_spot / m_samples) << " (every rank-hour held at "
      << Fmt("$%.2f", price_spot) << ")\n";
  }
  if (m_samples > 0 && price_on_demand > 0) {
    o << "  cost/1M o-d    " << Fmt("$%.4f", s.counted_rank_hours * price_on_demand / m_samples)
      << " (the steps that count, uninterrupted, at " << Fmt("$%.2f", price_on_demand) << ")\n";
  }
  if (price_spot <= 0 && price_on_demand <= 0) {
    o << "  cost           (no prices: pass --price-spot and --price-on-demand, per rank-hour)\n";
  }
  return o.str();
}

}  // namespace dtrain::runtime
