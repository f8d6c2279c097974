// CheckFinishedRun (runtime/train/finished_run.h): a finished run started again is "already done" with its own config
// (how and where it starts aside), refused naming every changed key with both values otherwise.

#include "runtime/train/finished_run.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config/config.h"

namespace dtrain::runtime {
namespace {

proto::Config Parsed(const std::vector<std::string>& sets) {
  proto::Config c;
  EXPECT_TRUE(ParseConfig("", "test", sets, &c).ok());
  return c;
}

TEST(FinishedRunTest, TheSameRunIsAlreadyDoneWhateverSaysHowItStarts) {
  const std::string saved = ConfigToYaml(Parsed({"optim.lr=0.001", "run.dir=runs/a"}));
  EXPECT_TRUE(CheckFinishedRun(saved, Parsed({"optim.lr=0.001", "run.dir=runs/a"}), 80).ok());
  // A launcher's restart (--resume auto, overwrite false), the first start's --resume never --overwrite, and the
  // same directory spelled another way are the same run.
  EXPECT_TRUE(
      CheckFinishedRun(
          saved,
          Parsed({"optim.lr=0.001", "run.dir=/abs/runs/a", "checkpoint.resume=never", "checkpoint.overwrite=true"}), 80)
          .ok());
}

TEST(FinishedRunTest, AnotherConfigIsRefusedNamingEachKeyThenAndNow) {
  const std::string saved = ConfigToYaml(Parsed({"optim.lr=0.001", "run.dir=runs/a"}));
  const Status st = CheckFinishedRun(saved, Parsed({"optim.lr=0.5", "model.mlp.hidden=[64]", "run.dir=runs/a"}), 80);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "runs/a: this run finished at step 80 with another config than this start's (then -> now: "
            "model.mlp.hidden: [256, 128] -> [64]; optim.lr: 0.001 -> 0.5): nothing was trained or changed. To train "
            "with the new values give another run.dir, or start over here with --resume never --overwrite (the old "
            "checkpoints are moved aside first); to train this run longer raise train.epochs or train.max_steps");
}

TEST(FinishedRunTest, ManyChangesAreCountedAndAnUnreadableSavedConfigIsRefused) {
  const proto::Config before = Parsed({});
  const proto::Config now = Parsed({"optim.lr=0.5", "optim.weight_decay=0.5", "train.seed=7", "train.log_every=3",
                                    "data.batch_size=7", "train.epochs=9"});
  EXPECT_EQ(ConfigChanges(before, now).size(), 6u);
  const Status many = CheckFinishedRun(ConfigToYaml(before), now, 5);
  EXPECT_NE(many.message().find("; and 2 more)"), std::string::npos) << many.message();
  const Status unreadable = CheckFinishedRun("optim:\n  no_such_key: 1\n", before, 5);
  EXPECT_EQ(unreadable.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(unreadable.message().find("its checkpoint's config does not read here (the checkpoint's config:"),
            std::string::npos)
      << unreadable.message();
}

}  // namespace
}  // namespace dtrain::runtime
