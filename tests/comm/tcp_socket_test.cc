// TcpSocket on loopback within one process: bounded waits on a silent peer, a closed peer, Shutdown
// waking a blocked receive, a refused connection.
#include "comm/tcp_socket.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace dtrain::comm {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A connected pair on 127.0.0.1: `client` connected to `server`.
void Pair(TcpSocket* client, TcpSocket* server) {
  TcpSocket listener;
  ASSERT_TRUE(TcpSocket::Listen("127.0.0.1", 0, &listener).ok());
  ASSERT_TRUE(TcpSocket::Connect("127.0.0.1", listener.local_port(), DeadlineIn(5), client).ok());
  std::string from;
  ASSERT_TRUE(listener.Accept(DeadlineIn(5), server, &from).ok());
  EXPECT_EQ(from.rfind("127.0.0.1:", 0), 0u) << from;
}

TEST(TcpSocketTest, BytesArriveInOrder) {
  TcpSocket a, b;
  Pair(&a, &b);
  const std::string msg(100000, 'x');  // more than one segment
  std::thread sender([&] { EXPECT_TRUE(a.SendAll(msg.data(), msg.size(), DeadlineIn(10), "b").ok()); });
  std::string got(msg.size(), '\0');
  EXPECT_TRUE(b.RecvAll(&got[0], got.size(), DeadlineIn(10), "a").ok());
  sender.join();
  EXPECT_EQ(got, msg);
}

TEST(TcpSocketTest, SilentPeerTimesOutInsteadOfHanging) {
  TcpSocket a, b;
  Pair(&a, &b);
  char c;
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = b.RecvAll(&c, 1, DeadlineIn(0.5), "rank 3");
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(), "receiving from rank 3 timed out");
  EXPECT_GE(Since(t0), 0.45);
  EXPECT_LT(Since(t0), 2.0);
}

TEST(TcpSocketTest, ClosedPeerIsReported) {
  TcpSocket a, b;
  Pair(&a, &b);
  a = TcpSocket();  // closes
  char c;
  const Status st = b.RecvAll(&c, 1, DeadlineIn(5), "rank 1");
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(), "connection closed by the peer (rank 1)");
}

TEST(TcpSocketTest, ShutdownWakesABlockedReceive) {
  TcpSocket a, b;
  Pair(&a, &b);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    b.Shutdown();
  });
  char c;
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = b.RecvAll(&c, 1, DeadlineIn(30), "rank 0");
  killer.join();
  EXPECT_FALSE(st.ok());
  EXPECT_LT(Since(t0), 5.0);
}

TEST(TcpSocketTest, RefusedConnectionSaysSo) {
  TcpSocket l;
  ASSERT_TRUE(TcpSocket::Listen("127.0.0.1", 0, &l).ok());
  const int port = l.local_port();
  l = TcpSocket();
  TcpSocket c;
  const Status st = TcpSocket::Connect("127.0.0.1", port, DeadlineIn(5), &c);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(), "cannot connect to 127.0.0.1:" + std::to_string(port) + ": Connection refused");
}

TEST(TcpSocketTest, AcceptWithoutClientTimesOut) {
  TcpSocket l, s;
  ASSERT_TRUE(TcpSocket::Listen("0.0.0.0", 0, &l).ok());
  std::string from;
  const Status st = l.Accept(DeadlineIn(0.3), &s, &from);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(), "waiting for a connection timed out");
}

}  // namespace
}  // namespace dtrain::comm
