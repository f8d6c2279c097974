// NodeLink over real loopback sockets: per-node launchers join, a failure on one node reaches every node with its
// code and reason, a lost launcher (closed link, or silence) stops the others, "done" is no failure, and
// disagreements and a missing node 0 are clear errors. The attacks of issue 38: a stray process without the job
// secret (a valid-looking hello, a hello with another nnodes, idle connections) is never counted and stalls no
// one; a node with another secret is refused; a listener posing as node 0 is found out; a signal stops a join.

#include "launcher/node_link.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "comm/job_secret.h"
#include "comm/tcp_socket.h"

namespace dtrain::launcher {
namespace {

using Clock = std::chrono::steady_clock;

int FreePort() {
  comm::TcpSocket s;
  EXPECT_TRUE(comm::TcpSocket::Listen("127.0.0.1", 0, &s).ok());
  return s.local_port();
}

comm::JobSecret Secret(const char* text = "a-job-secret-of-more-than-32-characters") {
  comm::JobSecret s;
  EXPECT_TRUE(comm::JobSecret::FromText(text, "test", &s).ok());
  return s;
}

NodeLinkOptions Options(int node, int nnodes, int port) {
  NodeLinkOptions o;
  o.secret = Secret();
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

// A connection to the hub at `port` (retrying while it starts to listen).
comm::TcpSocket ConnectTo(int port, const char* host = "127.0.0.1") {
  comm::TcpSocket sock;
  Status st;
  for (int i = 0; i < 100; ++i) {
    st = comm::TcpSocket::Connect(host, port, comm::DeadlineIn(2), &sock);
    if (st.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(st.ok()) << st.ToString();
  return sock;
}

// The frame a launcher of an older dtrain (or a stray that read the code) sends: magic, kHello, node, nnodes.
std::array<unsigned char, 256> RawHello(int node, int nnodes) {
  std::array<unsigned char, 256> f{};
  const unsigned char head[16] = {0x64, 0x74, 0x4e, 0x4c,
                                  0,    0,    0,    1,
                                  0,    0,    0,    static_cast<unsigned char>(node),
                                  0,    0,    0,    static_cast<unsigned char>(nnodes)};
  std::copy(head, head + 16, f.begin());
  return f;
}

// Reads until the hub closes; the bytes it sent.
std::string ReadUntilClosed(const comm::TcpSocket& sock, double seconds) {
  std::string got;
  const comm::Deadline d = comm::DeadlineIn(seconds);
  char c;
  while (sock.RecvAll(&c, 1, d, "hub").ok()) got.push_back(c);
  return got;
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
  comm::TcpSocket sock = ConnectTo(port);
  ASSERT_TRUE(comm::ClientHandshake(sock, Secret(), "dtrain node-link 2", comm::DeadlineIn(5), "hub").ok());
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

// --- attacks (issue 38) --------------------------------------------------------------------------

TEST(NodeLinkAttackTest, StrayWithAValidLookingHelloIsRefusedAndTheRealNodeJoins) {
  const int port = FreePort();
  std::unique_ptr<NodeLink> hub;
  auto h = std::async(std::launch::async, [&] { return NodeLink::Join(Options(0, 2, port), &hub); });
  // The stray sends the hello a real node 1 would send (right nnodes, right attempt), without the handshake.
  comm::TcpSocket stray = ConnectTo(port);
  const auto hello = RawHello(1, 2);
  ASSERT_TRUE(stray.SendAll(hello.data(), hello.size(), comm::DeadlineIn(2), "hub").ok());
  // A stray that knows the protocol but not the secret: the handshake with another secret.
  comm::TcpSocket stray2 = ConnectTo(port);
  const Status refused = comm::ClientHandshake(stray2, Secret("another-secret-of-more-than-32-characters"),
                                               "dtrain node-link 2", comm::DeadlineIn(5), "hub");
  EXPECT_EQ(refused.code(), Status::Code::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("holds another job secret"), std::string::npos) << refused.message();
  // The real node 1 joins, and it is the hub's node 1.
  std::unique_ptr<NodeLink> member;
  ASSERT_TRUE(NodeLink::Join(Options(1, 2, port), &member).ok());
  ASSERT_TRUE(h.get().ok());
  // Node 1's failure reaches the hub: the link it holds is the real node's.
  member->ReportFailure(3, "rank 1 failed first: exit code 3");
  NodeStop why;
  ASSERT_GE(SecondsToStop(*hub, 5, &why), 0);
  EXPECT_EQ(why.reason, "rank 1 failed first: exit code 3");
  // The strays heard nothing of the job: at most the challenge and the "refused" verdict (all zeros but a 1).
  const std::string heard = ReadUntilClosed(stray, 3);
  EXPECT_LE(heard.size(), comm::kChallengeBytes + comm::kVerdictBytes);
  for (size_t i = comm::kChallengeBytes; i < heard.size(); ++i) {
    EXPECT_EQ(heard[i], i == comm::kChallengeBytes + 3 ? 1 : 0) << "byte " << i;
  }
  EXPECT_EQ(ReadUntilClosed(stray2, 3), "") << "after the refusal the hub closes";
}

TEST(NodeLinkAttackTest, StrayHelloWithAnotherNnodesIsIgnoredAndTheJobContinues) {
  const int port = FreePort();
  std::unique_ptr<NodeLink> hub;
  auto h = std::async(std::launch::async, [&] { return NodeLink::Join(Options(0, 2, port), &hub); });
  comm::TcpSocket stray = ConnectTo(port);
  const auto hello = RawHello(1, 3);  // made node 0 exit 2 before the job secret
  ASSERT_TRUE(stray.SendAll(hello.data(), hello.size(), comm::DeadlineIn(2), "hub").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::unique_ptr<NodeLink> member;
  ASSERT_TRUE(NodeLink::Join(Options(1, 2, port), &member).ok());
  const Status hs = h.get();
  EXPECT_TRUE(hs.ok()) << hs.ToString();
  EXPECT_FALSE(hub->stopped(nullptr));
}

TEST(NodeLinkAttackTest, IdleConnectionsDoNotDelayTheJoin) {
  const int port = FreePort();
  std::unique_ptr<NodeLink> hub;
  auto h = std::async(std::launch::async, [&] { return NodeLink::Join(Options(0, 2, port), &hub); });
  std::vector<comm::TcpSocket> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(ConnectTo(port));  // each used to stall the join for 10 s
  const auto start = Clock::now();
  std::unique_ptr<NodeLink> member;
  ASSERT_TRUE(NodeLink::Join(Options(1, 2, port), &member).ok());
  ASSERT_TRUE(h.get().ok());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
}

TEST(NodeLinkAttackTest, NodeWithAnotherSecretIsRefusedAtOnce) {
  const int port = FreePort();
  NodeLinkOptions ho = Options(0, 2, port);
  ho.join_timeout_s = 3;
  std::unique_ptr<NodeLink> hub, member;
  auto h = std::async(std::launch::async, [&] { return NodeLink::Join(ho, &hub); });
  NodeLinkOptions mo = Options(1, 2, port);
  mo.secret = Secret("another-secret-of-more-than-32-characters");
  const auto start = Clock::now();
  const Status m = NodeLink::Join(mo, &member);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);  // not retried until the timeout
  EXPECT_EQ(m.code(), Status::Code::kInvalidArgument) << m.ToString();
  EXPECT_NE(m.message().find("node 1: node 0's launcher at 127.0.0.1:"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("holds another job secret"), std::string::npos) << m.message();
  const Status hs = h.get();  // node 0 never counted it
  EXPECT_EQ(hs.code(), Status::Code::kUnavailable) << hs.ToString();
  EXPECT_NE(hs.message().find("missing: node 1 (1 connection(s) dropped"), std::string::npos) << hs.message();
}

TEST(NodeLinkAttackTest, ListenerThatCannotProveTheSecretIsNotNodeZero) {
  // A process squatting on MASTER_PORT+1 that speaks the handshake and accepts any proof.
  comm::TcpSocket listener;
  ASSERT_TRUE(comm::TcpSocket::Listen("127.0.0.1", 0, &listener).ok());
  std::thread impostor([&] {
    comm::TcpSocket conn;
    std::string from;
    if (!listener.Accept(comm::DeadlineIn(5), &conn, &from).ok()) return;
    comm::Challenge challenge;
    ASSERT_TRUE(comm::JobSecret::MakeChallenge(&challenge).ok());
    (void)conn.SendAll(challenge.data(), challenge.size(), comm::DeadlineIn(2), "member");
    comm::Answer answer;
    (void)conn.RecvAll(answer.data(), answer.size(), comm::DeadlineIn(2), "member");
    comm::Verdict accept{};  // "accepted", with a proof it cannot make
    (void)conn.SendAll(accept.data(), accept.size(), comm::DeadlineIn(2), "member");
    char c;
    (void)conn.RecvAll(&c, 1, comm::DeadlineIn(2), "member");  // the member must send nothing more
  });
  std::unique_ptr<NodeLink> member;
  const Status m = NodeLink::Join(Options(1, 2, listener.local_port()), &member);
  impostor.join();
  EXPECT_EQ(m.code(), Status::Code::kInvalidArgument) << m.ToString();
  EXPECT_NE(m.message().find("is not this job's"), std::string::npos) << m.message();
}

TEST(NodeLinkAttackTest, HubListensOnlyOnTheAddressGiven) {
  const int port = FreePort();
  NodeLinkOptions ho = Options(0, 2, port);
  ho.join_timeout_s = 2;
  std::unique_ptr<NodeLink> hub;
  auto h = std::async(std::launch::async, [&] { return NodeLink::Join(ho, &hub); });
  ConnectTo(port);  // listening on 127.0.0.1
  comm::TcpSocket other;
  // 127.0.0.2 is this host too (all of 127/8 is loopback): a listener on 0.0.0.0 would take it.
  EXPECT_FALSE(comm::TcpSocket::Connect("127.0.0.2", port, comm::DeadlineIn(1), &other).ok());
  (void)h.get();
}

TEST(NodeLinkAttackTest, SignalStopsTheJoinAtOnceOnBothSides) {
  for (int node : {0, 1}) {
    int pipe_fds[2];
    ASSERT_EQ(pipe(pipe_fds), 0);
    NodeLinkOptions o = Options(node, 2, FreePort());
    o.join_timeout_s = 300;
    o.cancel_fd = pipe_fds[0];
    std::unique_ptr<NodeLink> link;
    int sig = 0;
    auto j = std::async(std::launch::async, [&] { return NodeLink::Join(o, &link, &sig); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto start = Clock::now();
    const unsigned char byte = SIGINT;
    ASSERT_EQ(write(pipe_fds[1], &byte, 1), 1);
    const Status st = j.get();
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 1.0) << "node " << node;
    EXPECT_EQ(st.code(), Status::Code::kAborted) << "node " << node << ": " << st.ToString();
    EXPECT_EQ(sig, SIGINT) << "node " << node;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
  }
}

}  // namespace
}  // namespace dtrain::launcher
