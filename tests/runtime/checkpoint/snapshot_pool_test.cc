// SnapshotPool: the snapshot buffers are allocated in the background, a Take that comes first waits only
// for the rest of the allocation and says how long, and an allocation error reaches Take naming the buffer.

#include "runtime/checkpoint/snapshot_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace dtrain::runtime {
namespace {

// Host memory that takes `delay` per allocation (as pinning 1.5 GB does) or fails for a given size.
class SlowAllocator final : public Allocator {
 public:
  SlowAllocator(std::chrono::milliseconds delay, size_t fail_bytes = 0) : delay_(delay), fail_bytes_(fail_bytes) {}
  Status Allocate(size_t bytes, void** ptr) override {
    std::this_thread::sleep_for(delay_);
    if (bytes == fail_bytes_) return Status::Internal("out of pinned memory (test)");
    ++allocations;
    return inner_.Allocate(bytes, ptr);
  }
  void Free(void* ptr) override { inner_.Free(ptr); }
  DeviceType device() const override { return DeviceType::kCPU; }
  std::atomic<int> allocations{0};

 private:
  CpuAllocator inner_;
  std::chrono::milliseconds delay_;
  size_t fail_bytes_;
};

TEST(SnapshotPoolTest, AllocatesInTheBackgroundSoALateTakeDoesNotWait) {
  SlowAllocator alloc(std::chrono::milliseconds(100));
  std::atomic<bool> init_ran{false};
  auto pool = SnapshotPool::Start({{"params.bin", 1000}, {"exp_avg.bin", 1000}, {"buffer.x.bin", 3}}, &alloc, [&] {
    init_ran = true;
    return Status::OK();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // "training" until the first save
  EXPECT_EQ(alloc.allocations.load(), 3);                       // done meanwhile, without a Take
  SnapshotPool::Buffers buffers;
  double waited_s = -1;
  ASSERT_TRUE(pool->Take(&buffers, &waited_s).ok());
  EXPECT_TRUE(init_ran.load());
  EXPECT_LT(waited_s, 0.05);
  EXPECT_GE(pool->alloc_s(), 0.3);
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[0].first, "params.bin");
  EXPECT_EQ(buffers[0].second.numel(), 1000);
  EXPECT_EQ(buffers[1].first, "exp_avg.bin");
  EXPECT_EQ(buffers[2].first, "buffer.x.bin");
  EXPECT_EQ(buffers[2].second.numel(), 3);
  buffers[0].second.data<float>()[999] = 1.5f;  // usable host memory
  EXPECT_EQ(pool->Take(&buffers, &waited_s).code(), Status::Code::kFailedPrecondition);
}

TEST(SnapshotPoolTest, AnEarlySaveWaitsOnlyForTheRestAndReportsIt) {
  SlowAllocator alloc(std::chrono::milliseconds(200));
  auto pool = SnapshotPool::Start({{"a.bin", 10}, {"b.bin", 10}, {"c.bin", 10}}, &alloc, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  SnapshotPool::Buffers buffers;
  double waited_s = 0;
  ASSERT_TRUE(pool->Take(&buffers, &waited_s).ok());
  EXPECT_GT(waited_s, 0.2);  // two allocations were left (~0.35 s)...
  EXPECT_LT(waited_s, 0.6);  // ...not the whole allocation again
  EXPECT_EQ(buffers.size(), 3u);
}

TEST(SnapshotPoolTest, AllocationErrorReachesTakeNamingTheBuffer) {
  SlowAllocator alloc(std::chrono::milliseconds(0), /*fail_bytes=*/40);
  auto pool = SnapshotPool::Start({{"params.bin", 4}, {"exp_avg.bin", 10}}, &alloc, nullptr);
  SnapshotPool::Buffers buffers;
  double waited_s = 0;
  const Status st = pool->Take(&buffers, &waited_s);
  EXPECT_EQ(st.code(), Status::Code::kInternal) << st.ToString();
  EXPECT_NE(st.message().find("snapshot buffer exp_avg.bin"), std::string::npos) << st.message();
  EXPECT_TRUE(buffers.empty());
}

TEST(SnapshotPoolTest, ThreadInitErrorReachesTake) {
  CpuAllocator alloc;
  auto pool = SnapshotPool::Start({{"params.bin", 4}}, &alloc, [] { return Status::Internal("no device 7"); });
  SnapshotPool::Buffers buffers;
  double waited_s = 0;
  EXPECT_EQ(pool->Take(&buffers, &waited_s).message(), "no device 7");
}

TEST(SnapshotPoolTest, DestroyedWithoutTakeWaitsForTheAllocation) {
  SlowAllocator alloc(std::chrono::milliseconds(100));
  { auto pool = SnapshotPool::Start({{"a.bin", 10}, {"b.bin", 10}}, &alloc, nullptr); }
  EXPECT_EQ(alloc.allocations.load(), 2);  // and the buffers were freed with the pool (no leak under ASan)
}

}  // namespace
}  // namespace dtrain::runtime
