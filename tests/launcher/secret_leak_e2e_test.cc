// Credentials never leak (docs/faults.md, "Security"): a 2-rank `dtrain launch` checkpointing to a real
// S3 server (Ceph RGW on loopback, scripts/s3_test_server.sh; skipped with the reason when it cannot
// start) with the credentials in AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, then a run that fails on a
// wrong secret; every byte dtrain wrote — console, per-rank logs, metrics, config.yaml, safetensors,
// every checkpoint object in the bucket — is searched for each secret: zero hits. The job secret
// (DTRAIN_JOB_SECRET, comm/job_secret.h) is planted too, and every command line of the job's processes is
// searched for it while they run. While the first run trains, `ss -ltnp` lists what the dtrain processes
// listen on: loopback only, with Open MPI's TCP transport off (OMPI_MCA_btl=self,vader, one host): an
// mpirun launch on one host opens no listener of dtrain's own (docs/faults.md, "Listeners", lists every
// one, and what Open MPI opens by default). A per-node start (no S3 needed) is searched the same way: its
// --secret-file never shows in a console, a log or a command line, and node 0 listens on the address given.

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
#include "tests/testing/free_port.h"
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

// The command lines of the running processes whose command line contains `marker` (NULs as spaces), but the
// test's own shell and `env` (they carry the planted values, as a user's environment would).
std::vector<std::string> CommandLinesWith(const std::string& marker) {
  std::vector<std::string> out;
  // /proc changes while it is read (processes exit mid-scan): the non-throwing overloads end the scan instead of
  // throwing out of the sampling loop, whose joinable std::thread would then terminate the test binary.
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(it->path().string() + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (char& c : cmd) c = c == '\0' ? ' ' : c;
    const bool own = cmd.rfind("sh -c ", 0) == 0 || cmd.rfind("env ", 0) == 0;
    if (!own && cmd.find(marker) != std::string::npos) out.push_back(cmd);
  }
  return out;
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
  const std::string job_secret = UniqueSecret("JOBSECRET");
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
  std::thread child([&] { good = RunCommand(launch(secret, "DTRAIN_JOB_SECRET=" + job_secret + " ", "good")); });
  std::vector<std::string> listeners, command_lines;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60) &&
         !std::filesystem::exists(d + "/good/final.safetensors")) {
    for (const std::string& l : DtrainListeners(d + "/good")) listeners.push_back(l);
    for (const std::string& c : CommandLinesWith(d + "/good")) command_lines.push_back(c);
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
  EXPECT_GE(command_lines.size(), 3u) << "the launcher, mpirun and the ranks were sampled";
  for (const std::string& c : command_lines) outputs.push_back({"command line: " + c.substr(0, 80), c});
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
    for (const std::string& s : {secret, wrong, token, job_secret}) {
      EXPECT_EQ(text.find(s), std::string::npos) << where;
    }
  }
  std::printf("searched %zu outputs (%zu files, %zu objects) for 4 secrets\n", outputs.size(), files, objects.size());
}

// A per-node start of two nodes with --secret-file, at debug log level: the secret reaches the workers (their
// environment) but no console, log file or command line; node 0's launcher listens on the address given.
TEST(SecretLeakE2E, PerNodeSecretFileNeverShowsAndNodeZeroListensWhereItIsTold) {
  TempDir dir;
  const std::string d = dir.path();
  const std::string job_secret = UniqueSecret("JOBSECRETFILE");
  WriteFile(d + "/secret", job_secret + "\n");
  ASSERT_EQ(RunCommand("chmod 600 " + d + "/secret").exit_code, 0);
  WriteFile(d + "/worker.sh", "#!/bin/sh\n[ \"$DTRAIN_JOB_SECRET\" = \"$(cat " + d +
                                  "/secret)\" ] && echo \"rank $RANK has the secret\"\nsleep 2\n");
  ASSERT_EQ(RunCommand("chmod +x " + d + "/worker.sh").exit_code, 0);
  const int port = FreeLoopbackPorts(2);
  std::string script = "cd " + d + "; ";
  for (int node : {0, 1}) {
    script += "DTRAIN_LOG_LEVEL=debug DTRAIN_WORKER_BIN=" + d + "/worker.sh " + DtrainBin() +
              " launch --nnodes 2 --nproc-per-node 1 --node-rank " + std::to_string(node) + " --secret-file " + d +
              "/secret --master-addr 127.0.0.1 --master-port " + std::to_string(port) + " --log-dir " + d +
              "/logs cfg.yaml > node-" + std::to_string(node) + ".log 2>&1 & ";
  }
  ProcessResult run;
  std::thread child([&] { run = RunCommand(script + "wait"); });
  std::vector<std::string> command_lines, listeners;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4)) {
    for (const std::string& c : CommandLinesWith(d)) command_lines.push_back(c);
    for (const std::string& l : DtrainListeners(d)) listeners.push_back(l);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  child.join();
  const std::string n0 = ReadFile(d + "/node-0.log"), n1 = ReadFile(d + "/node-1.log");
  EXPECT_NE(n0.find("rank 0 has the secret"), std::string::npos) << n0;
  EXPECT_NE(n1.find("rank 1 has the secret"), std::string::npos) << n1;
  EXPECT_NE(n0.find("node 0: listening on 127.0.0.1:" + std::to_string(port + 1)), std::string::npos) << n0;
  for (const std::string& l : listeners) {
    EXPECT_EQ(LocalAddress(l), "127.0.0.1:" + std::to_string(port + 1)) << "listens elsewhere: " << l;
  }
  EXPECT_GE(command_lines.size(), 2u);
  size_t searched = 0;
  for (const std::string& c : command_lines) {
    EXPECT_EQ(c.find(job_secret), std::string::npos) << "on a command line: " << c;
    ++searched;
  }
  for (const auto& e : std::filesystem::recursive_directory_iterator(d)) {
    if (!e.is_regular_file() || e.path() == d + "/secret" || e.path() == d + "/worker.sh") continue;
    EXPECT_EQ(ReadFile(e.path().string()).find(job_secret), std::string::npos) << e.path();
    ++searched;
  }
  std::printf("searched %zu command lines and files for the job secret\n", searched);
}

}  // namespace
}  // namespace dtrain::testing
