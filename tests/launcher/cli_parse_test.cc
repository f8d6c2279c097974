// ParseWithCli (launcher/cli_parse.h): CLI11's outcomes as one-line Status messages, on a small tree.

#include "launcher/cli_parse.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace dtrain::launcher {
namespace {

struct Tree {
  CLI::App root{"test tree", "dtrain"};
  int count = 0;
  bool dry_run = false;
  std::string config;
  std::string chosen;

  Tree() {
    root.allow_extras();
    CLI::App* run = root.add_subcommand("run", "run something");
    run->add_option("--count", count, "how many")->check(PositiveInt());
    run->add_option("--mode", chosen, "which")->check(OneOf({"fast", "slow"}));
    run->add_flag("--dry-run", dry_run, "only print")->disable_flag_override();
    run->add_option("CONFIG", config, "a file");
    run->callback([this] {
      if (config == "bad") FailParse("CONFIG: 'bad' is bad");
    });
    CLI::App* group = root.add_subcommand("grp", "a group");
    group->add_subcommand("alpha", "first");
    group->add_subcommand("beta", "second");
  }

  Status Parse(const std::vector<std::string>& words, ParseResult* r) { return ParseWithCli(&root, words, r); }
};

TEST(CliParseTest, ValuesAndTheSelectedCommand) {
  Tree t;
  ParseResult r;
  ASSERT_TRUE(t.Parse({"run", "c.yaml", "--count=3", "--mode", "slow", "--dry-run"}, &r).ok());
  EXPECT_EQ(r.command, "run");
  EXPECT_FALSE(r.help);
  EXPECT_EQ(t.count, 3);
  EXPECT_EQ(t.chosen, "slow");
  EXPECT_TRUE(t.dry_run);
  EXPECT_EQ(t.config, "c.yaml");
  Tree g;
  ASSERT_TRUE(g.Parse({"grp", "beta"}, &r).ok());
  EXPECT_EQ(r.command, "grp beta");
}

TEST(CliParseTest, APositionalThatNamesACommandIsAPositional) {
  Tree t;
  ParseResult r;
  ASSERT_TRUE(t.Parse({"run", "grp", "--count", "2"}, &r).ok());
  EXPECT_EQ(r.command, "run");
  EXPECT_EQ(t.config, "grp");
  EXPECT_EQ(t.count, 2);
  Tree u;
  const Status st = u.Parse({"run", "a", "run"}, &r);
  EXPECT_EQ(st.message(), "unexpected argument 'run'");
}

TEST(CliParseTest, EachErrorClassIsOneLineNamingTheFlagOrWord) {
  struct Case {
    std::vector<std::string> words;
    std::string command, message;
  };
  const Case cases[] = {
      {{"run", "--frobnicate", "c.yaml"}, "run", "unknown flag '--frobnicate' (see `dtrain run --help`)"},
      {{"run", "--frobnicate=1", "c.yaml"}, "run", "unknown flag '--frobnicate' (see `dtrain run --help`)"},
      {{"run", "c.yaml", "--count"}, "run", "--count: missing value"},
      {{"run", "--count", "two", "c.yaml"}, "run", "--count: expected a positive integer, got 'two'"},
      {{"run", "--count", "-4", "c.yaml"}, "run", "--count: expected a positive integer, got '-4'"},
      {{"run", "--mode", "medium", "c.yaml"}, "run", "--mode: expected fast|slow, got 'medium'"},
      {{"run", "--dry-run=yes", "c.yaml"}, "run", "--dry-run: takes no value"},
      {{"run", "a.yaml", "b.yaml"}, "run", "unexpected argument 'b.yaml'"},
      {{"run", "bad"}, "run", "CONFIG: 'bad' is bad"},
      {{"walk"}, "", "unknown command 'walk' (expected one of: run, grp)"},
      {{"grp", "gamma"}, "grp", "unknown command 'gamma' (expected one of: alpha, beta)"},
      {{"grp"}, "grp", "expected a command (one of: alpha, beta)"},
  };
  for (const auto& c : cases) {
    Tree t;
    ParseResult r;
    const Status st = t.Parse(c.words, &r);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << c.message;
    EXPECT_EQ(st.message(), c.message);
    EXPECT_EQ(r.command, c.command) << c.message;
  }
}

TEST(CliParseTest, HelpGivesTheSelectedCommandsHelp) {
  for (const std::string flag : {"--help", "-h"}) {
    Tree t;
    ParseResult r;
    ASSERT_TRUE(t.Parse({"run", flag}, &r).ok());
    EXPECT_TRUE(r.help);
    EXPECT_EQ(r.command, "run");
    EXPECT_NE(r.help_text.find("Usage: dtrain run [OPTIONS] [CONFIG]"), std::string::npos) << r.help_text;
    EXPECT_NE(r.help_text.find("--count"), std::string::npos) << r.help_text;
    EXPECT_NE(r.help_text.find("--dry-run"), std::string::npos) << r.help_text;
  }
}

TEST(CliParseTest, ValueChecks) {
  EXPECT_EQ(PositiveInt()("7"), "");
  EXPECT_EQ(PositiveInt()("0"), "expected a positive integer, got '0'");
  EXPECT_EQ(PositiveInt()("1.5"), "expected a positive integer, got '1.5'");
  EXPECT_EQ(PositiveInt()("99999999999"), "expected a positive integer, got '99999999999'");
  EXPECT_EQ(NonNegativeInt()("0"), "");
  EXPECT_EQ(NonNegativeInt()("-1"), "expected a non-negative integer, got '-1'");
  EXPECT_EQ(OneOf({"a", "b"})("b"), "");
  EXPECT_EQ(OneOf({"a", "b"})("c"), "expected a|b, got 'c'");
  for (const char* ok : {"auto", "never", "0", "42"}) EXPECT_EQ(ResumeValue()(ok), "") << ok;
  EXPECT_EQ(ResumeValue()("-1"), "expected auto|never|STEP, got '-1'");
  EXPECT_EQ(ResumeValue()(""), "expected auto|never|STEP, got ''");
  for (const char* newest : {"latest", "last", "newest"}) {
    EXPECT_EQ(ResumeValue()(newest), "expected auto|never|STEP, got '" + std::string(newest) +
                                         "': dtrain resumes from the newest valid checkpoint of the run by default "
                                         "(--resume auto, checkpoint.resume: auto); drop --resume, or give a STEP to "
                                         "resume from an older one");
  }
}

}  // namespace
}  // namespace dtrain::launcher
