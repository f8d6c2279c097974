#include "data/fashion_mnist.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/data/idx_fixture.h"

namespace dtrain::data {
namespace {

using fixture::Gzip;
using fixture::IdxBytes;
using fixture::TempDir;
using fixture::WriteFile;

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Loads a real split or skips when the package is not installed.
#define LOAD_REAL_OR_SKIP(train, limit, split)                                                        \
  do {                                                                                                \
    const Status _st = LoadFashionMnist(kFashionMnistDir, train, limit, split);                       \
    if (_st.code() == Status::Code::kNotFound) GTEST_SKIP() << "no Fashion-MNIST: " << _st.message(); \
    ASSERT_TRUE(_st.ok()) << _st.ToString();                                                          \
  } while (0)

TEST(FashionMnistTest, RealTrainSplit) {
  Split s;
  LOAD_REAL_OR_SKIP(/*train=*/true, /*limit=*/0, &s);
  ASSERT_EQ(s.n, 60000);
  EXPECT_EQ(s.rows, 28);
  EXPECT_EQ(s.cols, 28);
  ASSERT_EQ(s.images.size(), size_t{60000 * 28 * 28});
  ASSERT_EQ(s.labels.size(), size_t{60000});
  EXPECT_EQ(std::vector<int32_t>(s.labels.begin(), s.labels.begin() + 5), (std::vector<int32_t>{9, 0, 0, 3, 0}));

  // Fashion-MNIST's train split is balanced: 6000 images per class.
  std::array<int64_t, kFashionMnistClasses> counts{};
  for (int32_t l : s.labels) ++counts[l];
  for (int c = 0; c < kFashionMnistClasses; ++c) EXPECT_EQ(counts[c], 6000) << "class " << c;

  // The normalisation constants are this split's statistics, so the result is ~N(0, 1) per pixel set.
  double sum = 0, sum_sq = 0;
  for (float v : s.images) {
    sum += v;
    sum_sq += double(v) * v;
  }
  const double mean = sum / s.images.size();
  const double std = std::sqrt(sum_sq / s.images.size() - mean * mean);
  EXPECT_LT(std::abs(mean), 0.01);
  EXPECT_NEAR(std, 1.0, 0.02);

  // Closed form on image 0, whose raw pixels sum to 76247: sum((p/255 - m)/s) = (76247/255 - 784 m) / s.
  double img0 = 0;
  for (int i = 0; i < 784; ++i) img0 += s.images[i];
  const double want = (76247.0 / 255.0 - 784.0 * kFashionMnistMean) / kFashionMnistStd;
  EXPECT_NEAR(img0, want, 1e-3);
}

TEST(FashionMnistTest, RealTestSplitAndLimit) {
  Split all, first;
  LOAD_REAL_OR_SKIP(/*train=*/false, /*limit=*/0, &all);
  EXPECT_EQ(all.n, 10000);
  EXPECT_EQ(all.labels.size(), size_t{10000});
  EXPECT_EQ(all.images.size(), size_t{10000 * 784});

  ASSERT_TRUE(LoadFashionMnist(kFashionMnistDir, false, 100, &first).ok());
  EXPECT_EQ(first.n, 100);
  EXPECT_EQ(first.labels, std::vector<int32_t>(all.labels.begin(), all.labels.begin() + 100));
  EXPECT_EQ(first.images, std::vector<float>(all.images.begin(), all.images.begin() + 100 * 784));

  Split capped;  // a limit above n keeps all n
  ASSERT_TRUE(LoadFashionMnist(kFashionMnistDir, false, 123456, &capped).ok());
  EXPECT_EQ(capped.n, 10000);
}

// --- small fixture directories -------------------------------------------------------------------

// Writes t10k files of `n_images` 2x3 images and the given labels (gzip unless plain).
void WriteSplit(const TempDir& dir, uint32_t n_images, const std::vector<uint8_t>& labels, bool plain = false) {
  std::vector<uint8_t> pixels(n_images * 6);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i % 2 ? 255 : 0);
  const auto images = IdxBytes(0x00000803, {n_images, 2, 3}, pixels);
  const auto label_file = IdxBytes(0x00000801, {static_cast<uint32_t>(labels.size())}, labels);
  WriteFile(dir.File(plain ? "t10k-images-idx3-ubyte" : "t10k-images-idx3-ubyte.gz"), plain ? images : Gzip(images));
  WriteFile(dir.File(plain ? "t10k-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte.gz"),
            plain ? label_file : Gzip(label_file));
}

TEST(FashionMnistTest, PlainFilesAndExactNormalisation) {
  TempDir dir;
  WriteSplit(dir, 3, {0, 9, 4}, /*plain=*/true);
  Split s;
  const Status st = LoadFashionMnist(dir.path(), false, 0, &s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.rows, 2);
  EXPECT_EQ(s.cols, 3);
  EXPECT_EQ(s.labels, (std::vector<int32_t>{0, 9, 4}));
  ASSERT_EQ(s.images.size(), size_t{18});
  const float lo = (0.0f - kFashionMnistMean) / kFashionMnistStd;  // pixel 0   -> -0.81020
  const float hi = (1.0f - kFashionMnistMean) / kFashionMnistStd;  // pixel 255 ->  2.02266
  EXPECT_NEAR(s.images[0], lo, 1e-5);
  EXPECT_NEAR(s.images[1], hi, 1e-5);
  EXPECT_NEAR(s.images[17], hi, 1e-5);
}

TEST(FashionMnistTest, MissingDirIsNotFound) {
  TempDir dir;
  Split s;
  const Status st = LoadFashionMnist(dir.File("absent"), true, 0, &s);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_TRUE(Contains(st.message(), dir.File("absent") + "/train-images-idx3-ubyte.gz")) << st.message();
  EXPECT_TRUE(Contains(st.message(), "apt-get install dataset-fashion-mnist")) << st.message();
}

TEST(FashionMnistTest, MissingLabelsFileIsNotFound) {
  TempDir dir;
  WriteSplit(dir, 2, {1, 2});
  std::filesystem::remove(dir.File("t10k-labels-idx1-ubyte.gz"));
  Split s;
  const Status st = LoadFashionMnist(dir.path(), false, 0, &s);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_TRUE(Contains(st.message(), "t10k-labels-idx1-ubyte.gz")) << st.message();
}

TEST(FashionMnistTest, CountMismatchIsDataLossNamingBothFiles) {
  TempDir dir;
  WriteSplit(dir, 5, {1, 2, 3, 4});
  Split s;
  const Status st = LoadFashionMnist(dir.path(), false, 0, &s);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), dir.File("t10k-images-idx3-ubyte.gz") + " holds 5 images")) << st.message();
  EXPECT_TRUE(Contains(st.message(), dir.File("t10k-labels-idx1-ubyte.gz") + " holds 4 labels")) << st.message();
  EXPECT_EQ(s.n, 0);
  EXPECT_TRUE(s.images.empty());
}

TEST(FashionMnistTest, LabelOutOfRangeIsDataLoss) {
  TempDir dir;
  WriteSplit(dir, 3, {1, 2, 10});
  Split s;
  const Status st = LoadFashionMnist(dir.path(), false, 0, &s);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), dir.File("t10k-labels-idx1-ubyte.gz"))) << st.message();
  EXPECT_TRUE(Contains(st.message(), "label 10 at index 2")) << st.message();
}

TEST(FashionMnistTest, WrongRankIsDataLoss) {
  TempDir dir;
  WriteSplit(dir, 2, {1, 2});
  // A labels-shaped (1-D) file where the images belong.
  WriteFile(dir.File("t10k-images-idx3-ubyte.gz"), Gzip(IdxBytes(0x00000801, {2}, {0, 0})));
  Split s;
  const Status st = LoadFashionMnist(dir.path(), false, 0, &s);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), dir.File("t10k-images-idx3-ubyte.gz"))) << st.message();
  EXPECT_TRUE(Contains(st.message(), "3-D")) << st.message();
}

TEST(FashionMnistTest, TruncatedImagesIsDataLoss) {
  TempDir dir;
  WriteSplit(dir, 4, {1, 2, 3, 4});
  std::vector<uint8_t> raw = IdxBytes(0x00000803, {4, 2, 3}, std::vector<uint8_t>(20, 0));  // 24 needed
  WriteFile(dir.File("t10k-images-idx3-ubyte.gz"), Gzip(raw));
  Split s;
  const Status st = LoadFashionMnist(dir.path(), false, 0, &s);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), dir.File("t10k-images-idx3-ubyte.gz"))) << st.message();
  EXPECT_TRUE(Contains(st.message(), "need 24 bytes, got 20")) << st.message();
}

}  // namespace
}  // namespace dtrain::data
