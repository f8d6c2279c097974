// RestoreSink on the CPU over real files: CheckpointManager::Load puts every file straight into its StateSlices —
// read directly into a host tensor that takes a whole file, through the staging buffers into slices of a file (a
// ZeRO-1 shard) — a file of another size goes to a host buffer of its own, and a load that fails after the state
// was written (a flipped byte, a truncated file) says so and names the file; bf16 state is narrowed and split masters
// are split on the way.

#include "runtime/train/restore_sink.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device_context.h"
#include "kernels/bf16_round.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::TempDir;

constexpr int64_t kNumel = 10000;  // 40,000 bytes: 10 chunks of 4 KiB
constexpr uint64_t kChunk = 4096;

std::vector<float> Values(int64_t n, float base) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = base + 0.25f * static_cast<float>(i);
  return v;
}

class RestoreSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CheckpointOptions o;
    o.restore_chunk_bytes = kChunk;
    o.restore_threads = 3;
    ASSERT_TRUE(CheckpointManager::Open("file://" + dir_.path(), {}, o, &mgr_).ok());
    for (Tensor* t : {&params_, &state_}) {
      ASSERT_TRUE(Tensor::Empty({kNumel}, DType::kF32, &alloc_, t).ok());
      ASSERT_TRUE(t->SetZero().ok());
    }
    proto::CheckpointManifest m;
    m.set_step(3);
    ASSERT_TRUE(mgr_->Save(m, {{"params.bin", saved_params_.data(), kNumel * 4, kNumel},
                               {"exp_avg.bin", saved_state_.data(), kNumel * 4, kNumel},
                               {"buffer.x.bin", saved_small_.data(), 12, 3}})
                    .ok());
  }
  std::unique_ptr<RestoreSink> Sink(std::vector<StateSlice> slices, size_t max_slots = 4) {
    std::unique_ptr<RestoreSink> sink;
    EXPECT_TRUE(RestoreSink::Create(std::move(slices), -1, &alloc_, kChunk, max_slots, &sink).ok());
    return sink;
  }
  void Corrupt(const std::string& file, int64_t at) {
    std::fstream f(dir_.path() + "/step-00000003/" + file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(at);
    f.put('\x55');
  }
  TempDir dir_;
  CpuAllocator alloc_;
  std::unique_ptr<CheckpointManager> mgr_;
  Tensor params_, state_;
  const std::vector<float> saved_params_ = Values(kNumel, 1.0f), saved_state_ = Values(kNumel, -7.0f),
                           saved_small_ = Values(3, 5.0f);
};

TEST_F(RestoreSinkTest, WholeFilesAreReadStraightIntoTheirTensors) {
  auto sink = Sink({{"params.bin", kNumel, 0, kNumel, &params_, 0}, {"exp_avg.bin", kNumel, 0, kNumel, &state_, 0}});
  LoadedCheckpoint ck;
  const Status st = mgr_->Load(3, &ck, sink.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(sink->Finish().ok());
  EXPECT_EQ(std::memcmp(params_.data(), saved_params_.data(), kNumel * 4), 0);
  EXPECT_EQ(std::memcmp(state_.data(), saved_state_.data(), kNumel * 4), 0);
  EXPECT_EQ(sink->in_place(), (std::set<std::string>{"params.bin", "exp_avg.bin"}));
  EXPECT_TRUE(sink->touched());
  EXPECT_EQ(sink->slots(), 0u);  // no staging: the reads went into the tensors
  // The file without slices: a host buffer of its own.
  const auto files = sink->Files();
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(files.at("buffer.x.bin").numel(), 3);
  EXPECT_EQ(std::memcmp(files.at("buffer.x.bin").data(), saved_small_.data(), 12), 0);
}

TEST_F(RestoreSinkTest, SlicesOfAFileGoThroughTheStagingBuffers) {
  // A shard as ZeRO-1 holds one: two ranges of exp_avg.bin (crossing chunk boundaries) packed one after the other,
  // with one staging buffer for three reader threads (they take turns).
  const int64_t a0 = 1000, an = 3000, b0 = 7001, bn = 2999;
  Tensor shard;
  ASSERT_TRUE(Tensor::Empty({an + bn}, DType::kF32, &alloc_, &shard).ok());
  ASSERT_TRUE(shard.SetZero().ok());
  auto sink = Sink({{"exp_avg.bin", kNumel, a0, an, &shard, 0}, {"exp_avg.bin", kNumel, b0, bn, &shard, an}},
                   /*max_slots=*/1);
  LoadedCheckpoint ck;
  const Status st = mgr_->Load(3, &ck, sink.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(sink->Finish().ok());
  EXPECT_EQ(sink->slots(), 1u);
  EXPECT_EQ(std::memcmp(shard.data<float>(), saved_state_.data() + a0, an * 4), 0);
  EXPECT_EQ(std::memcmp(shard.data<float>() + an, saved_state_.data() + b0, bn * 4), 0);
  EXPECT_EQ(sink->in_place(), (std::set<std::string>{"exp_avg.bin"}));
  EXPECT_EQ(sink->Files().count("params.bin"), 1u);
}

// bf16 state (optim.state_dtype bf16) from the f32 file: never read straight in, narrowed (round to nearest even) in
// the staging buffers, whole or as ZeRO-1 ranges.
TEST_F(RestoreSinkTest, Bf16SlicesAreNarrowedInTheStagingBuffers) {
  const int64_t a0 = 1000, an = 3000, b0 = 7001, bn = 2999;
  Tensor whole, shard;
  ASSERT_TRUE(Tensor::Empty({kNumel}, DType::kBF16, &alloc_, &whole).ok());
  ASSERT_TRUE(Tensor::Empty({an + bn}, DType::kBF16, &alloc_, &shard).ok());
  auto sink = Sink({{"params.bin", kNumel, 0, kNumel, &whole, 0},
                    {"exp_avg.bin", kNumel, a0, an, &shard, 0},
                    {"exp_avg.bin", kNumel, b0, bn, &shard, an}});
  LoadedCheckpoint ck;
  const Status st = mgr_->Load(3, &ck, sink.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(sink->Finish().ok());
  EXPECT_GE(sink->slots(), 1u);  // no direct read into a bf16 tensor
  auto narrow = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (finite values)
    return static_cast<uint16_t>(u >> 16);
  };
  for (int64_t i = 0; i < kNumel; ++i) ASSERT_EQ(whole.data<uint16_t>()[i], narrow(saved_params_[i])) << i;
  for (int64_t i = 0; i < an; ++i) ASSERT_EQ(shard.data<uint16_t>()[i], narrow(saved_state_[a0 + i])) << i;
  for (int64_t i = 0; i < bn; ++i) ASSERT_EQ(shard.data<uint16_t>()[an + i], narrow(saved_state_[b0 + i])) << i;
  EXPECT_EQ(sink->in_place(), (std::set<std::string>{"params.bin", "exp_avg.bin"}));
}

// Split masters (train.master_weights split): params.bin's f32 values split in the staging buffers into the bf16
// params (high halves) and the low halves, which join back to the file's values bit for bit. On the host here, into
// device tensors in CudaSplitMastersAreCopiedThroughPinnedStagingBuffers.
void ExpectSplitMasters(const std::vector<float>& saved, const std::vector<uint16_t>& hi,
                        const std::vector<uint16_t>& lo) {
  ASSERT_EQ(hi.size(), saved.size());
  int64_t differ = 0, low_set = 0;
  for (size_t i = 0; i < saved.size(); ++i) {
    const float joined = ops::JoinF32(hi[i], lo[i]);
    differ += std::memcmp(&joined, &saved[i], 4) != 0;
    uint16_t want_hi = 0, want_lo = 0;
    ops::SplitF32(saved[i], &want_hi, &want_lo);
    differ += hi[i] != want_hi;
    low_set += lo[i] != 0;
  }
  EXPECT_EQ(differ, 0);
  EXPECT_GT(low_set, 0);  // values beyond bf16's 8 bits: the low halves carry them
}

TEST_F(RestoreSinkTest, SplitMastersAreSplitInTheStagingBuffers) {
  Tensor hi, lo;
  ASSERT_TRUE(Tensor::Empty({kNumel}, DType::kBF16, &alloc_, &hi).ok());
  ASSERT_TRUE(Tensor::Empty({kNumel}, DType::kBF16, &alloc_, &lo).ok());
  StateSlice masters{"params.bin", kNumel, 0, kNumel, &hi, 0};
  masters.low = &lo;
  auto sink = Sink({masters, {"exp_avg.bin", kNumel, 0, kNumel, &state_, 0}});
  LoadedCheckpoint ck;
  const Status st = mgr_->Load(3, &ck, sink.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(sink->Finish().ok());
  EXPECT_EQ(sink->in_place(), (std::set<std::string>{"params.bin", "exp_avg.bin"}));
  ExpectSplitMasters(saved_params_, std::vector<uint16_t>(hi.data<uint16_t>(), hi.data<uint16_t>() + kNumel),
                     std::vector<uint16_t>(lo.data<uint16_t>(), lo.data<uint16_t>() + kNumel));
  EXPECT_EQ(std::memcmp(state_.data(), saved_state_.data(), kNumel * 4), 0);
  // Low halves go with bf16 params only, into one slice.
  std::unique_ptr<RestoreSink> bad;
  StateSlice f32{"params.bin", kNumel, 0, kNumel, &params_, 0};
  f32.low = &lo;
  EXPECT_EQ(RestoreSink::Create({f32}, -1, &alloc_, kChunk, 2, &bad).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RestoreSink::Create({masters, masters}, -1, &alloc_, kChunk, 2, &bad).code(),
            Status::Code::kInvalidArgument);
}

TEST_F(RestoreSinkTest, AFileOfAnotherSizeGoesToAHostBufferAndTouchesNothing) {
  Tensor small;
  ASSERT_TRUE(Tensor::Empty({kNumel - 1}, DType::kF32, &alloc_, &small).ok());
  auto sink = Sink({{"params.bin", kNumel - 1, 0, kNumel - 1, &small, 0}});
  LoadedCheckpoint ck;
  ASSERT_TRUE(mgr_->Load(3, &ck, sink.get()).ok());
  EXPECT_TRUE(sink->in_place().empty());  // the trainer's copy reports the size mismatch instead
  EXPECT_FALSE(sink->touched());
  EXPECT_EQ(sink->Files().at("params.bin").numel(), kNumel);
  proto::CheckpointManifest odd;
  proto::CheckpointFile* f = odd.add_files();
  f->set_name("odd.bin");
  f->set_size(6);
  const Status st = sink->Begin(odd);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("odd.bin: 6 bytes, not a whole number of f32 values"), std::string::npos);
}

TEST_F(RestoreSinkTest, AFailedLoadAfterTheStateWasWrittenSaysSoAndNamesTheFile) {
  for (size_t slots : {size_t{0}, size_t{2}}) {  // 0: the whole-file slice (direct); 2: slices through staging
    SCOPED_TRACE(slots);
    Corrupt("exp_avg.bin", kNumel * 4 - 1);
    auto sink =
        slots == 0
            ? Sink({{"params.bin", kNumel, 0, kNumel, &params_, 0}})
            : Sink({{"params.bin", kNumel, 0, 5000, &params_, 0}, {"params.bin", kNumel, 5000, 5000, &params_, 5000}},
                   slots);
    LoadedCheckpoint ck;
    const Status st = mgr_->Load(3, &ck, sink.get());
    EXPECT_EQ(st.code(), Status::Code::kDataLoss);
    EXPECT_NE(st.message().find("step-00000003/exp_avg.bin: CRC32C"), std::string::npos) << st.message();
    ASSERT_TRUE(sink->Finish().ok());
    EXPECT_TRUE(sink->touched());  // params.bin was read into the parameters before exp_avg.bin failed
  }
  // Truncated: named with both sizes before anything is read, so nothing is touched.
  ASSERT_EQ(::truncate((dir_.path() + "/step-00000003/params.bin").c_str(), kNumel * 4 - 4), 0);
  auto sink = Sink({{"params.bin", kNumel, 0, kNumel, &params_, 0}});
  LoadedCheckpoint ck;
  const Status st = mgr_->Load(3, &ck, sink.get());
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("params.bin: " + std::to_string(kNumel * 4 - 4) + " bytes, the manifest says " +
                              std::to_string(kNumel * 4)),
            std::string::npos)
      << st.message();
  EXPECT_FALSE(sink->touched());
}

// The GPU trainer's path: device tensors, every chunk through a pinned staging buffer and cudaMemcpyAsync, a whole
// file and a file's two ranges (a shard) alike; with 2 buffers for 3 reader threads they are reused after their
// copies.
TEST_F(RestoreSinkTest, CudaSlicesAreCopiedThroughPinnedStagingBuffers) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  CudaCachingAllocator device_alloc(0);
  CpuAllocator pinned(/*pinned=*/true);
  Tensor params, shard;
  ASSERT_TRUE(Tensor::Empty({kNumel}, DType::kF32, &device_alloc, &params).ok());
  ASSERT_TRUE(Tensor::Empty({6000}, DType::kF32, &device_alloc, &shard).ok());
  std::unique_ptr<RestoreSink> sink;
  ASSERT_TRUE(RestoreSink::Create({{"params.bin", kNumel, 0, kNumel, &params, 0},
                                   {"exp_avg.bin", kNumel, 0, 3000, &shard, 3000},
                                   {"exp_avg.bin", kNumel, 7000, 3000, &shard, 0}},
                                  0, &pinned, kChunk, 2, &sink)
                  .ok());
  LoadedCheckpoint ck;
  const Status st = mgr_->Load(3, &ck, sink.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(sink->Finish().ok());
  EXPECT_EQ(sink->slots(), 2u);
  EXPECT_EQ(sink->in_place(), (std::set<std::string>{"params.bin", "exp_avg.bin"}));
  std::vector<float> p(kNumel), sh(6000);
  ASSERT_TRUE(Tensor::Wrap(p.data(), {kNumel}, DType::kF32, DeviceType::kCPU).CopyFrom(params).ok());
  ASSERT_TRUE(Tensor::Wrap(sh.data(), {6000}, DType::kF32, DeviceType::kCPU).CopyFrom(shard).ok());
  EXPECT_EQ(p, saved_params_);
  EXPECT_EQ(std::vector<float>(sh.begin(), sh.begin() + 3000),
            std::vector<float>(saved_state_.begin() + 7000, saved_state_.end()));
  EXPECT_EQ(std::vector<float>(sh.begin() + 3000, sh.end()),
            std::vector<float>(saved_state_.begin(), saved_state_.begin() + 3000));
}

TEST_F(RestoreSinkTest, CudaSplitMastersAreCopiedThroughPinnedStagingBuffers) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  CudaCachingAllocator device_alloc(0);
  CpuAllocator pinned(/*pinned=*/true);
  Tensor hi, lo;
  ASSERT_TRUE(Tensor::Empty({kNumel}, DType::kBF16, &device_alloc, &hi).ok());
  ASSERT_TRUE(Tensor::Empty({kNumel}, DType::kBF16, &device_alloc, &lo).ok());
  StateSlice masters{"params.bin", kNumel, 0, kNumel, &hi, 0};
  masters.low = &lo;
  std::unique_ptr<RestoreSink> sink;
  ASSERT_TRUE(RestoreSink::Create({masters}, 0, &pinned, kChunk, 2, &sink).ok());
  LoadedCheckpoint ck;
  const Status st = mgr_->Load(3, &ck, sink.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(sink->Finish().ok());
  std::vector<uint16_t> h(kNumel), l(kNumel);
  ASSERT_TRUE(Tensor::Wrap(h.data(), {kNumel}, DType::kBF16, DeviceType::kCPU).CopyFrom(hi).ok());
  ASSERT_TRUE(Tensor::Wrap(l.data(), {kNumel}, DType::kBF16, DeviceType::kCPU).CopyFrom(lo).ok());
  ExpectSplitMasters(saved_params_, h, l);
}

TEST_F(RestoreSinkTest, AChunkLargerThanTheStagingBuffersIsRefused) {
  std::unique_ptr<RestoreSink> sink;
  ASSERT_TRUE(
      RestoreSink::Create({{"params.bin", kNumel, 1, kNumel - 1, &params_, 1}}, -1, &alloc_, kChunk / 2, 2, &sink)
          .ok());
  LoadedCheckpoint ck;
  const Status st = mgr_->Load(3, &ck, sink.get());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("a chunk of 4096 bytes, the slots hold 2048"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace dtrain::runtime
