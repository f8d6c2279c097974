#pragma once
// Reading the loader's sample record (DTRAIN_SAMPLE_LOG, data/sample_log.h) of a whole run, restarts included, for
// tests that check that every sample of every epoch was used exactly once. Header-only.
//
// A run writes DIR/samples.attempt<A>.rank<R>.txt, one line per batch a rank took: "EPOCH POSITION NUM_REAL IDX...".
// An attempt that was stopped or killed took batches the next attempt takes again (those after the checkpoint the
// next attempt resumed from): its records from the next attempt's first position on are not the run's.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::testing {

struct SampleRecord {
  int64_t epoch = 0, position = 0;
  std::vector<int64_t> samples;
};

// attempt -> every record of its ranks (file order within a rank).
inline std::map<int, std::vector<SampleRecord>> ReadSampleLogs(const std::string& dir) {
  std::map<int, std::vector<SampleRecord>> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    int attempt = 0, rank = 0;
    const std::string name = entry.path().filename().string();
    if (std::sscanf(name.c_str(), "samples.attempt%d.rank%d.txt", &attempt, &rank) != 2) continue;
    std::ifstream f(entry.path());
    for (std::string line; std::getline(f, line);) {
      std::istringstream in(line);
      SampleRecord r;
      int64_t num_real = 0, idx = 0;
      if (!(in >> r.epoch >> r.position >> num_real)) continue;
      while (in >> idx) r.samples.push_back(idx);
      out[attempt].push_back(std::move(r));
    }
  }
  return out;
}

// The records of the steps that count: each attempt's records before the (epoch, position) where the next attempt
// that took any batch started.
inline std::vector<SampleRecord> CountedRecords(const std::map<int, std::vector<SampleRecord>>& by_attempt) {
  std::vector<SampleRecord> out;
  for (auto it = by_attempt.begin(); it != by_attempt.end(); ++it) {
    const auto next = std::next(it);
    std::pair<int64_t, int64_t> until{INT64_MAX, INT64_MAX};
    if (next != by_attempt.end()) {
      for (const SampleRecord& r : next->second) until = std::min(until, {r.epoch, r.position});
    }
    for (const SampleRecord& r : it->second) {
      if (std::make_pair(r.epoch, r.position) < until) out.push_back(r);
    }
  }
  return out;
}

// (epoch, step in the epoch) -> the step's samples, sorted; a step is `global_batch` permutation positions.
inline std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> SamplesByStep(
    const std::vector<SampleRecord>& records, int64_t global_batch) {
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> out;
  for (const SampleRecord& r : records) {
    auto& v = out[{r.epoch, r.position / global_batch}];
    v.insert(v.end(), r.samples.begin(), r.samples.end());
  }
  for (auto& kv : out) std::sort(kv.second.begin(), kv.second.end());
  return out;
}

// epoch -> (samples used once, samples used more than once).
inline std::map<int64_t, std::pair<int64_t, int64_t>> UsesPerEpoch(const std::vector<SampleRecord>& records) {
  std::map<int64_t, std::map<int64_t, int>> uses;
  for (const SampleRecord& r : records) {
    for (int64_t s : r.samples) ++uses[r.epoch][s];
  }
  std::map<int64_t, std::pair<int64_t, int64_t>> out;
  for (const auto& [epoch, counts] : uses) {
    for (const auto& kv : counts) (kv.second == 1 ? out[epoch].first : out[epoch].second) += 1;
  }
  return out;
}

}  // namespace dtrain::testing
