#pragma once
// SampleLog: a debug/test record of the samples a loader delivered, so that a test can check that a run used every
// sample of every epoch exactly once — also across restarts at other world sizes. The trainer opens one per rank and
// attempt when DTRAIN_SAMPLE_LOG names a directory (runtime/train/trainer_data.cc).
//
// Format: one text line per delivered batch, written with one write(2) (nothing buffered: a rank killed
// with SIGKILL leaves every line of the batches it took, whole):
//   EPOCH POSITION NUM_REAL IDX IDX ...
// POSITION is the permutation position where the batch's global micro-batch starts (data/sampler.h); the IDX are
// the batch's real samples only (its kPad repeats are left out), in permutation order.
//
// Thread-compatible: one writer (the loader's consumer thread).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::data {

class SampleLog {
 public:
  // Creates (truncates) `path`. IoError naming it when it cannot be opened.
  static Status Create(const std::string& path, std::unique_ptr<SampleLog>* out);
  ~SampleLog();
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;

  // Appends one batch's line. IoError naming the file when the write fails.
  Status Append(int64_t epoch, int64_t position, const std::vector<int64_t>& indices, int64_t num_real);

 private:
  SampleLog(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace dtrain::data
