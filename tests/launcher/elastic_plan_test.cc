// The elastic launcher's pure decisions: --nnodes N | MIN:MAX, the batch at another world size, and the host
// set (drop, rejoin after the wait, MIN/MAX).

#include "launcher/elastic_plan.h"

#include <gtest/gtest.h>

#include "launcher/launch_options.h"

namespace dtrain::launcher {
namespace {

TEST(ElasticPlanTest, NodeRange) {
  int lo = 0, hi = 0;
  bool elastic = true;
  ASSERT_TRUE(ParseNodeRange("3", &lo, &hi, &elastic).ok());
  EXPECT_EQ(lo, 3);
  EXPECT_EQ(hi, 3);
  EXPECT_FALSE(elastic);
  ASSERT_TRUE(ParseNodeRange("2:4", &lo, &hi, &elastic).ok());
  EXPECT_EQ(lo, 2);
  EXPECT_EQ(hi, 4);
  EXPECT_TRUE(elastic);
  EXPECT_NE(ParseNodeRange("4:2", &lo, &hi, &elastic).message().find("MIN is larger than MAX"), std::string::npos);
  EXPECT_FALSE(ParseNodeRange("2:", &lo, &hi, &elastic).ok());
  EXPECT_FALSE(ParseNodeRange("0:2", &lo, &hi, &elastic).ok());
}

TEST(ElasticPlanTest, NnodesFlagKeepsNAndAcceptsMinMax) {
  LaunchOptions o;
  ASSERT_TRUE(ParseLaunchArgs({"--nnodes", "2", "--hosts", "a:1,b:1,c:1", "c.yaml"}, &o).ok());
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.elastic_min, 0);
  ASSERT_TRUE(ParseLaunchArgs({"--nnodes", "2:3", "--hosts", "a:1,b:1,c:1", "c.yaml"}, &o).ok());
  EXPECT_EQ(o.nnodes, 0);
  EXPECT_EQ(o.elastic_min, 2);
  EXPECT_EQ(o.elastic_max, 3);
  EXPECT_EQ(o.elastic_batch, "global");
  // Without hosts: the Slurm allocation's nodes (decided at launch), unless mpirun was asked for.
  EXPECT_TRUE(ParseLaunchArgs({"--nnodes", "2:3", "c.yaml"}, &o).ok());
  EXPECT_TRUE(ParseLaunchArgs({"--nnodes", "2:3", "--backend", "srun", "c.yaml"}, &o).ok());
  const Status st = ParseLaunchArgs({"--nnodes", "2:3", "--backend", "mpirun", "c.yaml"}, &o);
  EXPECT_NE(st.message().find("an elastic host set needs --hosts or --hostfile"), std::string::npos) << st.message();
  const Status both = ParseLaunchArgs({"--nnodes", "2:3", "--backend", "srun", "--hosts", "a:1,b:1", "c.yaml"}, &o);
  EXPECT_NE(both.message().find("the allocation is the host set"), std::string::npos) << both.message();
  EXPECT_NE(ParseLaunchArgs({"--nnodes", "3:2", "c.yaml"}, &o).message().find("--nnodes: "), std::string::npos);
}

TEST(ElasticPlanTest, GlobalBatchIsKeptWithTheFewestMicroSteps) {
  BatchPlan p;
  // 3 ranks x 64 x 1 = 192 samples per step; on 2 ranks each takes 96 = 2 micro-steps of 48 (<= 64).
  ASSERT_TRUE(PlanBatch(64, 1, 3, 2, ElasticBatch::kGlobal, &p).ok());
  EXPECT_EQ(p.batch_size, 48);
  EXPECT_EQ(p.grad_accum_steps, 2);
  EXPECT_EQ(p.batch_size * p.grad_accum_steps * 2, 64 * 3);
  // 4 ranks x 32 x 2 = 256; on 1 rank: 256 = 8 x 32.
  ASSERT_TRUE(PlanBatch(32, 2, 4, 1, ElasticBatch::kGlobal, &p).ok());
  EXPECT_EQ(p.batch_size, 32);
  EXPECT_EQ(p.grad_accum_steps, 8);
  // Unchanged at the full size, and in per-gpu mode.
  ASSERT_TRUE(PlanBatch(64, 1, 3, 3, ElasticBatch::kGlobal, &p).ok());
  EXPECT_EQ(p.batch_size, 64);
  EXPECT_EQ(p.grad_accum_steps, 1);
  ASSERT_TRUE(PlanBatch(64, 1, 3, 2, ElasticBatch::kPerGpu, &p).ok());
  EXPECT_EQ(p.batch_size, 64);
  EXPECT_EQ(p.grad_accum_steps, 1);
  // 2 x 50 = 100 cannot be split over 3 ranks.
  const Status st = PlanBatch(50, 1, 2, 3, ElasticBatch::kGlobal, &p);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("the global batch 100"), std::string::npos) << st.message();
}

// An attempt's overrides: the planned batch; in per-gpu mode also the schedule in samples of the full host set's
// global batch (unless the config has its own), so the LR and the run's length follow samples seen.
TEST(ElasticPlanTest, AttemptOverridesCountTheScheduleInSamplesForAPerGpuBatch) {
  proto::Config cfg;
  cfg.mutable_data()->set_batch_size(64);
  cfg.mutable_train()->set_grad_accum_steps(1);
  std::vector<std::string> sets;
  ASSERT_TRUE(AttemptBatchSets(cfg, 3, 2, ElasticBatch::kGlobal, &sets).ok());
  EXPECT_EQ(sets, (std::vector<std::string>{"data.batch_size=48", "train.grad_accum_steps=2"}));
  sets.clear();
  ASSERT_TRUE(AttemptBatchSets(cfg, 3, 2, ElasticBatch::kPerGpu, &sets).ok());
  EXPECT_EQ(sets, (std::vector<std::string>{"data.batch_size=64", "train.grad_accum_steps=1",
                                            "schedule.samples_per_step=192"}));
  sets.clear();
  cfg.mutable_schedule()->set_samples_per_step(1000);
  ASSERT_TRUE(AttemptBatchSets(cfg, 3, 3, ElasticBatch::kPerGpu, &sets).ok());
  EXPECT_EQ(sets, (std::vector<std::string>{"data.batch_size=64", "train.grad_accum_steps=1"}));
  sets.clear();
  EXPECT_EQ(AttemptBatchSets(cfg, 2, 3, ElasticBatch::kGlobal, &sets).code(), Status::Code::kInvalidArgument);
}

// A host that gave a spot notice still answers until it is reclaimed: it counts as back only after a probe found it
// gone once.
TEST(ElasticPlanTest, ANoticedHostMustVanishBeforeItMayRejoin) {
  ElasticHosts hosts(1, 2, std::chrono::seconds(0));
  std::vector<HostSlots> listed;
  ASSERT_TRUE(ParseHostList("a:1,b:1", &listed).ok());
  hosts.SetListed(listed);
  const auto t0 = ElasticHosts::Clock::now();
  hosts.Drop("b", t0, /*vanish_first=*/true);
  EXPECT_EQ(hosts.RejoinCandidates(t0), std::vector<std::string>{"b"});  // probed (to see it go) ...
  EXPECT_TRUE(hosts.MustVanishFirst("b"));                               // ... but an answer does not count
  hosts.Silent("b");
  EXPECT_FALSE(hosts.MustVanishFirst("b"));
  hosts.Drop("a", t0);
  EXPECT_FALSE(hosts.MustVanishFirst("a"));
}

TEST(ElasticPlanTest, HostsDropRejoinAfterTheWaitAndRespectMinMax) {
  using Clock = ElasticHosts::Clock;
  ElasticHosts hosts(2, 3, std::chrono::seconds(10));
  hosts.SetListed({{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}});
  std::vector<HostSlots> active;
  ASSERT_TRUE(hosts.Active(&active).ok());
  ASSERT_EQ(active.size(), 3u);  // MAX
  EXPECT_EQ(active[2].name, "c");
  const auto t0 = Clock::now();
  hosts.Drop("b", t0);
  ASSERT_TRUE(hosts.Active(&active).ok());
  ASSERT_EQ(active.size(), 3u);  // d takes b's place
  EXPECT_EQ(active[1].name, "c");
  EXPECT_EQ(active[2].name, "d");
  EXPECT_TRUE(hosts.RejoinCandidates(t0 + std::chrono::seconds(5)).empty());
  EXPECT_EQ(hosts.RejoinCandidates(t0 + std::chrono::seconds(10)), std::vector<std::string>{"b"});
  hosts.Drop("c", t0);
  hosts.Drop("d", t0);
  const Status st = hosts.Active(&active);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("only 1 usable host(s) left (lost: b, c, d), fewer than MIN"), std::string::npos)
      << st.message();
  hosts.Rejoin("c");
  ASSERT_TRUE(hosts.Active(&active).ok());
  EXPECT_EQ(active.size(), 2u);
  hosts.SetListed({{"a", 1}, {"c", 1}});  // b and d left the hostfile: forgotten
  EXPECT_FALSE(hosts.dropped("b"));
}

}  // namespace
}  // namespace dtrain::launcher
