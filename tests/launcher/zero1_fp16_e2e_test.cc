// fp16 with ZeRO-1 through the real binary (GPU only: train.precision fp16 is GPT-2 on CUDA; ZeRO-1 needs two
// NCCL ranks, so two GPUs). The same tiny GPT-2 run twice at 2 ranks — replicated and dist.zero1 — with
// dynamic loss scaling: both finish, both skip the same number of steps for overflow (the loss scaler's
// found-inf reads the all-reduced gradient norm in both: the sharded run's is the reduce-scattered shards'
// sum of squares, all-reduced), keep the same scale, and end at the same loss up to float summation order.
// The checkpoint of the sharded run records the sharding and the loss scaler. Must run on a 2-GPU machine
// (the H200 pair); skipped elsewhere.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <string>

#include "core/device_context.h"
#include "runtime/checkpoint/checkpoint.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kConfig = std::string(DT_SOURCE_DIR) + "/configs/gpt2_tiny.yaml";

std::string Launch(bool zero1, const std::string& run_dir) {
  return DtrainBin() + " launch --nproc-per-node 2 " + kConfig +
         " --set train.device=cuda --set train.precision=fp16 --set train.max_steps=40 --set train.log_every=10"
         " --set checkpoint.every_steps=40 --set dist.bucket_mb=0.01 --set dist.zero1=" +
         (zero1 ? "true" : "false") + " --set run.dir=" + run_dir;
}

// The last "train" record's loss in metrics.jsonl.
double LastTrainLoss(const std::string& run_dir) {
  std::istringstream in(ReadFile(run_dir + "/metrics.jsonl"));
  double loss = NAN;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"kind\":\"train\"") != std::string::npos) loss = Field(line, "loss");
  }
  return loss;
}

void LoadManifest(const std::string& run_dir, proto::CheckpointManifest* out) {
  std::unique_ptr<runtime::CheckpointManager> m;
  ASSERT_TRUE(runtime::CheckpointManager::Open(run_dir + "/checkpoints", {}, {}, &m).ok()) << run_dir;
  runtime::LoadedCheckpoint ck;
  const Status st = m->Load(40, &ck);
  ASSERT_TRUE(st.ok()) << st.ToString();
  *out = ck.manifest;
}

TEST(Zero1Fp16E2E, ShardedFp16SkipsLikeReplicatedAndRecordsTheScaler) {
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices (fp16 is GPU-only; ZeRO-1 needs 2 NCCL ranks)";
  TempDir dir;
  const std::string plain = dir.path() + "/plain", sharded = dir.path() + "/zero1";
  ProcessResult p = RunCommand(Launch(false, plain));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  ProcessResult z = RunCommand(Launch(true, sharded));
  ASSERT_EQ(z.exit_code, 0) << z.output;
  EXPECT_NE(z.output.find("ZeRO-1: sharded over 2 ranks"), std::string::npos) << z.output;

  proto::CheckpointManifest mp, mz;
  LoadManifest(plain, &mp);
  LoadManifest(sharded, &mz);
  EXPECT_TRUE(mz.sharding().zero1());
  EXPECT_EQ(mz.sharding().world_size(), 2);
  ASSERT_TRUE(mz.has_loss_scaler());
  ASSERT_TRUE(mp.has_loss_scaler());
  EXPECT_EQ(mz.loss_scaler().skipped_steps(), mp.loss_scaler().skipped_steps());
  EXPECT_EQ(mz.loss_scaler().scale(), mp.loss_scaler().scale());
  EXPECT_EQ(mz.optimizer_step(), 40);

  const double lp = LastTrainLoss(plain), lz = LastTrainLoss(sharded);
  ASSERT_TRUE(std::isfinite(lp) && std::isfinite(lz)) << lp << " " << lz;
  EXPECT_NEAR(lz, lp, 1e-2 * std::max(1.0, std::fabs(lp)));
}

}  // namespace
}  // namespace dtrain::testing
