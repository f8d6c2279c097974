#pragma once
// Fashion-MNIST, loaded whole into host memory (a small first data path; the sharded async loader
// replaces it for large data sets).
//
// The files are Debian's dataset-fashion-mnist package: <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
// (a plain file without ".gz" is used when the .gz one is absent). Pixels become floats
// (p / 255 - kFashionMnistMean) / kFashionMnistStd, the usual per-dataset normalisation.
// Thread-safe: no shared state.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::data {

// Where Debian installs the data set.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
// Mean and std of the train split's pixels scaled to [0, 1].
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;
inline constexpr int32_t kFashionMnistClasses = 10;

// One split: n images of rows x cols, row-major, and their labels.
struct Split {
  int64_t n = 0, rows = 0, cols = 0;
  std::vector<float> images;    // n*rows*cols, normalised as above
  std::vector<int32_t> labels;  // n, each in [0, kFashionMnistClasses)
};

// Loads the train (60000) or t10k (10000) split from `dir`. `limit` > 0 keeps at most the first
// `limit` samples (in file order); `limit` <= 0 keeps all.
// Errors name the file: NotFound (missing file, with the apt-get hint), DataLoss (corrupt or truncated
// IDX, images not 3-D, labels not 1-D, image and label counts that differ, a label outside [0, 9]).
// On error *out is left empty.
Status LoadFashionMnist(const std::string& dir, bool train, int64_t limit, Split* out);

}  // namespace dtrain::data
