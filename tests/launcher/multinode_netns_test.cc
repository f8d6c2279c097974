// Multi-node training on one machine: two "hosts" made of network namespaces
// (scripts/netns_cluster.sh: dtns1 = 10.77.0.1, dtns2 = 10.77.0.2, bridged by a switch namespace),
// `dtrain launch --hosts` running mpirun in the root namespace, Open MPI starting its daemons
// through scripts/netns_rsh.sh instead of ssh, and the gradients crossing the veth interfaces over
// Open MPI's TCP transport. Needs root (CI runs as root); skips with the reason otherwise.
// The per-node start (`dtrain launch --node-rank R`, no mpirun) runs across the two namespaces too, with the job
// secret from --secret-file: node 0's launcher listens on the address given (10.77.0.1), and a launcher in the
// other host without the secret is refused while the real node joins.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/netns_cluster.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kSource = DT_SOURCE_DIR;
const std::string kCluster = kSource + "/scripts/netns_cluster.sh";
const std::string kAgent = kSource + "/scripts/netns_rsh.sh";
const std::string kCiConfig = kSource + "/configs/fashion_mnist_mlp_ci.yaml";
const std::string kData = ::dtrain::testing::kFashionMnistDir;
constexpr int kSkipExit = NetnsCluster::kSkipExit;
// Parameters of the 784-256-128-10 MLP of the CI config (weights + biases).
constexpr int64_t kParams = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;

// A byte counter of eth0 inside namespace `ns` (rx_bytes, tx_bytes); -1 when unreadable.
int64_t Counter(const std::string& ns, const std::string& name) {
  const ProcessResult r = RunCommand("ip netns exec " + ns + " cat /sys/class/net/eth0/statistics/" + name);
  return r.exit_code == 0 ? std::stoll(r.output) : -1;
}

// PIDs of processes inside namespace `ns` ("" when none), after up to `wait_s` seconds for them to exit.
std::string PidsIn(const std::string& ns, int wait_s) {
  std::string pids;
  for (int i = 0; i <= wait_s * 10; ++i) {
    pids = RunCommand("ip netns pids " + ns).output;
    if (pids.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pids;
}

// Each test gets a fresh 2-host cluster, torn down afterwards; skips where namespaces cannot be made.
class MultinodeNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (RunCommand("command -v ip && command -v mpirun").exit_code != 0) GTEST_SKIP() << "needs `ip` and `mpirun`";
    DT_SKIP_WITHOUT_FASHION_MNIST();
    if (geteuid() != 0)
      GTEST_SKIP() << "needs root: network namespaces and veth pairs need CAP_SYS_ADMIN/CAP_NET_ADMIN";
    ASSERT_TRUE(lock_.held()) << "cannot lock /tmp/dtrain-netns-test.lock";
    const ProcessResult up = cluster_.Up(2);
    if (up.exit_code == kSkipExit) GTEST_SKIP() << "no network namespaces here: " << up.output;
    ASSERT_EQ(up.exit_code, 0) << up.output;
  }

  // Writes the worker wrapper: it records, per rank, the network namespace it runs in (named by
  // `ip netns identify`, the kernel's view of the process) and its hostname in DIR/where.RANK,
  // runs `rank1_script` in rank 1, then execs dtrain.
  std::string WriteWorker(const std::string& dir, const std::string& rank1_script) {
    const std::string path = dir + "/worker.sh";
    WriteFile(path, "#!/bin/sh\necho \"$(ip netns identify $$) $(uname -n)\" > " + dir +
                        "/where.$OMPI_COMM_WORLD_RANK\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then :; " + rank1_script +
                        "\nfi\nexec " + DtrainBin() + " \"$@\"\n");
    EXPECT_EQ(RunCommand("chmod +x " + path).exit_code, 0);
    return path;
  }

  // `dtrain launch` of the CI config on 10.77.0.1 and 10.77.0.2, one CPU rank each, with `worker`.
  ProcessResult Launch(const std::string& worker, const std::string& run_dir) {
    std::string mpirun_args;
    for (const char* a : {"--mca", "plm_rsh_agent", kAgent.c_str(),              // ssh -> enter the namespace
                          "--mca", "oob_tcp_if_include", "10.77.0.0/24",         // daemons <-> mpirun
                          "--mca", "btl_tcp_if_include", "10.77.0.0/24",         // rank <-> rank
                          "--mca", "pml", "ob1", "--mca", "btl", "tcp,self"}) {  // TCP, no shared memory
      mpirun_args += std::string(" --mpirun-arg=") + a;
    }
    return RunCommand("DTRAIN_WORKER_BIN=" + worker + " " + DtrainBin() + " launch --hosts 10.77.0.1:1,10.77.0.2:1" +
                      mpirun_args + " " + kCiConfig + " --set train.device=cpu --set run.dir=" + run_dir);
  }

  const std::vector<std::string> hosts_ = {"dtns1", "dtns2"};
  MachineLock lock_{"/tmp/dtrain-netns-test.lock"};
  NetnsCluster cluster_;
};

// Two namespaces, one rank each: training converges as on one host, each rank provably ran in its
// own namespace, and at least the all-reduced gradient bytes went through each host's eth0.
TEST_F(MultinodeNetns, TwoHostsTrainOverVeth) {
  std::vector<int64_t> rx0, tx0;
  for (const auto& ns : hosts_) {
    rx0.push_back(Counter(ns, "rx_bytes"));
    tx0.push_back(Counter(ns, "tx_bytes"));
    ASSERT_GE(rx0.back(), 0) << ns;
  }
  TempDir dir;
  const std::string d = dir.path();
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult run = Launch(WriteWorker(d, ""), d + "/run");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::cout << "[          ] 2-host launch took " << seconds << " s\n";

  // Rank r ran on host r+1 (--map-by slot), in that host's namespace, under its hostname, which
  // also prefixes rank 0's log lines.
  EXPECT_EQ(ReadFile(d + "/where.0"), "dtns1 dtns1\n") << run.output;
  EXPECT_EQ(ReadFile(d + "/where.1"), "dtns2 dtns2\n") << run.output;
  EXPECT_NE(run.output.find(" dtns1:0 "), std::string::npos) << run.output;

  // Training worked across the hosts.
  const std::string metrics = ReadFile(d + "/run/metrics.jsonl");
  const auto evals = Lines(metrics, "\"kind\":\"eval\"");
  ASSERT_EQ(evals.size(), 1u) << metrics;
  EXPECT_GT(Field(evals[0], "eval_accuracy"), 0.7) << evals[0];
  const auto trains = Lines(metrics, "\"kind\":\"train\"");
  ASSERT_FALSE(trains.empty()) << metrics;
  const double steps = Field(trains.back(), "step");
  ASSERT_GE(steps, 20) << trains.back();

  // Every step all-reduces kParams float gradients between the two hosts, and in any all-reduce of
  // 2 ranks each rank receives (and sends) at least the vector's size. So each eth0 carried at
  // least kParams * 4 B * steps each way (steps up to the last logged one: a lower bound).
  const int64_t min_bytes = kParams * 4 * static_cast<int64_t>(steps);
  for (size_t i = 0; i < hosts_.size(); ++i) {
    const int64_t rx = Counter(hosts_[i], "rx_bytes") - rx0[i];
    const int64_t tx = Counter(hosts_[i], "tx_bytes") - tx0[i];
    std::cout << "[          ] " << hosts_[i] << " eth0: rx " << rx << " B, tx " << tx
              << " B (gradients >= " << min_bytes << " B)\n";
    EXPECT_GE(rx, min_bytes) << hosts_[i];
    EXPECT_GE(tx, min_bytes) << hosts_[i];
  }

  // Nothing is left behind: no process in either host once the launcher returned, no namespace after down.
  for (const auto& ns : hosts_) EXPECT_EQ(PidsIn(ns, 5), "") << "processes left in " << ns;
  const ProcessResult down = cluster_.Down();
  EXPECT_EQ(down.exit_code, 0) << down.output;
  EXPECT_EQ(RunCommand("ip netns list | grep -E '^dtns[0-9]+( |$)'").output, "");
  EXPECT_NE(RunCommand("ip link show dtns-root").exit_code, 0) << "the root namespace's veth is left";
}

// A rank that fails on the second host while the first trains: the launcher names the rank and
// host, returns its exit code, and no process survives on either host.
TEST_F(MultinodeNetns, FailureOnOneHostStopsTheOtherAndNamesIt) {
  TempDir dir;
  const std::string d = dir.path();
  // Rank 1 waits (up to 10 s) until rank 0 has started, gives it a second to enter training, then fails.
  const std::string fail = "for i in $(seq 100); do [ -e " + d +
                           "/where.0 ] && break; sleep 0.1; done; sleep 1; echo 'rank 1 gives up' >&2; exit 3";
  const ProcessResult run = Launch(WriteWorker(d, fail), d + "/run");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_NE(run.output.find("rank 1 on host 10.77.0.2 failed first: exit code 3"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("rank 1 gives up"), std::string::npos) << run.output;
  EXPECT_EQ(ReadFile(d + "/where.0"), "dtns1 dtns1\n");
  for (const auto& ns : hosts_) EXPECT_EQ(PidsIn(ns, 5), "") << "processes left in " << ns;
}

// Per-node start across the two hosts, each launcher in its own namespace with the same --secret-file; first an
// intruder on host 2 that holds another secret asks to be node 1 and is refused (exit 2, never counted), then the
// real node 1 joins and the job runs to the end. A shell worker stands in for training (the CPU path needs MPI).
TEST_F(MultinodeNetns, PerNodeStartWithTheSecretRefusesAPeerWithout) {
  TempDir dir;
  const std::string d = dir.path();
  WriteFile(d + "/worker.sh",
            "#!/bin/sh\necho \"rank $RANK in $(ip netns identify $$) secret ${#DTRAIN_JOB_SECRET}\" > " + d +
                "/ran.$RANK\nexit 0\n");
  WriteFile(d + "/secret", "9c2e7a41d0b35f86e1a4c7092d5b8f3e6a1c4d7092b5e8f1a3c6d9e2b4f7a0c5\n");
  WriteFile(d + "/other", "an-intruders-secret-of-more-than-32-characters\n");
  ASSERT_EQ(RunCommand("chmod +x " + d + "/worker.sh && chmod 600 " + d + "/secret " + d + "/other").exit_code, 0);
  const std::string launch = "env DTRAIN_WORKER_BIN=" + d + "/worker.sh " + DtrainBin() +
                             " launch --nnodes 2 --master-addr 10.77.0.1 --master-port 29610 --nproc-per-node 1 " +
                             kCiConfig + " --node-rank ";
  const ProcessResult run =
      RunCommand("cd " + d + "; ip netns exec dtns1 " + launch +
                 "0 --secret-file secret > node-0.log 2>&1 & pid=$!; sleep 1; " + "ip netns exec dtns2 " + launch +
                 "1 --secret-file other > intruder.log 2>&1; echo $? > rc-intruder; " + "ip netns exec dtns2 " +
                 launch + "1 --secret-file secret > node-1.log 2>&1; echo $? > rc-1; wait $pid; " + "echo $? > rc-0");
  const std::string n0 = ReadFile(d + "/node-0.log"), n1 = ReadFile(d + "/node-1.log");
  const std::string intruder = ReadFile(d + "/intruder.log");
  EXPECT_EQ(ReadFile(d + "/rc-intruder"), "2\n") << intruder;
  EXPECT_NE(intruder.find("holds another job secret"), std::string::npos) << intruder;
  EXPECT_NE(n0.find("node 0: listening on 10.77.0.1:29611"), std::string::npos) << n0;
  EXPECT_NE(n0.find("dropped a connection from 10.77.0.2:"), std::string::npos) << n0;
  EXPECT_EQ(ReadFile(d + "/rc-0"), "0\n") << n0;
  EXPECT_EQ(ReadFile(d + "/rc-1"), "0\n") << n1;
  EXPECT_EQ(ReadFile(d + "/ran.0"), "rank 0 in dtns1 secret 64\n");
  EXPECT_EQ(ReadFile(d + "/ran.1"), "rank 1 in dtns2 secret 64\n");
  for (const auto& ns : hosts_) EXPECT_EQ(PidsIn(ns, 5), "") << "processes left in " << ns;
}

}  // namespace
}  // namespace dtrain::testing
