#pragma once
// ParallelFor: runs work(i) for every i in [0, n) on up to `threads` threads (the caller's among them), each
// taking the next index. After the first error no further indexes are handed out (those running finish).
// Returns the error of the lowest index that failed, so the message does not depend on thread timing, or OK.
// `work` must be safe to call from several threads at once for different i.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "core/status.h"

namespace dtrain {

template <typename Fn>
Status ParallelFor(size_t n, size_t threads, Fn work) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<Status> errors(n);
  auto loop = [&] {
    for (size_t i = next++; i < n && !failed.load(); i = next++) {
      errors[i] = work(i);
      if (!errors[i].ok()) failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(n, threads); ++t) pool.emplace_back(loop);
  loop();
  for (std::thread& t : pool) t.join();
  for (Status& st : errors) {
    if (!st.ok()) return st;
  }
  return Status::OK();
}

}  // namespace dtrain
