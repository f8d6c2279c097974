// NodeLink over real loopback sockets: per-node launchers join, a failure on one node reaches every node with its
// code and reason, a lost launcher (closed link, or silence) stops the others, "done" is no failure, and
// disagreements and a missing node 0 are clear errors.

#include "launcher/node_link.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "comm/tcp_socket.h"

namespace dtrain::launcher {
namespace {

using Clock = std::chrono::steady_clock;

int FreePort() {
  comm::TcpSocket s;
  EXPECT_TRUE(comm::TcpSocket::Listen("127.0.0.1", 0, &s).ok());
  return s.local_port();
}

NodeLinkOptions Options(int node, int nnodes, int port) {
  NodeLinkOptions o;
  o.node_rank = node;
  o.nnodes = nnodes;
  o.master_addr = "127.0.0.1";
  o.port = port;
  o.join_timeout_s = 10;
  o.heartbeat_s = 0.2;
  o.peer_timeout_s = 1;
  return o;
}

// Joins `nnodes` links at once (each in its own thread, as separate launchers would).
std::vector<std::unique_ptr<NodeLink>> JoinAll(int nnodes, int port) {
  std::vector<std::future<std::unique_ptr<NodeLink>>> futures;
  for (int n = 0; n < nnodes; ++n) {
    futures.push_back(std::async(std::launch::async, [=] {
      std::unique_ptr<NodeLink> link;
      const Status st = NodeLink::Join(Options(n, nnodes, port), &link);
      EXPECT_TRUE(st.ok()) << "node " << n << ": " << st.ToString();
      return link;
    }));
  }
  std::vector<std::unique_ptr<NodeLink>> links;
  for (auto& f : futures) links.push_back(f.get());
  return links;
}

// Seconds until `link` reports a stop (or -1 after `limit`).
double SecondsToStop(const NodeLink& link, double limit, NodeStop* why) {
  const auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < limit) {
    if (link.stopped(why)) return std::chrono::duration<double>(Clock::now() - start).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

TEST(NodeLinkTest, FailureOnOneNodeReachesEveryNodeWithItsCode) {
  auto links = JoinAll(3, FreePort());
  ASSERT_TRUE(links[0] && links[1] && links[2]);
  EXPECT_FALSE(links[0]->stopped(nullptr));
  links[2]->ReportFailure(7, "rank 5 on host c failed first: exit code 7");
  for (int n : {0, 1}) {
    NodeStop why;
    const double s = SecondsToStop(*links[n], 5, &why);
    ASSERT_GE(s, 0) << "node " << n << " never stopped";
    EXPECT_LT(s, 1.0) << "node " << n;  // pushed at once, not found by a timeout
    EXPECT_EQ(why.node, 2);
    EXPECT_EQ(why.exit_code, 7);
    EXPECT_EQ(why.reason, "rank 5 on host c failed first: exit code 7");
  }
}

TEST(NodeLinkTest, FailureOnNodeZeroReachesTheOthers) {
  auto links = JoinAll(2, FreePort());
  ASSERT_TRUE(links[0] && links[1]);
  links[0]->ReportFailure(137, "rank 0 killed");
  NodeStop why;
  ASSERT_GE(SecondsToStop(*links[1], 5, &why), 0);
  EXPECT_EQ(why.node, 0);
  EXPECT_EQ(why.exit_code, 137);
  // A later local failure does not replace the root cause.
  links[1]->ReportFailure(143, "rank 1 terminated");
  ASSERT_TRUE(links[1]->stopped(&why));
  EXPECT_EQ(why.exit_code, 137);
}

TEST(NodeLinkTest, LostLauncherStopsTheOthersButDoneDoesNot) {
  auto links = JoinAll(3, FreePort());
  ASSERT_TRUE(links[0] && links[1] && links[2]);
  links[2]->ReportDone();
  links[2].reset();  // node 2 finished: its link closes after "done"
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_FALSE(links[0]->stopped(nullptr));
  links[1].reset();  // node 1's launcher is gone without "done"
  NodeStop why;
  const double s = SecondsToStop(*links[0], 5, &why);
  ASSERT_GE(s, 0);
  EXPECT_EQ(why.node, 1);
  EXPECT_EQ(why.exit_code, 1);
  EXPECT_NE(why.reason.find("node 1's launcher closed its link"), std::string::npos) << why.reason;
}

TEST(NodeLinkTest, NodeZeroGoneStopsTheMember) {
  auto links = JoinAll(2, FreePort());
  ASSERT_TRUE(links[0] && links[1]);
  links[0].reset();
  NodeStop why;
  ASSERT_GE(SecondsToStop(*links[1], 5, &why), 0);
  EXPECT_EQ(why.node, 0);
  EXPECT_NE(why.reason.find("node 0's launcher (at 127.0.0.1:"), std::string::npos) << why.reason;
}

TEST(NodeLinkTest, SilentPeerIsLostAfterTheTimeout) {
  const int port = FreePort();
  std::unique_ptr<NodeLink> hub;
  auto joined = std::async(std::launch::async, [&] { return NodeLink::Join(Options(0, 2, port), &hub); });
  // A "launcher" that says hello, reads "ready", and then never speaks again (a frozen host).
  comm::TcpSocket sock;
  Status st;
  for (int i = 0; i < 50; ++i) {
    st = comm::TcpSocket::Connect("127.0.0.1", port, comm::DeadlineIn(2), &sock);
    if (st.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(st.ok()) << st.ToString();
  unsigned char hello[256] = {0x64, 0x74, 0x4e, 0x4c, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2};  // magic, kHello, node 1, 2
  ASSERT_TRUE(sock.SendAll(hello, sizeof(hello), comm::DeadlineIn(2), "hub").ok());
  unsigned char ready[256];
  ASSERT_TRUE(sock.RecvAll(ready, sizeof(ready), comm::DeadlineIn(5), "hub").ok());
  ASSERT_TRUE(joined.get().ok());
  NodeStop why;
  const double s = SecondsToStop(*hub, 5, &why);
  ASSERT_GE(s, 0);
  EXPECT_GE(s, 0.8);  // peer_timeout_s = 1
  EXPECT_NE(why.reason.find("node 1's launcher sent nothing for 1 s"), std::string::npos) << why.reason;
}

TEST(NodeLinkTest, DisagreeingNnodesIsAnErrorOnBothSides) {
  const int port = FreePort();
  std::unique_ptr<NodeLink> hub, member;
  auto h = std::async(std::launch::async, [&] { return NodeLink::Join(Options(0, 2, port), &hub); });
  const Status m = NodeLink::Join(Options(1, 3, port), &member);
  const Status hs = h.get();
  EXPECT_EQ(hs.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(hs.message().find("--nnodes differs: node 0 has 2, node 1 has 3"), std::string::npos) << hs.message();
  EXPECT_EQ(m.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(m.message().find("refused node 1: --nnodes differs"), std::string::npos) << m.message();
}

TEST(NodeLinkTest, MissingNodeZeroIsNamedAfterTheTimeout) {
  NodeLinkOptions o = Options(1, 2, FreePort());
  o.join_timeout_s = 1;
  std::unique_ptr<NodeLink> link;
  const Status st = NodeLink::Join(o, &link);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("node 1: no launcher of node 0 at 127.0.0.1:"), std::string::npos) << st.message();
}

TEST(NodeLinkTest, MissingMemberIsNamedByNodeZero) {
  NodeLinkOptions o = Options(0, 3, FreePort());
  o.join_timeout_s = 1;
  std::unique_ptr<NodeLink> link;
  const Status st = NodeLink::Join(o, &link);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("0 of 2 other nodes' launchers arrived"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("missing: node 1, 2"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace dtrain::launcher
