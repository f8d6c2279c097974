#pragma once
// The goodput of an elastic run: what each attempt of `dtrain launch --nnodes MIN:MAX` ran on, why it ended, how
// long the job took to recover, and how much of the wall time went into steps that count. Read from
// <run_dir>/elastic.jsonl (the launcher's record, launcher/elastic_launch.h) together with the run summary of
// <run_dir>/metrics.jsonl (run_report.h); the two are joined on the attempt number (the launcher's attempt A is the
// metrics start record with restart A).
//
// Figures:
//   time to recover  attempt A+1's first_step time - attempt A's "noticed" time (the launcher learned of the loss,
//                    notice or grow) : process start, communicator set-up, checkpoint read, first step;
//   steps that count attempt A's steps (resume_step, min(last_step, resume step of A+1)]: the steps no later attempt
//                    recomputes; their time is that count x the attempt's step time ((last record - first_step) /
//                    (last_step - resume_step - 1), else the first step's own time);
//   goodput          time in steps that count / wall time (first attempt's start to the last attempt's end);
//   rank-hours       per attempt: ranks x (its end - the previous attempt's end, or its start for the first): the
//                    recovery gap is billed to the hosts that wait through it;
//   cost per 1M samples, spot:      every rank-hour held, at the spot price per rank-hour, / samples that count;
//                        on-demand: the rank-hours of the steps that count (an uninterrupted run on hosts that are
//                                   never taken away), at the on-demand price, / the same samples.
//
// Stateless; thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/observe/run_report.h"

namespace dtrain::runtime {

struct ElasticAttemptRecord {
  int64_t attempt = 0;
  std::string hosts;  // comma-separated
  int64_t world = 0;
  double start = 0, end = 0, noticed = 0;  // Unix seconds
  std::string reason;                      // done | lost_host | notice | grow | failure | stopped
  std::string lost;                        // comma-separated hosts lost (lost_host, notice)
};

struct ElasticAttemptFigures {
  ElasticAttemptRecord record;
  bool has_metrics = false;  // a metrics start record matched
  int64_t resume_step = 0, last_step = 0, counted_steps = 0, steps_recomputed = 0;
  double recover_s = -1;  // -1: the first attempt, or no first_step record
  double counted_s = 0;   // time in the steps that count
  double rank_hours = 0;
};

struct ElasticSummary {
  std::vector<ElasticAttemptFigures> attempts;
  double wall_s = 0, counted_s = 0, goodput = 0;
  double rank_hours = 0, counted_rank_hours = 0;
  int64_t samples = 0;  // in the steps that count
};

// Parses elastic.jsonl text (`source` names it in errors). DataLoss for a line that is not an attempt record,
// except a last line cut short (ignored).
Status ParseElasticAttempts(const std::string& text, const std::string& source, std::vector<ElasticAttemptRecord>* out);

// Joins the launcher's records with the run summary (see the file comment).
ElasticSummary SummarizeElastic(const std::vector<ElasticAttemptRecord>& records, const RunSummary& run);

// The report's elastic section: one line per attempt and the run's goodput and costs; a price <= 0 leaves that
// cost out.
std::string FormatElasticSummary(const ElasticSummary& s, double price_on_demand, double price_spot);

}  // namespace dtrain::runtime
