#pragma once
// The command lines that start and stop scripts/slurm_test_cluster.sh's one-machine cluster for a test. The start
// hands the cluster to this test process (SLURM_TEST_OWNER): once the process ends, even killed by ctest's
// timeout before its TearDown ran, the cluster stops itself, so no daemon or job rank outlives the test.

#include <unistd.h>

#include <string>

namespace dtrain::testing {

// `scripts/slurm_test_cluster.sh start DIR CPUS` with `nodes` nodes (SLURM_TEST_NODES), owned by this process.
inline std::string SlurmClusterStart(const std::string& dir, int nodes, int cpus) {
  return "SLURM_TEST_OWNER=" + std::to_string(getpid()) + " SLURM_TEST_NODES=" + std::to_string(nodes) + " " +
         DT_SOURCE_DIR + "/scripts/slurm_test_cluster.sh start " + dir + " " + std::to_string(cpus);
}

// srun for a test's own MPI runs in the cluster: a rank that dies takes the others with it (they would wait for it
// in MPI for ever), and the run has 3 minutes, so a hang fails the test with its output rather than ctest's timeout.
inline const std::string kBoundedSrun = "timeout -k 10 180 srun --mpi=pmix --kill-on-bad-exit=1 ";

inline std::string SlurmClusterStop(const std::string& dir) {
  return std::string(DT_SOURCE_DIR) + "/scripts/slurm_test_cluster.sh stop " + dir;
}

}  // namespace dtrain::testing
