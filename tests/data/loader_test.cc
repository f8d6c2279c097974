#include "data/loader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "data/convert.h"
#include "data/fashion_mnist.h"
#include "tests/data/data_fixture.h"
#include "tests/data/idx_fixture.h"

namespace dtrain::data {
namespace {

using fixture::TempDir;

// Runs f on a thread; a hang (a deadlocked loader or a join that never returns) fails the test
// and ends the process instead of stalling the suite.
template <typename F>
void WithTimeout(int seconds, F f) {
  std::packaged_task<void()> task(f);
  auto done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(std::chrono::seconds(seconds)) == std::future_status::timeout) {
    std::fprintf(stderr, "test hung for %d s (loader deadlock?)\n", seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  t.join();
}

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

// Fashion-MNIST t10k converted to shards in a temp dir, plus the reference Split (skips without the data).
class FashionLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
    }
    ASSERT_TRUE(ConvertFashionMnist(kFashionMnistDir, "t10k", dir_.path(), 3000, 0).ok());
    ASSERT_TRUE(LoadFashionMnist(kFashionMnistDir, /*train=*/false, 0, &ref_).ok());
  }
  LoaderOptions Opts() const {
    LoaderOptions o;
    o.dataset_dir = dir_.path();
    o.batch_size = 64;
    o.rank = 1;
    o.world = 3;
    o.seed = 7;
    o.remainder = RemainderPolicy::kPad;
    o.num_threads = 4;
    o.prefetch_depth = 3;
    return o;
  }
  // Checks b's rows against the reference images/labels (loader: p * 1/(255 std) - mean/std,
  // reference: (p/255 - mean)/std; the two roundings differ by < 1e-5).
  void ExpectContents(const Batch& b) const {
    ASSERT_EQ(b.inputs.shape(), (std::vector<int64_t>{64, 28, 28}));
    ASSERT_EQ(b.targets.shape(), (std::vector<int64_t>{64}));
    const float* x = b.inputs.data<float>();
    for (size_t j = 0; j < b.indices.size(); ++j) {
      const int64_t i = b.indices[j];
      EXPECT_EQ(b.targets.data<int32_t>()[j], ref_.labels[i]);
      for (int p = 0; p < 784; p += 13) ASSERT_NEAR(x[j * 784 + p], ref_.images[i * 784 + p], 1e-5) << i << "," << p;
    }
  }
  TempDir dir_;
  Split ref_;
};

TEST_F(FashionLoaderTest, FourThreadsDeliverSamplerOrderWithCorrectContents) {
  auto ctx = Cpu();
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Create(Opts(), ctx.get(), &loader).ok());
  EXPECT_EQ(loader->dataset().size(), 10000);
  EXPECT_EQ(loader->batches_per_epoch(), 53);  // ceil(10000 / 192)
  SamplerOptions so{10000, 64, 1, 3, 7, true, RemainderPolicy::kPad};
  Sampler ref;
  ASSERT_TRUE(Sampler::Create(so, &ref).ok());
  SampleBatch want;
  for (int step = 0; step < 60; ++step) {  // crosses into epoch 1
    Batch b;
    ASSERT_TRUE(loader->Next(&b).ok());
    ref.Next(&want);
    ASSERT_EQ(b.indices, want.indices) << "step " << step;
    EXPECT_EQ(b.epoch, want.epoch);
    EXPECT_EQ(b.num_real, want.num_real);
    EXPECT_EQ(loader->state().consumed, ref.state().consumed);
    EXPECT_GE(b.wait_seconds, 0.0);
    ExpectContents(b);
  }
  EXPECT_EQ(loader->state().epoch, 1);
  EXPECT_EQ(loader->stats().batches, 60);
}

TEST_F(FashionLoaderTest, ResumeMidEpochContinuesWithTheSameBatches) {
  auto ctx = Cpu();
  std::unique_ptr<Loader> a, b;
  ASSERT_TRUE(Loader::Create(Opts(), ctx.get(), &a).ok());
  Batch x, y;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(a->Next(&x).ok());
  const SamplerState st = a->state();
  EXPECT_EQ(st.consumed, 10 * 192);
  ASSERT_TRUE(Loader::Create(Opts(), ctx.get(), &b).ok());
  ASSERT_TRUE(b->Next(&y).ok());  // prefetching from the start, then a restore drops all of it
  ASSERT_TRUE(b->Restore(st).ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(a->Next(&x).ok());
    ASSERT_TRUE(b->Next(&y).ok());
    ASSERT_EQ(x.indices, y.indices);
    ExpectContents(y);
  }
  // At world size 2 the continuation is the sampler's, from the same position.
  LoaderOptions o2 = Opts();
  o2.world = 2;
  o2.rank = 0;
  std::unique_ptr<Loader> c;
  ASSERT_TRUE(Loader::Create(o2, ctx.get(), &c).ok());
  ASSERT_TRUE(c->Restore(st).ok());
  Sampler ref;
  ASSERT_TRUE(Sampler::Create({10000, 64, 0, 2, 7, true, RemainderPolicy::kPad}, &ref).ok());
  ASSERT_TRUE(ref.Restore(st).ok());
  SampleBatch want;
  ASSERT_TRUE(c->Next(&y).ok());
  ref.Next(&want);
  EXPECT_EQ(y.indices, want.indices);
  EXPECT_EQ(want.position, st.consumed);
}

// The sample record (DTRAIN_SAMPLE_LOG's file) holds what Next() handed out, not what the readers prefetched: one
// line per batch, "EPOCH POSITION NUM_REAL" and the real samples (the kPad repeats of the epoch's last batch left out).
TEST_F(FashionLoaderTest, SampleLogRecordsEachDeliveredBatch) {
  auto ctx = Cpu();
  LoaderOptions o = Opts();
  o.rank = 0;
  o.sample_log = dir_.path() + "/samples.txt";
  std::vector<Batch> got;
  {
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(Loader::Create(o, ctx.get(), &loader).ok());
    ASSERT_TRUE(loader->Restore({7, 0, 52 * 192}).ok());  // the epoch's last batch: 16 real samples, on rank 0
    for (int i = 0; i < 2; ++i) {
      got.emplace_back();
      ASSERT_TRUE(loader->Next(&got.back()).ok());
    }
  }
  std::ifstream f(o.sample_log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);  // prefetched batches are not in it
  EXPECT_EQ(got[0].position, 52 * 192);
  EXPECT_EQ(got[0].num_real, 10000 - 52 * 192);
  std::string want = "0 " + std::to_string(52 * 192) + " " + std::to_string(got[0].num_real);
  for (int64_t j = 0; j < got[0].num_real; ++j) want += " " + std::to_string(got[0].indices[j]);
  EXPECT_EQ(lines[0], want);
  EXPECT_EQ(got[1].epoch, 1);
  EXPECT_EQ(lines[1].rfind("1 0 64 ", 0), 0u) << lines[1];
}

TEST_F(FashionLoaderTest, AugmentationIsDeterministicPerSample) {
  auto ctx = Cpu();
  LoaderOptions o = Opts();
  o.augment = RandomCropFlip(4, true, -kFashionMnistMean / kFashionMnistStd);
  std::unique_ptr<Loader> a, b;
  ASSERT_TRUE(Loader::Create(o, ctx.get(), &a).ok());
  o.num_threads = 1;  // a different thread count must not change anything
  ASSERT_TRUE(Loader::Create(o, ctx.get(), &b).ok());
  int64_t changed = 0;
  for (int i = 0; i < 3; ++i) {
    Batch x, y;
    ASSERT_TRUE(a->Next(&x).ok());
    ASSERT_TRUE(b->Next(&y).ok());
    ASSERT_EQ(0, std::memcmp(x.inputs.data(), y.inputs.data(), x.inputs.nbytes()));
    for (int64_t k = 0; k < x.inputs.numel(); ++k) {
      changed += std::fabs(x.inputs.data<float>()[k] - ref_.images[x.indices[k / 784] * 784 + k % 784]) > 1e-5f;
    }
  }
  EXPECT_GT(changed, 3 * 64 * 784 / 4);  // most pixels moved (shift and/or flip)
}

TEST(RandomCropFlipTest, OutputIsAShiftedOrMirroredWindowWithFill) {
  const int64_t h = 5, w = 6;
  std::vector<float> src(h * w);
  for (int64_t k = 0; k < h * w; ++k) src[k] = static_cast<float>(k + 1);
  const auto aug = RandomCropFlip(2, true, -1.0f);
  int flips = 0;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    std::vector<float> img = src;
    SplitMix64 rng(seed);
    aug(img.data(), 1, h, w, &rng);
    // Exactly one (dy, dx, flip) explains every output pixel.
    int matches = 0;
    for (int f = 0; f < 2; ++f) {
      for (int64_t dy = -2; dy <= 2; ++dy) {
        for (int64_t dx = -2; dx <= 2; ++dx) {
          bool ok = true;
          for (int64_t y = 0; y < h && ok; ++y) {
            for (int64_t x = 0; x < w && ok; ++x) {
              const int64_t sy = y + dy, sx = (f ? w - 1 - x : x) + dx;
              const float want = (sy < 0 || sy >= h || sx < 0 || sx >= w) ? -1.0f : src[sy * w + sx];
              ok = img[y * w + x] == want;
            }
          }
          if (ok) {
            ++matches;
            flips += f;
          }
        }
      }
    }
    EXPECT_EQ(matches, 1) << "seed " << seed;
  }
  EXPECT_GT(flips, 16);  // about half of 64
  EXPECT_LT(flips, 48);
}

TEST(LoaderTest, TokenBatchesAreShiftedByOne) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>('a' + (i * 7) % 26));
  std::ofstream(dir.File("t.txt"), std::ios::binary) << text;
  TextConvertOptions tc;
  tc.seq_len = 16;
  tc.samples_per_shard = 10;
  tc.dtype = proto::DatasetSchema::UINT32;
  TextConvertResult r;
  ASSERT_TRUE(ConvertText({dir.File("t.txt")}, dir.File("ds"), tc, &r).ok());
  EXPECT_EQ(r.dropped_tokens, 1000 - (62 * 16 + 1));  // (1000 - 1) / 16 = 62 records
  auto ctx = Cpu();
  LoaderOptions o;
  o.dataset_dir = dir.File("ds");
  o.batch_size = 4;
  o.shuffle = false;
  o.num_threads = 2;
  std::unique_ptr<Loader> l;
  ASSERT_TRUE(Loader::Create(o, ctx.get(), &l).ok());
  EXPECT_EQ(l->dataset().size(), 62);
  for (int step = 0; step < 3; ++step) {
    Batch b;
    ASSERT_TRUE(l->Next(&b).ok());
    ASSERT_EQ(b.inputs.shape(), (std::vector<int64_t>{4, 16}));
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t r = step * 4 + j;
      EXPECT_EQ(b.indices[j], r);
      for (int64_t t = 0; t < 16; ++t) {
        EXPECT_EQ(b.inputs.data<int32_t>()[j * 16 + t], static_cast<uint8_t>(text[r * 16 + t]));
        EXPECT_EQ(b.targets.data<int32_t>()[j * 16 + t], static_cast<uint8_t>(text[r * 16 + t + 1]));
      }
    }
  }
}

TEST(LoaderTest, ShardTruncatedAfterOpenSurfacesFromNextAndShutdownJoins) {
  TempDir dir;
  fixture::WriteImageDataset(dir.path(), 2000, 8, 8, 500);
  const std::string victim = dir.File("shard-00002.dts");
  WithTimeout(30, [&] {
    auto ctx = Cpu();
    LoaderOptions o;
    o.dataset_dir = dir.path();
    o.batch_size = 16;
    o.num_threads = 4;
    o.prefetch_depth = 2;
    std::unique_ptr<Loader> l;
    ASSERT_TRUE(Loader::Create(o, ctx.get(), &l).ok());
    std::filesystem::resize_file(victim, std::filesystem::file_size(victim) / 2);
    Status st;
    Batch b;
    for (int i = 0; i < 125 && st.ok(); ++i) st = l->Next(&b);  // one epoch touches every shard
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
    EXPECT_NE(st.message().find(victim), std::string::npos) << st.ToString();
    const Status again = l->Next(&b);  // the error sticks
    EXPECT_EQ(again.code(), Status::Code::kDataLoss);
    l.reset();  // joins all readers (the timeout guard catches a hang)
  });
}

TEST(LoaderTest, DestroyWhileReadersWaitForFreeSlots) {
  TempDir dir;
  fixture::WriteImageDataset(dir.path(), 300, 4, 4, 100);
  WithTimeout(30, [&] {
    auto ctx = Cpu();
    LoaderOptions o;
    o.dataset_dir = dir.path();
    o.batch_size = 8;
    o.num_threads = 8;  // more threads than slots: most wait on the pool
    o.prefetch_depth = 1;
    std::unique_ptr<Loader> l;
    ASSERT_TRUE(Loader::Create(o, ctx.get(), &l).ok());
    Batch b;
    ASSERT_TRUE(l->Next(&b).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    l.reset();
  });
}

TEST(LoaderTest, BadOptionsAndMissingDataset) {
  TempDir dir;
  fixture::WriteImageDataset(dir.path(), 10, 2, 2, 10);
  auto ctx = Cpu();
  LoaderOptions o;
  o.dataset_dir = dir.path();
  o.batch_size = 4;
  std::unique_ptr<Loader> l;
  o.num_threads = 0;
  EXPECT_EQ(Loader::Create(o, ctx.get(), &l).code(), Status::Code::kInvalidArgument);
  o.num_threads = 1;
  o.world = 3;  // 10 samples make no global batch of 12 under kDrop
  Status st = Loader::Create(o, ctx.get(), &l);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find(dir.path()), std::string::npos) << st.ToString();
  o.world = 1;
  o.device_buffers = 1;
  st = Loader::Create(o, ctx.get(), &l);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("device_buffers 1"), std::string::npos) << st.ToString();
  o.device_buffers = 2;
  o.dataset_dir = dir.File("missing");
  EXPECT_EQ(Loader::Create(o, ctx.get(), &l).code(), Status::Code::kNotFound);
}

// LoaderOptions::limit: an epoch is the first `limit` samples (sampled, shuffled and padded within them), the position
// restores inside them, and a limit above the dataset's size takes it all.
TEST(LoaderTest, LimitMakesTheEpochItsFirstSamples) {
  TempDir dir;
  fixture::WriteImageDataset(dir.path(), 100, 2, 2, 40);
  auto ctx = Cpu();
  LoaderOptions o;
  o.dataset_dir = dir.path();
  o.batch_size = 4;
  o.world = 2;
  o.rank = 1;
  o.num_threads = 2;
  o.limit = 30;  // 3 global batches of 8 (the last 6 dropped)
  std::unique_ptr<Loader> l;
  ASSERT_TRUE(Loader::Create(o, ctx.get(), &l).ok());
  EXPECT_EQ(l->num_samples(), 30);
  EXPECT_EQ(l->dataset().size(), 100);
  EXPECT_EQ(l->batches_per_epoch(), 3);
  std::vector<int64_t> seen;
  for (int k = 0; k < 3; ++k) {
    Batch b;
    ASSERT_TRUE(l->Next(&b).ok());
    EXPECT_EQ(b.epoch, 0);
    for (int64_t i : b.indices) {
      EXPECT_LT(i, 30);
      seen.push_back(i);
    }
  }
  Batch next;
  ASSERT_TRUE(l->Next(&next).ok());
  EXPECT_EQ(next.epoch, 1);  // the epoch is 30 samples long
  // Restoring the position after the first batch gives the same second batch as before.
  const SamplerState after_one{o.seed, 0, 8};
  ASSERT_TRUE(l->Restore(after_one).ok());
  Batch again;
  ASSERT_TRUE(l->Next(&again).ok());
  EXPECT_EQ(again.indices, std::vector<int64_t>(seen.begin() + 4, seen.begin() + 8));
  o.limit = 1000;
  ASSERT_TRUE(Loader::Create(o, ctx.get(), &l).ok());
  EXPECT_EQ(l->num_samples(), 100);
  o.limit = -1;
  EXPECT_EQ(Loader::Create(o, ctx.get(), &l).code(), Status::Code::kInvalidArgument);
}

// GPU: batches arrive on the device, equal to the CPU loader's (bit-exact: same decode on the host).
TEST_F(FashionLoaderTest, CudaBatchesEqualCpuBatches) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the H2D copy-stream path needs a GPU";
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  auto cpu = Cpu();
  std::unique_ptr<Loader> lg, lc;
  ASSERT_TRUE(Loader::Create(Opts(), gpu.get(), &lg).ok());
  ASSERT_TRUE(Loader::Create(Opts(), cpu.get(), &lc).ok());
  for (int step = 0; step < 20; ++step) {
    Batch g, c;
    ASSERT_TRUE(lg->Next(&g).ok());
    ASSERT_TRUE(lc->Next(&c).ok());
    ASSERT_TRUE(g.inputs.is_cuda());
    Tensor host_in, host_tg;
    ASSERT_TRUE(Tensor::Empty(g.inputs.shape(), g.inputs.dtype(), cpu->host_allocator(), &host_in).ok());
    ASSERT_TRUE(Tensor::Empty(g.targets.shape(), g.targets.dtype(), cpu->host_allocator(), &host_tg).ok());
    // Copies on the compute stream, which waits for the loader's copy event.
    ASSERT_TRUE(host_in.CopyFrom(g.inputs, gpu->stream()).ok());
    ASSERT_TRUE(host_tg.CopyFrom(g.targets, gpu->stream()).ok());
    ASSERT_TRUE(gpu->Synchronize().ok());
    EXPECT_EQ(0, std::memcmp(host_in.data(), c.inputs.data(), c.inputs.nbytes())) << "step " << step;
    EXPECT_EQ(0, std::memcmp(host_tg.data(), c.targets.data(), c.targets.nbytes())) << "step " << step;
  }
}

// GPU: with device_buffers = 4 a batch stays valid for 3 later Next() calls (a graphed step of 3 micro-batches takes
// all of them before queueing work), also across a Restore that drops a batch copied ahead.
TEST_F(FashionLoaderTest, CudaDeviceBuffersHoldBatchesForTheContractedCalls) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the H2D copy-stream path needs a GPU";
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  auto cpu = Cpu();
  LoaderOptions o = Opts();
  o.device_buffers = 4;
  std::unique_ptr<Loader> lg, lc;
  ASSERT_TRUE(Loader::Create(o, gpu.get(), &lg).ok());
  ASSERT_TRUE(Loader::Create(o, cpu.get(), &lc).ok());
  SamplerState mark;
  for (int group = 0; group < 12; ++group) {
    if (group == 6) {  // back to where group 4 started: the batch copied ahead is dropped
      ASSERT_TRUE(lg->Restore(mark).ok());
      ASSERT_TRUE(lc->Restore(mark).ok());
    }
    if (group == 4) mark = lg->state();
    Batch g[3];
    for (Batch& b : g) ASSERT_TRUE(lg->Next(&b).ok());
    // Only now is work queued on the three batches: copies to the host on the compute stream.
    std::vector<std::vector<float>> in(3);
    std::vector<std::vector<int32_t>> tg(3);
    for (int i = 0; i < 3; ++i) {
      in[i].resize(static_cast<size_t>(g[i].inputs.numel()));
      tg[i].resize(static_cast<size_t>(g[i].targets.numel()));
      Tensor hi = Tensor::Wrap(in[i].data(), g[i].inputs.shape(), DType::kF32, DeviceType::kCPU);
      Tensor ht = Tensor::Wrap(tg[i].data(), g[i].targets.shape(), DType::kI32, DeviceType::kCPU);
      ASSERT_TRUE(hi.CopyFrom(g[i].inputs, gpu->stream()).ok());
      ASSERT_TRUE(ht.CopyFrom(g[i].targets, gpu->stream()).ok());
    }
    ASSERT_TRUE(gpu->Synchronize().ok());
    for (int i = 0; i < 3; ++i) {
      Batch c;
      ASSERT_TRUE(lc->Next(&c).ok());
      ASSERT_EQ(g[i].indices, c.indices) << "group " << group << " batch " << i;
      EXPECT_EQ(0, std::memcmp(in[i].data(), c.inputs.data(), c.inputs.nbytes())) << "group " << group << " " << i;
      EXPECT_EQ(0, std::memcmp(tg[i].data(), c.targets.data(), c.targets.nbytes())) << "group " << group << " " << i;
    }
  }
}

}  // namespace
}  // namespace dtrain::data
