// `dtrain config show` (launcher/cli/config_cmd.h): the resolved config, every default, and only what differs.

#include "launcher/cli/config_cmd.h"

#include <gtest/gtest.h>

#include <string>

#include "launcher/exit_codes.h"
#include "runtime/config/config.h"
#include "tests/testing/subprocess.h"

namespace dtrain::launcher {
namespace {

using testing::DtrainBin;
using testing::ProcessResult;
using testing::RunCommand;
using testing::TempDir;
using testing::WriteFile;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class ConfigShowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = dir_.path() + "/c.yaml";
    WriteFile(config_, "train:\n  epochs: 7\noptim:\n  lr: 0.5\n  name: adamw\n");
  }
  TempDir dir_;
  std::string config_;
};

TEST_F(ConfigShowTest, ResolvedConfigIsTheTrainersRendering) {
  ConfigShowArgs a;
  a.config = config_;
  a.sets = {"data.batch_size=32", "optim.lr=0.25"};
  std::string yaml;
  ASSERT_TRUE(ShowConfig(a, &yaml).ok());
  proto::Config cfg;
  ASSERT_TRUE(runtime::LoadConfig(config_, a.sets, &cfg).ok());
  EXPECT_EQ(yaml, runtime::ConfigToYaml(cfg));
  EXPECT_TRUE(Contains(yaml, "optim:\n  name: adamw\n  lr: 0.25\n")) << yaml;  // the later --set wins
  EXPECT_TRUE(Contains(yaml, "  batch_size: 32\n")) << yaml;
  EXPECT_TRUE(Contains(yaml, "  epochs: 7\n")) << yaml;
  EXPECT_TRUE(Contains(yaml, "  momentum: 0.9\n")) << yaml;  // defaults are part of it
}

TEST_F(ConfigShowTest, DefaultsAreEveryKeyAtItsSchemaDefault) {
  ConfigShowArgs a;
  a.defaults = true;
  std::string yaml;
  ASSERT_TRUE(ShowConfig(a, &yaml).ok());
  EXPECT_TRUE(Contains(yaml, "optim:\n  name: adamw\n  lr: 0.001\n")) << yaml;
  EXPECT_TRUE(Contains(yaml, "  batch_size: 64\n")) << yaml;
  EXPECT_TRUE(Contains(yaml, "  epochs: 3\n")) << yaml;
  proto::Config back;  // it is itself a config that loads to the defaults
  ASSERT_TRUE(runtime::ParseConfig(yaml, "defaults", {}, &back).ok());
  proto::Config defaults;
  ASSERT_TRUE(runtime::ParseConfig("", "empty", {}, &defaults).ok());
  EXPECT_EQ(runtime::ConfigToYaml(back), runtime::ConfigToYaml(defaults));
}

TEST_F(ConfigShowTest, DiffHoldsOnlyTheKeysThatDifferUnderTheirSections) {
  ConfigShowArgs a;
  a.config = config_;
  a.sets = {"data.batch_size=32", "model.mlp.hidden=[64]"};
  a.diff = true;
  std::string yaml;
  ASSERT_TRUE(ShowConfig(a, &yaml).ok());
  // optim.name is given but equals its default: not shown. Sections in schema order.
  EXPECT_EQ(yaml,
            "model:\n"
            "  mlp:\n"
            "    hidden: [64]\n"
            "data:\n"
            "  batch_size: 32\n"
            "optim:\n"
            "  lr: 0.5\n"
            "train:\n"
            "  epochs: 7\n");
  proto::Config from_diff, full;  // the diff loads to the same config
  ASSERT_TRUE(runtime::ParseConfig(yaml, "diff", {}, &from_diff).ok());
  ASSERT_TRUE(runtime::LoadConfig(config_, a.sets, &full).ok());
  EXPECT_EQ(runtime::ConfigToYaml(from_diff), runtime::ConfigToYaml(full));
}

TEST_F(ConfigShowTest, BinaryPrintsItAndABadConfigExitsTwoWithTheLoadersMessage) {
  ProcessResult r = RunCommand(DtrainBin() + " config show " + config_ + " --set optim.lr=0.125 --diff");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "optim:\n  lr: 0.125\ntrain:\n  epochs: 7\n");
  r = RunCommand(DtrainBin() + " config show --defaults");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "  lr: 0.001\n")) << r.output;

  WriteFile(dir_.path() + "/bad.yaml", "optim:\n  lrr: 1\n");
  r = RunCommand(DtrainBin() + " config show " + dir_.path() + "/bad.yaml");
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_TRUE(Contains(r.output, "dtrain: error: ")) << r.output;
  EXPECT_TRUE(Contains(r.output, "bad.yaml:2: unknown key 'optim.lrr'")) << r.output;
  r = RunCommand(DtrainBin() + " config show " + config_ + " --set optim.lr=fast");
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_TRUE(Contains(r.output, "--set optim.lr=fast: key 'optim.lr'")) << r.output;
  r = RunCommand(DtrainBin() + " config show " + dir_.path() + "/nope.yaml");
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_TRUE(Contains(r.output, "nope.yaml")) << r.output;
}

}  // namespace
}  // namespace dtrain::launcher
