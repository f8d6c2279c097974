// Spot-termination notice end to end: `dtrain train` with checkpoint.spot_notice_url pointing at a fake metadata
// endpoint on loopback (404 for the first polls, then an AWS instance-action notice) saves a checkpoint and exits 75,
// exactly as on SIGTERM.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = "/usr/share/datasets/fashion-mnist";
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

// Answers 404 to the first `quiet` requests, then 200 with an AWS spot instance-action body.
class FakeMetadata {
 public:
  explicit FakeMetadata(int quiet) : quiet_(quiet) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeMetadata() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/latest/meta-data/spot/instance-action";
  }
  int requests() const { return requests_; }

 private:
  void Serve() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const ssize_t r = ::recv(c, buf, sizeof(buf), 0);
        if (r <= 0) break;
        req.append(buf, r);
      }
      const std::string body = "{\"action\": \"terminate\", \"time\": \"2026-11-30T08:00:00Z\"}";
      const std::string resp = requests_ < quiet_
                                   ? "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                                   : "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                                         "\r\nConnection: close\r\n\r\n" + body;
      ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
      ++requests_;
    }
  }

  const int quiet_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::thread thread_;
};

TEST(SpotE2e, NoticeCheckpointsAndExits75) {
  if (!std::ifstream(kData + "/train-images-idx3-ubyte.gz").good()) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  TempDir dir;
  const std::string d = dir.path();
  FakeMetadata server(/*quiet=*/5);
  const std::string cmd = DtrainBin() + " train " + kCiConfig +
                          " --set train.device=cpu --set train.eval=false --set train.epochs=20 "
                          "--set checkpoint.every_steps=0 --set checkpoint.spot_poll_s=0.2 --set run.dir=" +
                          d + "/run --set checkpoint.spot_notice_url=" + server.url();
  ProcessResult r = RunCommand(cmd);
  ASSERT_EQ(r.exit_code, 75) << r.output;
  EXPECT_EQ(server.requests(), 6) << "5 x 404, then the notice; no polls after it";
  EXPECT_NE(r.output.find("spot termination notice from " + server.url()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"action\": \"terminate\""), std::string::npos) << r.output;
  ProcessResult verify = RunCommand(DtrainBin() + " ckpt verify " + d + "/run/checkpoints");
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find("  OK"), std::string::npos) << verify.output;
}

}  // namespace
}  // namespace dtrain::testing
