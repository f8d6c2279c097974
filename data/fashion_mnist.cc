#include "data/fashion_mnist.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/check.h"
#include "data/idx_reader.h"

namespace dtrain::data {
namespace {

// "<dir>/<base>.gz" when it exists, else "<dir>/<base>" when that exists, else the .gz name (so the
// NotFound error names the file the package installs).
std::string ResolvePath(const std::string& dir, const std::string& base) {
  const std::filesystem::path gz = std::filesystem::path(dir) / (base + ".gz");
  const std::filesystem::path plain = std::filesystem::path(dir) / base;
  std::error_code ec;
  if (!std::filesystem::exists(gz, ec) && std::filesystem::exists(plain, ec)) return plain.string();
  return gz.string();
}

}  // namespace

Status LoadFashionMnist(const std::string& dir, bool train, int64_t limit, Split* out) {
  *out = Split();
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = ResolvePath(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = ResolvePath(dir, prefix + "-labels-idx1-ubyte");

  IdxArray images, labels;
  DT_RETURN_IF_ERROR(ReadIdx(images_path, &images));
  DT_RETURN_IF_ERROR(ReadIdx(labels_path, &labels));
  if (images.dims.size() != 3) {
    return Status::DataLoss(images_path + ": expected a 3-D image array (n, rows, cols), got " +
                            std::to_string(images.dims.size()) + "-D");
  }
  if (labels.dims.size() != 1) {
    return Status::DataLoss(labels_path + ": expected a 1-D label array, got " + std::to_string(labels.dims.size()) +
                            "-D");
  }
  if (images.dims[0] != labels.dims[0]) {
    return Status::DataLoss(images_path + " holds " + std::to_string(images.dims[0]) + " images but " + labels_path +
                            " holds " + std::to_string(labels.dims[0]) + " labels");
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kFashionMnistClasses) {
      return Status::DataLoss(labels_path + ": label " + std::to_string(labels.data[i]) + " at index " +
                              std::to_string(i) + " is outside [0, " + std::to_string(kFashionMnistClasses - 1) + "]");
    }
  }

  const int64_t n = limit > 0 ? std::min(limit, images.dims[0]) : images.dims[0];
  const int64_t pixels = images.dims[1] * images.dims[2];
  Split split;
  split.n = n;
  split.rows = images.dims[1];
  split.cols = images.dims[2];
  split.images.resize(static_cast<size_t>(n * pixels));
  // One multiply-add per pixel: (p / 255 - mean) / std == p * scale + shift.
  const float scale = 1.0f / (255.0f * kFashionMnistStd);
  const float shift = -kFashionMnistMean / kFashionMnistStd;
  for (size_t i = 0; i < split.images.size(); ++i) split.images[i] = images.data[i] * scale + shift;
  split.labels.assign(labels.data.begin(), labels.data.begin() + n);
  *out = std::move(split);
  return Status::OK();
}

}  // namespace dtrain::data
