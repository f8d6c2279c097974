// TcpCommunicator between real forked processes on loopback: closed-form all-reduces, bitwise
// agreement, broadcasts, barriers, and the failures (a dead peer, mismatched calls, a timeout, Abort).
#include "comm/tcp_communicator.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/watchdog.h"
#include "core/check.h"
#include "tests/comm/forked_ranks.h"

namespace dtrain::comm {
namespace {

using testing::FreeLoopbackPort;
using testing::RunForkedRanks;

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

Status Connect(int port, int rank, int world, double collective_timeout_s, std::unique_ptr<TcpCommunicator>* out) {
  RendezvousOptions o;
  o.master_port = port;
  o.rank = rank;
  o.world_size = world;
  o.timeout_s = 30;
  o.secret = testing::TestJobSecret();
  StarLinks links;
  DT_RETURN_IF_ERROR(RendezvousTcp(o, &links));
  TcpCommOptions co;
  co.collective_timeout_s = collective_timeout_s;
  return TcpCommunicator::Create(std::move(links), co, out);
}

std::string Hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%a", v);
  return buf;
}

// Every collective the trainer's host path uses, reported as one line per rank.
std::string FourRankRound(int port, int rank) {
  std::unique_ptr<TcpCommunicator> c;
  Status st = Connect(port, rank, 4, 30, &c);
  if (!st.ok()) return st.ToString();
  auto fail = [](const Status& s) { return "FAIL " + s.ToString(); };
  // Sum and max of the rank (f64, as Trainer::AllReduceHost sends them), and a mean.
  std::vector<double> v = {static_cast<double>(rank), static_cast<double>(rank), 1.0 / (rank + 3)};
  Tensor t = Tensor::Wrap(v.data(), {3}, DType::kF64, DeviceType::kCPU);
  if (!(st = c->AllReduce(&t, ReduceOp::kSum, nullptr)).ok()) return fail(st);
  std::vector<double> m = {static_cast<double>(rank), -static_cast<double>(rank)};
  Tensor tm = Tensor::Wrap(m.data(), {2}, DType::kF64, DeviceType::kCPU);
  if (!(st = c->AllReduce(&tm, ReduceOp::kMax, nullptr)).ok()) return fail(st);
  float a = static_cast<float>(rank);
  Tensor ta = Tensor::Wrap(&a, {1}, DType::kF32, DeviceType::kCPU);
  if (!(st = c->AllReduce(&ta, ReduceOp::kAvg, nullptr)).ok()) return fail(st);
  int32_t i = rank + 1;
  Tensor ti = Tensor::Wrap(&i, {1}, DType::kI32, DeviceType::kCPU);
  if (!(st = c->AllReduce(&ti, ReduceOp::kSum, nullptr)).ok()) return fail(st);
  // A 128-byte payload (an ncclUniqueId's size) from rank 0, and 2 doubles from rank 2.
  std::vector<uint8_t> id(128, 0);
  if (rank == 0) {
    for (int k = 0; k < 128; ++k) id[k] = static_cast<uint8_t>(7 * k + 3);
  }
  Tensor tid = Tensor::Wrap(id.data(), {128}, DType::kU8, DeviceType::kCPU);
  if (!(st = c->Broadcast(&tid, 0, nullptr)).ok()) return fail(st);
  int id_ok = 1;
  for (int k = 0; k < 128; ++k) id_ok &= id[k] == static_cast<uint8_t>(7 * k + 3);
  std::vector<double> b = {rank == 2 ? 42.5 : -1.0, rank == 2 ? 7.0 : -1.0};
  Tensor tb = Tensor::Wrap(b.data(), {2}, DType::kF64, DeviceType::kCPU);
  if (!(st = c->Broadcast(&tb, 2, nullptr)).ok()) return fail(st);
  if (!(st = c->Barrier()).ok()) return fail(st);
  return "sum=" + std::to_string(v[0]) + "," + std::to_string(v[1]) + " fractions=" + Hex(v[2]) +
         " max=" + std::to_string(m[0]) + "," + std::to_string(m[1]) + " avg=" + std::to_string(a) +
         " isum=" + std::to_string(i) + " id=" + std::to_string(id_ok) + " from2=" + std::to_string(b[0]) + "," +
         std::to_string(b[1]);
}

TEST(TcpCommunicatorTest, FourRanksAllReduceAndBroadcastClosedForms) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(4, [&](int rank) { return FourRankRound(port, rank); });
  // Rank order on rank 0: ((1/3 + 1/4) + 1/5) + 1/6 is 0.9499999999999998, while the reverse order or a
  // tree gives 0.95: the result is rank 0's rank-order sum, the same bits on every rank.
  const double ordered = ((1.0 / 3 + 1.0 / 4) + 1.0 / 5) + 1.0 / 6;
  ASSERT_NE(Hex(ordered), Hex(((1.0 / 6 + 1.0 / 5) + 1.0 / 4) + 1.0 / 3));
  const std::string expected = "sum=6.000000,6.000000 fractions=" + Hex(ordered) +
                               " max=3.000000,-0.000000 avg=1.500000 isum=10 id=1 from2=42.500000,7.000000";
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(r[k].report, expected) << "rank " << k;
    EXPECT_EQ(r[k].exit_code, 0);
  }
}

TEST(TcpCommunicatorTest, DeadPeerIsNamedOnRankZeroAndReportedToTheOthers) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(3, [&](int rank) -> std::string {
    std::unique_ptr<TcpCommunicator> c;
    Status st = Connect(port, rank, 3, 30, &c);
    if (!st.ok()) return st.ToString();
    if (rank == 2) return "left";  // exits: its connection closes without a word
    double x = 1;
    Tensor t = Tensor::Wrap(&x, {1}, DType::kF64, DeviceType::kCPU);
    st = c->AllReduce(&t, ReduceOp::kMax, nullptr);
    // The group is out of step now: later calls give the same error.
    const Status again = c->Barrier();
    return st.ToString() + " | again: " + (again.message() == st.message() ? "same" : again.ToString());
  });
  EXPECT_TRUE(Has(r[0].report, "rank 0: AllReduce #0 (max, f64, 8 bytes): rank 2 closed its connection"))
      << r[0].report;
  EXPECT_TRUE(Has(r[0].report, "again: same")) << r[0].report;
  EXPECT_TRUE(Has(r[1].report, "rank 1: AllReduce #0 (max, f64, 8 bytes): failed on rank 0:")) << r[1].report;
  EXPECT_TRUE(Has(r[1].report, "rank 2 closed its connection")) << r[1].report;
}

TEST(TcpCommunicatorTest, MismatchedCollectivesNameBothRanksAndCalls) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(2, [&](int rank) -> std::string {
    std::unique_ptr<TcpCommunicator> c;
    Status st = Connect(port, rank, 2, 30, &c);
    if (!st.ok()) return st.ToString();
    if (rank == 1) return c->Barrier().ToString();
    double x[2] = {1, 2};
    Tensor t = Tensor::Wrap(x, {2}, DType::kF64, DeviceType::kCPU);
    return c->AllReduce(&t, ReduceOp::kSum, nullptr).ToString();
  });
  const std::string msg = "rank 0 is at AllReduce #0 (sum, f64, 16 bytes) but rank 1 is at Barrier #0";
  EXPECT_TRUE(Has(r[0].report, msg)) << r[0].report;
  EXPECT_TRUE(Has(r[1].report, "rank 1: Barrier #0: failed on rank 0: " + msg)) << r[1].report;
}

TEST(TcpCommunicatorTest, PeerThatNeverArrivesTimesOut) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(2, [&](int rank) -> std::string {
    std::unique_ptr<TcpCommunicator> c;
    Status st = Connect(port, rank, 2, 1, &c);
    if (!st.ok()) return st.ToString();
    if (rank == 1) {  // alive, connected, but never joins the collective
      std::this_thread::sleep_for(std::chrono::seconds(3));
      return "slept";
    }
    return c->Barrier().ToString();
  });
  EXPECT_TRUE(
      Has(r[0].report, "rank 0: Barrier #0: rank 1 did not arrive within 1 s (receiving from rank 1 timed out)"))
      << r[0].report;
  EXPECT_LT(r[0].seconds, 2.9);
}

TEST(TcpCommunicatorTest, AbortFromAnotherThreadUnblocksAWaitingCollective) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(2, [&](int rank) -> std::string {
    std::unique_ptr<TcpCommunicator> c;
    Status st = Connect(port, rank, 2, 60, &c);
    if (!st.ok()) return st.ToString();
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      return "slept";
    }
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      (void)c->Abort();
    });
    const auto t0 = std::chrono::steady_clock::now();
    st = c->Barrier();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    watchdog.join();
    double x = 0;
    Tensor t = Tensor::Wrap(&x, {1}, DType::kF64, DeviceType::kCPU);
    const Status after = c->AllReduce(&t, ReduceOp::kSum, nullptr);
    return st.ToString() + " | after: " + after.ToString() + " | s=" + std::to_string(s);
  });
  EXPECT_TRUE(Has(r[0].report, "Aborted: tcp communicator was aborted | after: Aborted")) << r[0].report;
  EXPECT_LT(r[0].seconds, 2.5) << r[0].report;
}

// The trainer's arrangement: the collective watchdog watches the tcp communicator and, when a
// collective hangs, aborts it, which releases the blocked call.
TEST(TcpCommunicatorTest, WatchdogAbortsAHungCollective) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(2, [&](int rank) -> std::string {
    std::unique_ptr<TcpCommunicator> c;
    Status st = Connect(port, rank, 2, 60, &c);
    if (!st.ok()) return st.ToString();
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      return "slept";
    }
    WatchdogOptions wo;
    wo.timeout_s = 0.5;
    wo.poll_interval_s = 0.05;
    std::string fatal;
    std::unique_ptr<Watchdog> w;
    st = Watchdog::Create(
        {c.get()}, wo, [&](const Status& s) { fatal = s.ToString(); }, &w);
    if (!st.ok()) return st.ToString();
    w->Arm("step 7 loss all-reduce");
    double x = 1;
    Tensor t = Tensor::Wrap(&x, {1}, DType::kF64, DeviceType::kCPU);
    st = c->AllReduce(&t, ReduceOp::kSum, nullptr);
    w->Disarm();
    w.reset();  // joins the thread: `fatal` is written
    return st.ToString() + " | " + fatal;
  });
  EXPECT_TRUE(Has(r[0].report, "Aborted: tcp communicator was aborted")) << r[0].report;
  EXPECT_TRUE(Has(r[0].report, "'step 7 loss all-reduce' did not complete within 0.5 s on rank 0 of 2")) << r[0].report;
  EXPECT_LT(r[0].seconds, 2.5);
}

TEST(TcpCommunicatorTest, OneRankIsTheIdentityWithoutSockets) {
  std::unique_ptr<TcpCommunicator> c;
  StarLinks links;
  ASSERT_TRUE(TcpCommunicator::Create(std::move(links), {}, &c).ok());
  double x[2] = {3, -4};
  Tensor t = Tensor::Wrap(x, {2}, DType::kF64, DeviceType::kCPU);
  ASSERT_TRUE(c->AllReduce(&t, ReduceOp::kAvg, nullptr).ok());
  EXPECT_EQ(x[0], 3);
  EXPECT_EQ(x[1], -4);
  EXPECT_TRUE(c->Barrier().ok());
  EXPECT_EQ(c->backend(), Backend::kTcp);
  EXPECT_EQ(c->device_type(), DeviceType::kCPU);
}

TEST(TcpCommunicatorTest, GradientCollectivesAndBadTensorsAreRefused) {
  std::unique_ptr<TcpCommunicator> c;
  ASSERT_TRUE(TcpCommunicator::Create(StarLinks{}, {}, &c).ok());
  float f[2] = {1, 2};
  Tensor t = Tensor::Wrap(f, {2}, DType::kF32, DeviceType::kCPU);
  const Status rs = c->ReduceScatter(t, &t, ReduceOp::kSum, nullptr);
  EXPECT_EQ(rs.code(), Status::Code::kUnimplemented);
  EXPECT_TRUE(Has(rs.message(), "host scalars only")) << rs.ToString();
  EXPECT_EQ(c->AllGather(t, &t, nullptr).code(), Status::Code::kUnimplemented);
  uint8_t u[2] = {1, 2};
  Tensor tu = Tensor::Wrap(u, {2}, DType::kU8, DeviceType::kCPU);
  EXPECT_EQ(c->AllReduce(&tu, ReduceOp::kSum, nullptr).code(), Status::Code::kInvalidArgument);
  int32_t i = 1;
  Tensor ti = Tensor::Wrap(&i, {1}, DType::kI32, DeviceType::kCPU);
  EXPECT_EQ(c->AllReduce(&ti, ReduceOp::kAvg, nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(c->Broadcast(&t, 1, nullptr).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::comm
