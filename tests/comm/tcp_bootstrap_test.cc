// CreateCommunicatorsOverTcp / NeedsTcpBootstrap: when a torchrun-style worker bootstraps over TCP, the
// CPU path refused without MPI, and (CUDA builds with 2 GPUs) an NCCL all-reduce between two forked
// ranks whose ncclUniqueId travelled over the TCP rendezvous (with the job secret from DTRAIN_JOB_SECRET; refused
// before any connection without it).
#include "comm/tcp_bootstrap.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/job_secret.h"
#include "tests/comm/forked_ranks.h"
#if DT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dtrain::comm {
namespace {

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

DistEnv TorchrunEnv(int rank, int world, int port) {
  DistEnv e;
  e.source = "torchrun";
  e.rank = rank;
  e.world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

TEST(TcpBootstrapTest, TorchrunVariablesWithoutAProcessManagerNeedTcp) {
  const char* pm_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_NTASKS"};
  for (const char* v : pm_vars) ::unsetenv(v);
  EXPECT_TRUE(NeedsTcpBootstrap(TorchrunEnv(1, 2, 29500)));
  EXPECT_FALSE(NeedsTcpBootstrap(TorchrunEnv(0, 1, 29500))) << "one rank needs no rendezvous";
  DistEnv ompi = TorchrunEnv(1, 2, 29500);
  ompi.source = "ompi";
  EXPECT_FALSE(NeedsTcpBootstrap(ompi));
  // RANK exported, but mpirun -np 2 started us: MPI it is.
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_FALSE(NeedsTcpBootstrap(TorchrunEnv(1, 2, 29500)));
  // `mpirun -np 1 torchrun --nproc-per-node 2`: the MPI world is not the job's.
  ::setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  EXPECT_TRUE(NeedsTcpBootstrap(TorchrunEnv(1, 2, 29500)));
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  // srun --mpi=pmix with 4 tasks, WORLD_SIZE 4: MPI. `srun -N2 torchrun --nproc-per-node 2`: TCP.
  ::setenv("PMIX_RANK", "1", 1);
  ::setenv("SLURM_NTASKS", "4", 1);
  EXPECT_FALSE(NeedsTcpBootstrap(TorchrunEnv(1, 4, 29500)));
  ::setenv("SLURM_NTASKS", "2", 1);
  EXPECT_TRUE(NeedsTcpBootstrap(TorchrunEnv(1, 4, 29500)));
  // PMIx without a known size: assume the process manager's MPI world is the job's.
  ::unsetenv("SLURM_NTASKS");
  EXPECT_FALSE(NeedsTcpBootstrap(TorchrunEnv(1, 4, 29500)));
  for (const char* v : pm_vars) ::unsetenv(v);
}

TEST(TcpBootstrapTest, CpuPathIsRefusedAtOnceWithoutMpi) {
  TcpBootstrapOptions o;
  o.cuda = false;
  std::unique_ptr<Communicator> host, nccl;
  const auto t0 = std::chrono::steady_clock::now();
  // Nobody listens on the port: the refusal must come before any connection attempt.
  const Status st = CreateCommunicatorsOverTcp(TorchrunEnv(1, 2, testing::FreeLoopbackPort()), o, &host, &nccl);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.5);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Has(st.message(), "rank 1: train.device cpu with WORLD_SIZE=2 reduces gradients with MPI"))
      << st.ToString();
  EXPECT_TRUE(Has(st.message(), "`dtrain launch`, mpirun or srun --mpi=pmix")) << st.ToString();
  EXPECT_EQ(host, nullptr);
  EXPECT_EQ(nccl, nullptr);
}

#if !DT_HAVE_CUDA
TEST(TcpBootstrapTest, GpuPathWithoutCudaIsUnavailable) {
  TcpBootstrapOptions o;
  o.cuda = true;
  std::unique_ptr<Communicator> host, nccl;
  const Status st = CreateCommunicatorsOverTcp(TorchrunEnv(0, 2, testing::FreeLoopbackPort()), o, &host, &nccl);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_TRUE(Has(st.message(), "built without CUDA")) << st.ToString();
}
#else
// Each forked rank: rendezvous, NCCL id over TCP, ncclAllReduce of (rank + 1) on its own GPU, and the
// host communicator's MAX of the rank. The parent never touches CUDA (a forked child could not use it).
std::string GpuRank(int port, int rank) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2) return "SKIP";
  TcpBootstrapOptions o;
  o.cuda = true;
  o.device = rank;
  o.rendezvous_timeout_s = 60;
  std::unique_ptr<Communicator> host, nccl;
  ::unsetenv(kJobSecretEnv);
  ::unsetenv(kJobSecretFileEnv);
  Status st = CreateCommunicatorsOverTcp(TorchrunEnv(rank, 2, port), o, &host, &nccl);
  if (st.code() != Status::Code::kInvalidArgument || !Has(st.message(), "no job secret")) {
    return "without DTRAIN_JOB_SECRET: " + st.ToString();
  }
  ::setenv(kJobSecretEnv, "a-test-job-secret-of-more-than-32-characters", 1);  // as `dtrain launch` exports it
  st = CreateCommunicatorsOverTcp(TorchrunEnv(rank, 2, port), o, &host, &nccl);
  if (!st.ok()) return st.ToString();
  const int n = 1000;
  std::vector<float> h(n, static_cast<float>(rank + 1));
  float* d = nullptr;
  if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess) return "cudaMalloc failed";
  cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  Tensor t = Tensor::Wrap(d, {n}, DType::kF32, DeviceType::kCUDA);
  st = nccl->AllReduce(&t, ReduceOp::kSum, nullptr);
  if (!st.ok()) return st.ToString();
  cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d);
  double r = rank;
  Tensor tr = Tensor::Wrap(&r, {1}, DType::kF64, DeviceType::kCPU);
  st = host->AllReduce(&tr, ReduceOp::kMax, nullptr);
  if (!st.ok()) return st.ToString();
  nccl.reset();  // before the host communicator, as the contract says
  return "nccl=" + std::to_string(h[0]) + "," + std::to_string(h[n - 1]) + " host_max=" + std::to_string(r);
}

TEST(TcpBootstrapTest, TwoGpuRanksReduceOverNcclBootstrappedByTcp) {
  const int port = testing::FreeLoopbackPort();
  const auto r = testing::RunForkedRanks(2, [&](int rank) { return GpuRank(port, rank); });
  if (r[0].report == "SKIP") GTEST_SKIP() << "needs 2 GPUs";
  for (int k = 0; k < 2; ++k) EXPECT_EQ(r[k].report, "nccl=3.000000,3.000000 host_max=1.000000") << "rank " << k;
}
#endif

}  // namespace
}  // namespace dtrain::comm
