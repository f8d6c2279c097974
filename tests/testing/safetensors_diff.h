#pragma once
// MaxSafetensorsDiff: how far apart two weight files are, for tests that compare a resumed or
// restarted run with an uninterrupted one. Header-only because it needs dtrain_runtime
// (ReadSafetensors), which dtrain_testing does not link; the tests that include it do.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"

namespace dtrain::testing {

// Max |a - b| over all tensors of the two files; -1 when either cannot be read, holds no tensor, or
// they differ in tensor names or sizes.
inline double MaxSafetensorsDiff(const std::string& a_path, const std::string& b_path) {
  std::vector<runtime::NamedTensor> a, b;
  if (!runtime::ReadSafetensors(a_path, &a).ok() || !runtime::ReadSafetensors(b_path, &b).ok()) return -1;
  if (a.size() != b.size() || a.empty()) return -1;
  double m = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].name != b[t].name || a[t].data.size() != b[t].data.size()) return -1;
    for (size_t i = 0; i < a[t].data.size(); ++i) m = std::max(m, double(std::abs(a[t].data[i] - b[t].data[i])));
  }
  return m;
}

}  // namespace dtrain::testing
