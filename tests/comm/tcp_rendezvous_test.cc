// RendezvousTcp between real forked processes on loopback: joins, a late peer, a missing peer, a wrong
// port, a duplicate rank, a world-size mismatch, a busy port; and the attacks of issue 38: an impostor without the
// job secret (a valid hello, another world size, idle connections) is never counted, ends nothing, delays no one
// and never receives the NCCL id; a rank with another secret is refused at once.
#include "comm/tcp_rendezvous.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/tcp_communicator.h"
#include "comm/tcp_socket.h"
#include "tests/comm/forked_ranks.h"

namespace dtrain::comm {
namespace {

using testing::ForkedRank;
using testing::FreeLoopbackPort;
using testing::RunForkedRanks;

RendezvousOptions Opts(int port, int rank, int world, double timeout_s) {
  RendezvousOptions o;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.rank = rank;
  o.world_size = world;
  o.timeout_s = timeout_s;
  o.secret = testing::TestJobSecret();
  return o;
}

// "OK <links>" or the error.
std::string Join(const RendezvousOptions& o) {
  StarLinks links;
  const Status st = RendezvousTcp(o, &links);
  if (!st.ok()) return st.ToString();
  return "OK " + std::to_string(links.links.size());
}

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(TcpRendezvousTest, FourRanksJoinAsAStarThroughRankZero) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const auto r = RunForkedRanks(4, [&](int rank) { return Join(Opts(port, rank, 4, 30)); });
  EXPECT_EQ(r[0].report, "OK 4");  // rank 0 holds links[1..3] (links[0] unused)
  for (int i = 1; i < 4; ++i) EXPECT_EQ(r[i].report, "OK 1") << "rank " << i;
  for (const ForkedRank& x : r) EXPECT_EQ(x.exit_code, 0);
}

TEST(TcpRendezvousTest, LatePeerStillJoins) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(2, [&](int rank) { return Join(Opts(port, rank, 2, 30)); }, {0.0, 2.0});
  EXPECT_EQ(r[0].report, "OK 2");
  EXPECT_EQ(r[1].report, "OK 1");
  EXPECT_GE(r[0].seconds, 1.5) << "rank 0 waited for the late peer";
  EXPECT_LT(r[1].seconds, 5.0);
}

TEST(TcpRendezvousTest, PeerStartedBeforeRankZeroRetriesUntilItListens) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(2, [&](int rank) { return Join(Opts(port, rank, 2, 30)); }, {1.5, 0.0});
  EXPECT_EQ(r[0].report, "OK 2");
  EXPECT_EQ(r[1].report, "OK 1");
  EXPECT_GE(r[1].seconds, 1.0) << "rank 1 connected only once rank 0 listened";
}

TEST(TcpRendezvousTest, MissingPeerIsNamedWithinTheTimeout) {
  const int port = FreeLoopbackPort();
  // World 3, but rank 2 never starts. Rank 1 would wait longer than rank 0 does.
  const auto r = RunForkedRanks(2, [&](int rank) { return Join(Opts(port, rank, 3, rank == 0 ? 2 : 20)); });
  const std::string where = "127.0.0.1:" + std::to_string(port);
  EXPECT_TRUE(Has(r[0].report, "Unavailable")) << r[0].report;
  EXPECT_TRUE(Has(r[0].report, "rank 0: 1 of 2 peers arrived at " + where + " after 2 s; missing: rank 2"))
      << r[0].report;
  EXPECT_GE(r[0].seconds, 1.9);
  EXPECT_LT(r[0].seconds, 5.0);
  // The rank that did arrive hears why, rather than timing out on its own.
  EXPECT_TRUE(Has(r[1].report, "rank 1: rank 0: 1 of 2 peers arrived")) << r[1].report;
  EXPECT_TRUE(Has(r[1].report, "missing: rank 2")) << r[1].report;
}

TEST(TcpRendezvousTest, WrongPortSaysNoRendezvousWithinTheTimeout) {
  const int port = FreeLoopbackPort();  // nobody listens there
  const auto t0 = std::chrono::steady_clock::now();
  const std::string report = Join(Opts(port, 1, 2, 1.5));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(Has(report, "rank 1: no rendezvous at 127.0.0.1:" + std::to_string(port) +
                              " after 1.5 s (is rank 0 running, and MASTER_ADDR/MASTER_PORT the same everywhere?)"))
      << report;
  EXPECT_TRUE(Has(report, "refused")) << report;
  EXPECT_GE(s, 1.4);
  EXPECT_LT(s, 4.0);
}

TEST(TcpRendezvousTest, UnresolvableHostFailsWithinTheTimeout) {
  RendezvousOptions o = Opts(29500, 1, 2, 1);
  o.master_addr = "no-such-host.invalid";
  const std::string report = Join(o);
  EXPECT_TRUE(Has(report, "no rendezvous at no-such-host.invalid:29500 after 1 s")) << report;
  EXPECT_TRUE(Has(report, "cannot resolve no-such-host.invalid")) << report;
}

TEST(TcpRendezvousTest, DuplicateRankIsAnErrorOnEverySide) {
  const int port = FreeLoopbackPort();
  // Processes 1 and 2 both say RANK=1; the second arrives later.
  const auto r = RunForkedRanks(3, [&](int p) { return Join(Opts(port, p == 0 ? 0 : 1, 3, 30)); }, {0.0, 0.0, 1.0});
  EXPECT_TRUE(Has(r[0].report, "InvalidArgument")) << r[0].report;
  EXPECT_TRUE(Has(r[0].report, "rank 0: rendezvous at 127.0.0.1:" + std::to_string(port) + ": rank 1 joined twice"))
      << r[0].report;
  EXPECT_TRUE(Has(r[0].report, "every process needs its own RANK")) << r[0].report;
  EXPECT_TRUE(Has(r[2].report, "rank 1: rank 0 refused this rank:")) << r[2].report;
  EXPECT_TRUE(Has(r[2].report, "rank 1 joined twice")) << r[2].report;
  EXPECT_TRUE(Has(r[1].report, "rank 1: rank 0 ended the rendezvous:")) << r[1].report;
  EXPECT_LT(r[0].seconds, 10.0) << "failed at once, not at the timeout";
}

TEST(TcpRendezvousTest, WorldSizeMismatchNamesBothValues) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(2, [&](int rank) { return Join(Opts(port, rank, rank == 0 ? 2 : 3, 30)); });
  EXPECT_TRUE(Has(r[0].report, "rank 1 (from 127.0.0.1:")) << r[0].report;
  EXPECT_TRUE(Has(r[0].report, "has WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2")) << r[0].report;
  EXPECT_TRUE(Has(r[1].report, "rank 1: rank 0 refused this rank:")) << r[1].report;
  EXPECT_TRUE(Has(r[1].report, "WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2")) << r[1].report;
}

TEST(TcpRendezvousTest, BusyPortOnRankZeroSaysSo) {
  TcpSocket holder;
  ASSERT_TRUE(TcpSocket::Listen("127.0.0.1", 0, &holder).ok());
  const std::string report = Join(Opts(holder.local_port(), 0, 2, 5));
  EXPECT_TRUE(Has(report, "rank 0: cannot listen on 127.0.0.1:" + std::to_string(holder.local_port()))) << report;
  EXPECT_TRUE(Has(report, "choose another MASTER_PORT")) << report;
}

TEST(TcpRendezvousTest, ConnectionWithoutHelloIsDroppedAndTheJobStillForms) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(3,
                                [&](int p) -> std::string {
                                  if (p == 2) {  // not dtrain: connects, sends garbage, closes
                                    TcpSocket s;
                                    const Deadline d = DeadlineIn(10);
                                    Status st;
                                    do {
                                      st = TcpSocket::Connect("127.0.0.1", port, d, &s);
                                    } while (!st.ok() && SecondsLeft(d) > 0);
                                    const char junk[16] = "GET / HTTP/1.0\n";
                                    (void)s.SendAll(junk, sizeof(junk), d, "rank 0");
                                    return st.ToString();
                                  }
                                  return Join(Opts(port, p, 2, 30));
                                },
                                {0.0, 1.0, 0.2});
  EXPECT_EQ(r[0].report, "OK 2");
  EXPECT_EQ(r[1].report, "OK 1");
}

TEST(TcpRendezvousTest, RankZeroListensEverywhereWhenMasterAddrIsNotLocal) {
  const int port = FreeLoopbackPort();
  // Rank 0 is told a forwarded address that no interface here has (TEST-NET-1); the peer reaches it on loopback.
  const auto r = RunForkedRanks(2, [&](int rank) {
    RendezvousOptions o = Opts(port, rank, 2, 20);
    if (rank == 0) o.master_addr = "192.0.2.1";
    return Join(o);
  });
  EXPECT_EQ(r[0].report, "OK 2");
  EXPECT_EQ(r[1].report, "OK 1");
}

TEST(TcpRendezvousTest, OneRankMakesNoConnection) {
  const std::string report = Join(Opts(1, 0, 1, 1));
  EXPECT_EQ(report, "OK 0");
}

TEST(TcpRendezvousTest, BadOptionsAreRefused) {
  StarLinks links;
  EXPECT_EQ(RendezvousTcp(Opts(29500, 2, 2, 1), &links).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RendezvousTcp(Opts(0, 0, 2, 1), &links).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RendezvousTcp(Opts(29500, 0, 2, 0), &links).code(), Status::Code::kInvalidArgument);
}

// --- attacks (issue 38) --------------------------------------------------------------------------

// Connects to rank 0 (retrying while it starts), as a stray process would.
TcpSocket StrayConnect(int port) {
  TcpSocket s;
  const Deadline d = DeadlineIn(10);
  Status st;
  do {
    st = TcpSocket::Connect("127.0.0.1", port, d, &s);
  } while (!st.ok() && SecondsLeft(d) > 0);
  return s;
}

// Everything rank 0 sends to `s` until it closes the connection (or 15 s).
std::string ReadAll(const TcpSocket& s) {
  std::string got;
  char c;
  const Deadline d = DeadlineIn(15);
  while (s.RecvAll(&c, 1, d, "rank 0").ok()) got.push_back(c);
  return got;
}

TEST(TcpRendezvousAttackTest, ImpostorWithAValidHelloIsNotCountedAndNeverGetsTheNcclId) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(
      4,
      [&](int p) -> std::string {
        if (p == 2 || p == 3) {  // impostors: 2 sends rank 1's hello; 3 runs the handshake with another secret
          TcpSocket s = StrayConnect(port);
          if (p == 3) {
            const Status st = ClientHandshake(s, testing::TestJobSecret("an-impostors-secret-of-more-than-32-chars"),
                                              "dtrain rendezvous 2", DeadlineIn(5), "rank 0");
            return "handshake: " + st.ToString() + " then " + std::to_string(ReadAll(s).size()) + " bytes";
          }
          unsigned char hello[16] = {'D', 'T', 'R', 'Z', 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2};
          (void)s.SendAll(hello, sizeof(hello), DeadlineIn(2), "rank 0");
          const std::string got = ReadAll(s);
          return "got " + std::to_string(got.size()) + " bytes" +
                 (got.find("NCCL-ID") != std::string::npos ? " with the id" : "");
        }
        StarLinks links;
        const Status st = RendezvousTcp(Opts(port, p, 2, 20), &links);
        if (!st.ok()) return st.ToString();
        std::unique_ptr<TcpCommunicator> comm;
        if (!TcpCommunicator::Create(std::move(links), TcpCommOptions(), &comm).ok()) return "no communicator";
        char id[16] = {0};
        if (p == 0) std::snprintf(id, sizeof(id), "NCCL-ID-0042");
        Tensor t = Tensor::Wrap(id, {16}, DType::kU8, DeviceType::kCPU);
        const Status b = comm->Broadcast(&t, 0, nullptr);
        return b.ok() ? std::string("OK ") + id : b.ToString();
      },
      {0.0, 1.0, 0.2, 0.2});
  EXPECT_EQ(r[0].report, "OK NCCL-ID-0042");
  EXPECT_EQ(r[1].report, "OK NCCL-ID-0042") << "the real rank 1 joined";
  // The impostors heard at most the challenge (40 bytes) and the "refused" verdict (36), never a notice or the id.
  EXPECT_TRUE(r[2].report == "got 76 bytes" || r[2].report == "got 40 bytes") << r[2].report;
  EXPECT_TRUE(Has(r[3].report, "holds another job secret")) << r[3].report;
  EXPECT_TRUE(Has(r[3].report, "then 0 bytes")) << r[3].report;
}

TEST(TcpRendezvousAttackTest, ImpostorHelloWithAnotherWorldSizeDoesNotAbortRankZero) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(3,
                                [&](int p) -> std::string {
                                  if (p == 2) {
                                    TcpSocket s = StrayConnect(port);
                                    unsigned char hello[16] = {'D', 'T', 'R', 'Z', 0, 0, 0, 2,
                                                               0,   0,   0,   1,   0, 0, 0, 3};  // WORLD_SIZE=3
                                    (void)s.SendAll(hello, sizeof(hello), DeadlineIn(2), "rank 0");
                                    ReadAll(s);
                                    return "done";
                                  }
                                  return Join(Opts(port, p, 2, 20));
                                },
                                {0.0, 1.0, 0.2});
  EXPECT_EQ(r[0].report, "OK 2");  // used to be "WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2" on every rank
  EXPECT_EQ(r[1].report, "OK 1");
}

TEST(TcpRendezvousAttackTest, IdleConnectionsDoNotDelayTheRendezvous) {
  const int port = FreeLoopbackPort();
  const auto r =
      RunForkedRanks(3,
                     [&](int p) -> std::string {
                       if (p == 2) {  // 100 connections that never say anything (each used to stall rank 0 for 5 s)
                         std::vector<TcpSocket> idle;
                         for (int i = 0; i < 100; ++i) idle.push_back(StrayConnect(port));
                         std::this_thread::sleep_for(std::chrono::seconds(3));
                         return "done";
                       }
                       return Join(Opts(port, p, 2, 20));
                     },
                     {0.0, 1.0, 0.2});
  EXPECT_EQ(r[0].report, "OK 2");
  EXPECT_EQ(r[1].report, "OK 1");
  EXPECT_LT(r[1].seconds, 2.0) << "rank 1 waited behind the idle connections";
}

TEST(TcpRendezvousAttackTest, RankWithAnotherSecretIsRefusedAtOnce) {
  const int port = FreeLoopbackPort();
  const auto r = RunForkedRanks(2,
                                [&](int p) -> std::string {
                                  RendezvousOptions o = Opts(port, p, 2, 3);
                                  if (p == 1)
                                    o.secret = testing::TestJobSecret("another-job-secret-of-more-than-32-chars");
                                  return Join(o);
                                },
                                {0.0, 0.3});
  EXPECT_TRUE(Has(r[1].report, "InvalidArgument: rank 1: rendezvous: rank 0 at 127.0.0.1:")) << r[1].report;
  EXPECT_TRUE(Has(r[1].report, "refused this process: it holds another job secret")) << r[1].report;
  EXPECT_LT(r[1].seconds, 2.0);
  EXPECT_TRUE(Has(r[0].report, "missing: rank 1 (1 connection(s) dropped")) << r[0].report;
}

}  // namespace
}  // namespace dtrain::comm
