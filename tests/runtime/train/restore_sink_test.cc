// RestoreSink on the CPU: CheckpointManager::Load into it gives every file's bytes, params.bin copied into the
// parameters chunk by chunk during the load, reused buffers taken where name and size match, and a load that fails
// after the parameters were written is reported as having touched them.

#include "runtime/train/restore_sink.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device_context.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::TempDir;

constexpr int64_t kNumel = 10000;  // 40,000 bytes: 10 chunks of 4 KiB

std::vector<float> Values(int64_t n, float base) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = base + 0.25f * static_cast<float>(i);
  return v;
}

class RestoreSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CheckpointOptions o;
    o.restore_chunk_bytes = 4096;
    o.restore_threads = 3;
    ASSERT_TRUE(CheckpointManager::Open("file://" + dir_.path(), {}, o, &mgr_).ok());
    ASSERT_TRUE(Tensor::Empty({kNumel}, DType::kF32, &alloc_, &params_).ok());
    std::memset(params_.data(), 0, kNumel * sizeof(float));
    proto::CheckpointManifest m;
    m.set_step(3);
    ASSERT_TRUE(mgr_->Save(m, {{"params.bin", saved_params_.data(), kNumel * 4, kNumel},
                               {"exp_avg.bin", saved_state_.data(), kNumel * 4, kNumel}})
                    .ok());
  }
  TempDir dir_;
  CpuAllocator alloc_{/*pinned=*/CudaDeviceCount() > 0};  // page-locking needs a driver, as in DeviceContext
  std::unique_ptr<CheckpointManager> mgr_;
  Tensor params_;
  const std::vector<float> saved_params_ = Values(kNumel, 1.0f), saved_state_ = Values(kNumel, -7.0f);
};

TEST_F(RestoreSinkTest, LoadFillsTheBuffersAndCopiesTheParametersDuringTheReads) {
  // A reusable buffer for exp_avg.bin (name and size match) and one that matches nothing.
  Tensor reuse_state, reuse_other;
  ASSERT_TRUE(Tensor::Empty({kNumel}, DType::kF32, &alloc_, &reuse_state).ok());
  ASSERT_TRUE(Tensor::Empty({5}, DType::kF32, &alloc_, &reuse_other).ok());
  int reuse_calls = 0;
  std::unique_ptr<RestoreSink> sink;
  ASSERT_TRUE(RestoreSink::Create(
                  &params_, -1, &alloc_,
                  [&] {
                    ++reuse_calls;
                    return RestoreSink::Buffers{{"exp_avg.bin", reuse_state}, {"x.bin", reuse_other}};
                  },
                  &sink)
                  .ok());
  EXPECT_EQ(reuse_calls, 0);  // nothing taken before there is something to load
  LoadedCheckpoint ck;
  Status st = mgr_->Load(3, &ck, sink.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(sink->Finish().ok());
  EXPECT_EQ(reuse_calls, 1);
  EXPECT_TRUE(sink->params_copied());
  EXPECT_TRUE(sink->touched_params());
  EXPECT_EQ(std::memcmp(params_.data(), saved_params_.data(), kNumel * 4), 0);
  const auto files = sink->Files();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files.at("exp_avg.bin").data(), reuse_state.data());  // the reused buffer
  EXPECT_EQ(std::memcmp(files.at("exp_avg.bin").data(), saved_state_.data(), kNumel * 4), 0);
  EXPECT_EQ(std::memcmp(files.at("params.bin").data(), saved_params_.data(), kNumel * 4), 0);
  // Every buffer handed back, the loaded ones first in manifest order, then the unused spare.
  const RestoreSink::Buffers back = sink->TakeBuffers();
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].first, "params.bin");
  EXPECT_EQ(back[1].first, "exp_avg.bin");
  EXPECT_EQ(back[2].first, "x.bin");
}

TEST_F(RestoreSinkTest, FailedLoadAfterTheParametersWereWrittenSaysSo) {
  const std::string path = dir_.path() + "/step-00000003/exp_avg.bin";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kNumel * 4 - 1);
    f.put('\x55');
  }
  std::unique_ptr<RestoreSink> sink;
  ASSERT_TRUE(RestoreSink::Create(&params_, -1, &alloc_, nullptr, &sink).ok());
  LoadedCheckpoint ck;
  const Status st = mgr_->Load(3, &ck, sink.get());
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("exp_avg.bin: CRC32C"), std::string::npos) << st.message();
  ASSERT_TRUE(sink->Finish().ok());
  EXPECT_TRUE(sink->touched_params());  // params.bin was read and copied before exp_avg.bin failed
}

TEST_F(RestoreSinkTest, ParametersOfAnotherSizeAreNotCopiedAndPartialFloatsAreDataLoss) {
  Tensor small;
  ASSERT_TRUE(Tensor::Empty({kNumel - 1}, DType::kF32, &alloc_, &small).ok());
  std::unique_ptr<RestoreSink> sink;
  ASSERT_TRUE(RestoreSink::Create(&small, -1, &alloc_, nullptr, &sink).ok());
  LoadedCheckpoint ck;
  ASSERT_TRUE(mgr_->Load(3, &ck, sink.get()).ok());
  EXPECT_FALSE(sink->params_copied());  // the trainer's copy reports the size mismatch instead
  EXPECT_FALSE(sink->touched_params());
  proto::CheckpointFile odd;
  odd.set_name("odd.bin");
  odd.set_size(6);
  char* out = nullptr;
  const Status st = sink->Buffer(0, odd, &out);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("odd.bin: 6 bytes, not a whole number of f32 values"), std::string::npos);
}

}  // namespace
}  // namespace dtrain::runtime
