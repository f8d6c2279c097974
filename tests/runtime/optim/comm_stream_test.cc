// CommStream on the CPU: no stream, hand-overs are no-ops, and the exposed time is the host time spent in
// Exposed() per counted synced step, reset by each TakeExposedMs. (The GPU path — events, timed gaps — runs
// in gradient_reducer_mpi_test / zero1_mpi_test on a GPU machine.)
#include "runtime/optim/comm_stream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/testing/grad_check.h"

namespace dtrain::runtime {
namespace {

TEST(CommStreamTest, CpuExposedTimeIsTheBlockingTimePerSyncedStep) {
  std::unique_ptr<DeviceContext> ctx;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&ctx));
  std::unique_ptr<CommStream> cs;
  DT_ASSERT_OK(CommStream::Create(*ctx, "test", 3, &cs));
  EXPECT_FALSE(cs->on_device());
  EXPECT_EQ(cs->stream(), nullptr);
  DT_ASSERT_OK(cs->WaitForCompute());
  DT_ASSERT_OK(cs->JoinCompute(2));
  DT_ASSERT_OK(cs->JoinCompute(CommStream::kUntimed));
  EXPECT_EQ(cs->JoinCompute(3).code(), Status::Code::kInvalidArgument);

  double ms = -1;
  DT_ASSERT_OK(cs->TakeExposedMs(&ms));
  EXPECT_EQ(ms, 0.0);  // nothing counted yet

  // Two synced steps, 40 ms of "collectives" in all: 20 ms per step.
  for (int s = 0; s < 2; ++s) {
    int calls = 0;
    DT_ASSERT_OK(cs->Exposed([&] {
      ++calls;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return Status::OK();
    }));
    EXPECT_EQ(calls, 1);
    cs->CountSyncedStep();
  }
  DT_ASSERT_OK(cs->TakeExposedMs(&ms));
  EXPECT_GE(ms, 20.0);
  EXPECT_LT(ms, 200.0);
  DT_ASSERT_OK(cs->TakeExposedMs(&ms));  // reset by the previous call
  EXPECT_EQ(ms, 0.0);

  // A failing collective's status passes through (and its time still counts).
  const Status st = cs->Exposed([] { return Status::Unavailable("peer gone"); });
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(CommStream::Create(*ctx, "test", 0, &cs).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::runtime
