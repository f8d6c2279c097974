// CudaGraph and its memory pool (core/cuda_graph.h) with the caching allocator (core/allocator.h): the blocks a
// capture allocates and frees stay in the pool (no later allocation and no other thread gets them while a graph
// lives), a second graph captured into the same pool reuses them instead of holding its own, both replay what they
// captured, and the blocks go back to the cache with the last graph; a capture that keeps a block of its pool is
// refused. GPU only.
#include <gtest/gtest.h>

#if DT_HAVE_CUDA
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/cuda_graph.h"
#include "core/device_context.h"

namespace dtrain {
namespace {

constexpr size_t kTemp = 1 << 20, kOut = 4096;

class CudaGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: graph capture needs a GPU";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    alloc_ = std::make_unique<CudaCachingAllocator>(0);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  // A step-like body: a temporary block filled with `value`, its first kOut bytes copied to `out`, then freed.
  std::function<Status()> Body(uint8_t value, void* out, void** temp) {
    return [this, value, out, temp]() -> Status {
      if (Status st = alloc_->Allocate(kTemp, temp); !st.ok()) return st;
      if (cudaMemsetAsync(*temp, value, kTemp, stream_) != cudaSuccess ||
          cudaMemcpyAsync(out, *temp, kOut, cudaMemcpyDeviceToDevice, stream_) != cudaSuccess) {
        return Status::Internal("memset/memcpy during capture");
      }
      alloc_->Free(*temp);
      return Status::OK();
    };
  }
  std::vector<uint8_t> Fetch(void* dev) {
    std::vector<uint8_t> h(kOut);
    EXPECT_EQ(cudaMemcpy(h.data(), dev, kOut, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaCachingAllocator> alloc_;
};

TEST_F(CudaGraphTest, PoolHoldsCaptureBlocksAndSharesThemBetweenGraphs) {
  void *out1, *out2, *temp1 = nullptr, *temp2 = nullptr, *temp3 = nullptr;
  ASSERT_TRUE(alloc_->Allocate(kOut, &out1).ok());
  ASSERT_TRUE(alloc_->Allocate(kOut, &out2).ok());
  auto pool = std::make_shared<CudaGraphPool>(alloc_.get());
  std::unique_ptr<CudaGraph> g1, g2, g3;
  const int64_t outs = alloc_->stats().bytes_in_use,
                held = static_cast<int64_t>(CudaCachingAllocator::RoundSize(kTemp));
  ASSERT_TRUE(CudaGraph::Capture(stream_, pool, Body(1, out1, &temp1), &g1).ok());
  EXPECT_EQ(pool->bytes(), CudaCachingAllocator::RoundSize(kTemp));
  // What the graphs hold counts as in use (the trainer's peak memory shows it).
  EXPECT_EQ(alloc_->stats().bytes_in_use, outs + held);
  // The held block is nobody else's while the graph lives.
  void* other = nullptr;
  ASSERT_TRUE(alloc_->Allocate(kTemp, &other).ok());
  EXPECT_NE(other, temp1);
  alloc_->Free(other);
  // A second graph in the pool takes the first one's block: nothing more is held.
  ASSERT_TRUE(CudaGraph::Capture(stream_, pool, Body(2, out2, &temp2), &g2).ok());
  EXPECT_EQ(temp2, temp1);
  EXPECT_EQ(pool->bytes(), CudaCachingAllocator::RoundSize(kTemp));
  EXPECT_EQ(alloc_->stats().bytes_in_use, outs + held);
  // Another thread allocating during a capture gets a block of the cache, not the capture's.
  void* from_thread = nullptr;
  auto body3 = Body(3, out2, &temp3);
  ASSERT_TRUE(CudaGraph::Capture(
                  stream_, pool,
                  [&]() -> Status {
                    Status st = body3();  // temp3 is free again, in the capture's own list
                    std::thread t([&] { st = alloc_->Allocate(kTemp, &from_thread); });
                    t.join();
                    return st;
                  },
                  &g3)
                  .ok());
  EXPECT_EQ(temp3, temp1);
  EXPECT_NE(from_thread, temp1);
  alloc_->Free(from_thread);
  g3.reset();
  // Replays write what each graph captured, through the shared block.
  ASSERT_TRUE(g1->Launch(stream_).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(Fetch(out1), std::vector<uint8_t>(kOut, 1));
  ASSERT_TRUE(g2->Launch(stream_).ok());
  ASSERT_TRUE(g1->Launch(stream_).ok());
  ASSERT_TRUE(g2->Launch(stream_).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(Fetch(out1), std::vector<uint8_t>(kOut, 1));
  EXPECT_EQ(Fetch(out2), std::vector<uint8_t>(kOut, 2));
  // The block stays held until the pool's last graph is gone, then it is the cache's again.
  g1.reset();
  pool.reset();
  ASSERT_TRUE(alloc_->Allocate(kTemp, &other).ok());
  EXPECT_NE(other, temp1);
  alloc_->Free(other);
  g2.reset();
  EXPECT_EQ(alloc_->stats().bytes_in_use, outs);
  void* again = nullptr;  // the cache has two free blocks of this size now: `other` and the graphs' one
  ASSERT_TRUE(alloc_->Allocate(kTemp, &other).ok());
  ASSERT_TRUE(alloc_->Allocate(kTemp, &again).ok());
  EXPECT_TRUE(other == temp1 || again == temp1);
  alloc_->Free(other);
  alloc_->Free(again);
  alloc_->Free(out1);
  alloc_->Free(out2);
}

// A second capture that keeps a block the first graph replays into would share it with its owner: refused.
TEST_F(CudaGraphTest, KeepingAPoolBlockFailsTheCapture) {
  void *out = nullptr, *temp = nullptr, *kept = nullptr;
  ASSERT_TRUE(alloc_->Allocate(kOut, &out).ok());
  auto pool = std::make_shared<CudaGraphPool>(alloc_.get());
  std::unique_ptr<CudaGraph> g1, g2;
  ASSERT_TRUE(CudaGraph::Capture(stream_, pool, Body(1, out, &temp), &g1).ok());
  const Status st = CudaGraph::Capture(
      stream_, pool, [&]() -> Status { return alloc_->Allocate(kTemp, &kept); }, &g2);
  EXPECT_EQ(kept, temp);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("an earlier graph of its pool"), std::string::npos) << st.ToString();
  EXPECT_EQ(g2, nullptr);
  g1.reset();
  pool.reset();
  alloc_->Free(kept);
  alloc_->Free(out);
}

TEST_F(CudaGraphTest, FreeingABlockFromBeforeTheCaptureFailsIt) {
  void* old = nullptr;
  ASSERT_TRUE(alloc_->Allocate(kTemp, &old).ok());
  auto pool = std::make_shared<CudaGraphPool>(alloc_.get());
  std::unique_ptr<CudaGraph> g;
  const Status st = CudaGraph::Capture(
      stream_, pool,
      [&]() -> Status {
        alloc_->Free(old);
        return Status::OK();
      },
      &g);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("allocated before the capture"), std::string::npos) << st.ToString();
  EXPECT_EQ(g, nullptr);
}

}  // namespace
}  // namespace dtrain
#endif  // DT_HAVE_CUDA
