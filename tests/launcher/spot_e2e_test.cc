// Spot-termination notice end to end: `dtrain train` with checkpoint.spot_notice_url pointing at a fake metadata
// endpoint on loopback (404 for the first polls, then an AWS instance-action notice) saves a checkpoint and exits 75,
// exactly as on SIGTERM.

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/testing/fake_http_server.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

// Answers 404 to the first `quiet` polls, then 200 with an AWS spot instance-action body.
class FakeMetadata {
 public:
  explicit FakeMetadata(int quiet) : quiet_(quiet) {}
  std::string url() const { return server_.endpoint() + "/latest/meta-data/spot/instance-action"; }
  int requests() const { return server_.responses_sent(); }

 private:
  const int quiet_;
  FakeHttpServer server_{[this](size_t i, const std::string&) {
    return static_cast<int>(i) < quiet_
               ? HttpAnswer(404)
               : HttpAnswer(200, "{\"action\": \"terminate\", \"time\": \"2026-11-30T08:00:00Z\"}");
  }};
};

TEST(SpotE2e, NoticeCheckpointsAndExits75) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
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
