// Credentials never leak (docs/faults.md, "Security"): a 2-rank `dtrain launch` checkpointing to a real
// S3 server (Ceph RGW on loopback, scripts/s3_test_server.sh; skipped with the reason when it cannot
// start) with the credentials in AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, then a run that fails on a
// wrong secret; every byte dtrain wrote — console, per-rank logs, metrics, config.yaml, safetensors,
// every checkpoint object in the bucket — is searched for each secret: zero hits. While the first run
// trains, `ss -ltnp` lists what the dtrain processes listen on: loopback only, with Open MPI's TCP
// transport off (OMPI_MCA_btl=self,vader, one host): dtrain's own code opens no listening socket
// (docs/faults.md lists what Open MPI opens by default).

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "storage/s3_storage.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
const std::string kServer = std::string(DT_SOURCE_DIR) + "/scripts/s3_test_server.sh";
const std::string kBucket = "dtrain-leak";

std::string EnvValue(const std::string& env_text, const std::string& name) {
  const size_t p = env_text.find(name + "=");
  if (p == std::string::npos) return "";
  const size_t b = p + name.size() + 1;
  return env_text.substr(b, env_text.find('\n', b) - b);
}

// A value no run could print by chance: a fixed tag and 16 random bytes in hex.
std::string UniqueSecret(const std::string& tag) {
  std::ifstream r("/dev/urandom", std::ios::binary);
  unsigned char b[16];
  r.read(reinterpret_cast<char*>(b), sizeof(b));
  std::string s = tag;
  for (unsigned char c : b) {
    s += "0123456789abcdef"[c >> 4];
    s += "0123456789abcdef"[c & 15];
  }
  return s;
}

// Runs `scripts/s3_test_server.sh stop` on scope exit.
struct ServerGuard {
  std::string dir;
  ~ServerGuard() {
    if (!dir.empty()) RunCommand(kServer + " stop " + dir);
  }
};

// Listening TCP sockets (ss -ltnp) of processes named dtrain, one line each.
// True when process `pid`'s command line contains `marker` (this test's run directory): ctest runs other
// tests' dtrain processes at the same time, and only this run's are under test.
bool CommandLineHas(const std::string& pid, const std::string& marker) {
  std::ifstream in("/proc/" + pid + "/cmdline", std::ios::binary);
  const std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmd.find(marker) != std::string::npos;
}

// `ss -ltnp` lines of listening sockets held by a dtrain process of this run (pid=N fields).
std::vector<std::string> DtrainListeners(const std::string& marker) {
  const ProcessResult r = RunCommand("ss -H -ltnp");
  std::vector<std::string> out;
  std::stringstream ss(r.output);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.find("\"dtrain\"") == std::string::npos) continue;
    bool ours = false;
    for (size_t p = line.find("pid="); p != std::string::npos && !ours; p = line.find("pid=", p + 4)) {
      ours = CommandLineHas(line.substr(p + 4, line.find_first_not_of("0123456789", p + 4) - p - 4), marker);
    }
    if (ours) out.push_back(line);
  }
  return out;
}

// The local address column of an `ss -ltn` line, e.g. "127.0.0.1:34567" or "*:22".
std::string LocalAddress(const std::string& line) {
  std::stringstream ss(line);
  std::string state, recvq, sendq, local;
  ss >> state >> recvq >> sendq >> local;
  return local;
}

bool IsLoopback(const std::string& addr) {
  return addr.rfind("127.", 0) == 0 || addr.rfind("[::1]", 0) == 0 || addr.rfind("[::ffff:127.", 0) == 0;
}

TEST(SecretLeakE2E, NoSecretInAnyOutputAndNoListenerBeyondLoopback) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  ServerGuard guard;
  const ProcessResult start = RunCommand(kServer + " start " + d + "/rgw");
  if (start.exit_code == 77) GTEST_SKIP() << "no S3 test server: " << start.output;
  ASSERT_EQ(start.exit_code, 0) << start.output;
  guard.dir = d + "/rgw";
  const std::string env = ReadFile(d + "/rgw/env");
  const std::string endpoint = EnvValue(env, "S3_TEST_ENDPOINT"), access = EnvValue(env, "S3_TEST_ACCESS_KEY");
  const std::string secret = EnvValue(env, "S3_TEST_SECRET_KEY");  // random per server start
  ASSERT_FALSE(secret.empty()) << env;
  {
    storage::StorageOptions o;
    o.endpoint = endpoint;
    o.access_key = access;
    o.secret_key = secret;
    std::unique_ptr<storage::Storage> root;
    ASSERT_TRUE(storage::Storage::Open("s3://" + kBucket, o, &root).ok());
    const Status st = dynamic_cast<storage::S3Storage&>(*root).CreateBucket();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const std::string wrong = UniqueSecret("WRONGSECRET");
  const std::string token = UniqueSecret("SESSIONTOKEN");
  auto launch = [&](const std::string& secret_value, const std::string& extra_env, const std::string& name) {
    return "env -u AWS_ENDPOINT_URL -u AWS_ENDPOINT_URL_S3 -u AWS_SESSION_TOKEN AWS_ACCESS_KEY_ID=" + access +
           " AWS_SECRET_ACCESS_KEY=" + secret_value + " OMPI_MCA_btl=self,vader " + extra_env + DtrainBin() +
           " launch --nproc-per-node 2 --log-dir " + d + "/" + name + "/logs " + kCiConfig +
           " --set train.device=cpu --set train.log_every=5 --set train.max_steps=20 --set checkpoint.every_steps=5"
           " --set checkpoint.url=s3://" +
           kBucket + "/" + name + " --set storage.endpoint=" + endpoint + " --set run.dir=" + d + "/" + name;
  };

  // 1. A good run; `ss -ltnp` is sampled while it trains.
  ProcessResult good;
  std::thread child([&] { good = RunCommand(launch(secret, "", "good")); });
  std::vector<std::string> listeners;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60) &&
         !std::filesystem::exists(d + "/good/final.safetensors")) {
    for (const std::string& l : DtrainListeners(d + "/good")) listeners.push_back(l);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  child.join();
  ASSERT_EQ(good.exit_code, 0) << good.output;
  for (const std::string& l : listeners) EXPECT_TRUE(IsLoopback(LocalAddress(l))) << "listens beyond loopback: " << l;
  std::printf("dtrain listening sockets seen during the run: %zu\n", listeners.size());

  // 2. A wrong secret, with a session token: fails at once, naming the variable to check.
  const ProcessResult bad = RunCommand(launch(wrong, "AWS_SESSION_TOKEN=" + token + " ", "bad"));
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("S3 rejected the credentials for s3://" + kBucket + "/bad"), std::string::npos)
      << bad.output;

  // 3. Every output: the consoles, every file under the run directories, every object in the bucket.
  std::vector<std::pair<std::string, std::string>> outputs = {{"console of the good run", good.output},
                                                              {"console of the failed run", bad.output}};
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(d)) {
    if (!e.is_regular_file() || e.path().string().rfind(d + "/rgw", 0) == 0) continue;  // the server's own
    outputs.push_back({e.path().string(), ReadFile(e.path().string())});
    ++files;
  }
  storage::StorageOptions o;
  o.endpoint = endpoint;
  o.access_key = access;
  o.secret_key = secret;
  std::unique_ptr<storage::Storage> bucket;
  ASSERT_TRUE(storage::Storage::Open("s3://" + kBucket, o, &bucket).ok());
  std::vector<storage::ObjectInfo> objects;
  ASSERT_TRUE(bucket->List("", &objects).ok());
  for (const storage::ObjectInfo& obj : objects) {
    std::string bytes;
    ASSERT_TRUE(bucket->Get(obj.key, &bytes).ok()) << obj.key;
    outputs.push_back({"s3://" + kBucket + "/" + obj.key, bytes});
  }
  EXPECT_GE(files, 6u) << "metrics, config.yaml, final.safetensors and rank logs of each run";
  EXPECT_GE(objects.size(), 3u * 4) << "3 kept checkpoints of params, 2 AdamW moments and a manifest";
  for (const auto& [where, text] : outputs) {
    for (const std::string& s : {secret, wrong, token}) EXPECT_EQ(text.find(s), std::string::npos) << where;
  }
  std::printf("searched %zu outputs (%zu files, %zu objects) for 3 secrets\n", outputs.size(), files, objects.size());
}

}  // namespace
}  // namespace dtrain::testing
