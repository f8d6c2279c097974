// DetectDistEnvFrom: pure function of an environment map (no MPI, no process env).
#include "comm/dist_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace dtrain::comm {
namespace {

using Env = std::map<std::string, std::string>;

DistEnv MustDetect(const Env& env) {
  DistEnv d;
  Status st = DetectDistEnvFrom(env, &d);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return d;
}

// Expects InvalidArgument whose message names `var`.
void ExpectInvalid(const Env& env, const std::string& var) {
  DistEnv d;
  Status st = DetectDistEnvFrom(env, &d);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(var), std::string::npos) << "'" << st.message() << "' does not name " << var;
}

TEST(DistEnvTest, EmptyEnvironmentIsSingleProcess) {
  const DistEnv d = MustDetect({});
  EXPECT_EQ(d.source, "single");
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.local_rank, 0);
  EXPECT_EQ(d.local_world_size, 1);
  EXPECT_EQ(d.node_rank, 0);
  EXPECT_EQ(d.master_addr, "127.0.0.1");
  EXPECT_EQ(d.master_port, 29500);
  EXPECT_EQ(d.restart_count, 0);
  EXPECT_FALSE(d.launched);
  EXPECT_FALSE(d.slurm_job);
}

TEST(DistEnvTest, TorchrunVariables) {
  const DistEnv d = MustDetect({{"RANK", "13"},
                                {"WORLD_SIZE", "16"},
                                {"LOCAL_RANK", "5"},
                                {"LOCAL_WORLD_SIZE", "8"},
                                {"NODE_RANK", "1"},
                                {"MASTER_ADDR", "node-a"},
                                {"MASTER_PORT", "29611"},
                                {"DTRAIN_RESTART_COUNT", "3"}});
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.rank, 13);
  EXPECT_EQ(d.world_size, 16);
  EXPECT_EQ(d.local_rank, 5);
  EXPECT_EQ(d.local_world_size, 8);
  EXPECT_EQ(d.node_rank, 1);
  EXPECT_EQ(d.master_addr, "node-a");
  EXPECT_EQ(d.master_port, 29611);
  EXPECT_EQ(d.restart_count, 3);
  EXPECT_TRUE(d.launched);
  EXPECT_FALSE(d.slurm_job);
}

TEST(DistEnvTest, TorchrunDefaultsToOneNode) {
  const DistEnv d = MustDetect({{"RANK", "2"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(d.local_rank, 2);
  EXPECT_EQ(d.local_world_size, 4);
  EXPECT_EQ(d.node_rank, 0);
}

TEST(DistEnvTest, TorchrunWinsOverOmpiAndSlurm) {
  const DistEnv d = MustDetect({{"RANK", "1"},
                                {"WORLD_SIZE", "2"},
                                {"OMPI_COMM_WORLD_RANK", "0"},
                                {"OMPI_COMM_WORLD_SIZE", "2"},
                                {"SLURM_PROCID", "0"},
                                {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.rank, 1);
}

TEST(DistEnvTest, OpenMpiVariables) {
  // 3 nodes x 4 slots, by-slot mapping: rank 9 is local rank 1 on node 2. OMPI_COMM_WORLD_NODE_RANK is
  // a per-node process rank in Open MPI, not a node index, and must not be taken as one.
  const DistEnv d = MustDetect({{"OMPI_COMM_WORLD_RANK", "9"},
                                {"OMPI_COMM_WORLD_SIZE", "12"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                {"OMPI_COMM_WORLD_NODE_RANK", "1"}});
  EXPECT_EQ(d.source, "ompi");
  EXPECT_EQ(d.rank, 9);
  EXPECT_EQ(d.world_size, 12);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 4);
  EXPECT_EQ(d.node_rank, 2);
  // The launcher may state the node explicitly.
  EXPECT_EQ(MustDetect({{"OMPI_COMM_WORLD_RANK", "9"},
                        {"OMPI_COMM_WORLD_SIZE", "12"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                        {"NODE_RANK", "1"}})
                .node_rank,
            1);
}

TEST(DistEnvTest, SlurmVariables) {
  const DistEnv d = MustDetect({{"SLURM_PROCID", "9"},
                                {"SLURM_NTASKS", "11"},
                                {"SLURM_LOCALID", "1"},
                                {"SLURM_NODEID", "2"},
                                {"SLURM_TASKS_PER_NODE", "4(x2),3"}});
  EXPECT_EQ(d.source, "slurm");
  EXPECT_EQ(d.rank, 9);
  EXPECT_EQ(d.world_size, 11);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.node_rank, 2);
  EXPECT_EQ(d.local_world_size, 3);
  // The step's layout wins over the job's.
  EXPECT_EQ(MustDetect({{"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "4"},
                        {"SLURM_LOCALID", "0"},
                        {"SLURM_NODEID", "0"},
                        {"SLURM_TASKS_PER_NODE", "8"},
                        {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}})
                .local_world_size,
            2);
  EXPECT_EQ(MustDetect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "2"}}).local_world_size,
            2);
}

TEST(DistEnvTest, SlurmJobAndRequeueCount) {
  const DistEnv d = MustDetect({{"SLURM_JOB_ID", "77"}, {"SLURM_RESTART_COUNT", "2"}});
  EXPECT_TRUE(d.slurm_job);
  EXPECT_EQ(d.requeue_count, 2);
  EXPECT_FALSE(d.launched);
}

TEST(DistEnvTest, MalformedValuesNameTheVariable) {
  ExpectInvalid({{"RANK", "abc"}, {"WORLD_SIZE", "2"}}, "RANK");
  ExpectInvalid({{"RANK", "1x"}, {"WORLD_SIZE", "2"}}, "RANK");
  ExpectInvalid({{"RANK", ""}, {"WORLD_SIZE", "2"}}, "RANK");
  ExpectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}, "WORLD_SIZE");
  ExpectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "http"}}, "MASTER_PORT");
  ExpectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"DTRAIN_RESTART_COUNT", "once"}}, "DTRAIN_RESTART_COUNT");
  ExpectInvalid({{"OMPI_COMM_WORLD_RANK", "zero"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_RANK");
  ExpectInvalid({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2(y2)"}},
                "SLURM_TASKS_PER_NODE");
}

TEST(DistEnvTest, InconsistentValuesNameTheVariable) {
  ExpectInvalid({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK");
  ExpectInvalid({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, "RANK");
  ExpectInvalid({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE");
  ExpectInvalid({{"RANK", "0"}}, "WORLD_SIZE");
  ExpectInvalid({{"WORLD_SIZE", "2"}}, "RANK");
  ExpectInvalid({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}, "LOCAL_RANK");
  ExpectInvalid({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "8"}}, "LOCAL_WORLD_SIZE");
  ExpectInvalid({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"NODE_RANK", "-2"}}, "NODE_RANK");
  ExpectInvalid({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT");
  ExpectInvalid({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"DTRAIN_RESTART_COUNT", "-1"}}, "DTRAIN_RESTART_COUNT");
  ExpectInvalid({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_RANK");
  ExpectInvalid({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "2"}}, "SLURM_PROCID");
  ExpectInvalid(
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NODEID", "3"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}},
      "SLURM_NODEID");
}

TEST(DistEnvTest, DetectDistEnvReadsTheProcessEnvironment) {
  // Whatever launched this test (ctest, mpirun, srun), detection succeeds and is self-consistent.
  DistEnv d;
  Status st = DetectDistEnv(&d);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(d.rank, 0);
  EXPECT_LT(d.rank, d.world_size);
}

}  // namespace
}  // namespace dtrain::comm
