#include "runtime/config/config.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/log_capture.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using dtrain::proto::Config;
using google::protobuf::util::MessageDifferencer;

const std::string kTestData = std::string(DT_SOURCE_DIR) + "/tests/runtime/config/testdata/";

Config MustParse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  Config c;
  const Status st = ParseConfig(yaml, "x.yaml", overrides, &c);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return c;
}

// The error message of a config that must fail with InvalidArgument.
std::string ErrorOf(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  Config c;
  const Status st = ParseConfig(yaml, "x.yaml", overrides, &c);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  return st.message();
}

TEST(ConfigTest, EmptyDocumentGivesSchemaDefaults) {
  const Config c = MustParse("");
  EXPECT_EQ(c.model().kind(), "mlp");
  EXPECT_EQ(c.model().mlp().input_dim(), 784);
  ASSERT_EQ(c.model().mlp().hidden_size(), 2);
  EXPECT_EQ(c.model().mlp().hidden(0), 256);
  EXPECT_EQ(c.model().mlp().hidden(1), 128);
  EXPECT_EQ(c.model().mlp().num_classes(), 10);
  EXPECT_EQ(c.model().mlp().activation(), "relu");
  EXPECT_EQ(c.data().dataset(), "fashion_mnist");
  EXPECT_EQ(c.data().dir(), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(c.data().batch_size(), 64);
  EXPECT_EQ(c.data().eval_batch_size(), 1000);
  EXPECT_TRUE(c.data().shuffle());
  EXPECT_EQ(c.optim().name(), "adamw");
  EXPECT_DOUBLE_EQ(c.optim().lr(), 0.001);
  EXPECT_DOUBLE_EQ(c.optim().momentum(), 0.9);
  EXPECT_DOUBLE_EQ(c.optim().beta2(), 0.999);
  EXPECT_DOUBLE_EQ(c.optim().eps(), 1e-8);
  EXPECT_FALSE(c.optim().nesterov());
  EXPECT_EQ(c.schedule().kind(), "cosine");
  EXPECT_EQ(c.train().epochs(), 3);
  EXPECT_EQ(c.train().grad_accum_steps(), 1);
  EXPECT_EQ(c.train().seed(), 1234u);
  EXPECT_EQ(c.train().log_every(), 50);
  EXPECT_EQ(c.train().device(), "auto");
  EXPECT_TRUE(c.train().eval());
  EXPECT_EQ(c.run().dir(), "runs/default");
}

TEST(ConfigTest, FileValuesReplaceDefaultsKeyByKey) {
  const Config c = MustParse(
      "optim:\n"
      "  name: sgd\n"
      "  lr: 0.1\n"
      "  nesterov: true\n"
      "model:\n"
      "  mlp:\n"
      "    hidden: [512]\n"
      "train:\n"
      "  seed: 18446744073709551615\n"
      "run:   # an empty section keeps its defaults\n");
  EXPECT_EQ(c.optim().name(), "sgd");
  EXPECT_DOUBLE_EQ(c.optim().lr(), 0.1);
  EXPECT_TRUE(c.optim().nesterov());
  EXPECT_DOUBLE_EQ(c.optim().momentum(), 0.9);  // not in the file: default
  ASSERT_EQ(c.model().mlp().hidden_size(), 1);  // a sequence replaces the default, never appends
  EXPECT_EQ(c.model().mlp().hidden(0), 512);
  EXPECT_EQ(c.model().mlp().input_dim(), 784);
  EXPECT_EQ(c.train().seed(), 18446744073709551615ull);
  EXPECT_EQ(c.run().dir(), "runs/default");
}

TEST(ConfigTest, OverridesApplyAfterTheFileInOrder) {
  const Config c = MustParse("optim:\n  lr: 0.1\n", {"optim.lr=0.5", "model.mlp.hidden=[64, 32, 16]",
                                                     "run.dir='runs/a b'", "train.eval=false", "optim.lr=2e-3"});
  EXPECT_DOUBLE_EQ(c.optim().lr(), 2e-3);
  ASSERT_EQ(c.model().mlp().hidden_size(), 3);
  EXPECT_EQ(c.model().mlp().hidden(2), 16);
  EXPECT_EQ(c.run().dir(), "runs/a b");
  EXPECT_FALSE(c.train().eval());
}

TEST(ConfigTest, OverrideErrorsNameTheFlag) {
  EXPECT_EQ(ErrorOf("", {"optim.lr=fast"}),
            "--set optim.lr=fast: key 'optim.lr': expected a number in [0, 10], got 'fast'");
  EXPECT_EQ(ErrorOf("", {"optim.lrr=1"}),
            "--set optim.lrr=1: unknown key 'optim.lrr' (known keys of 'optim': name, lr, momentum, nesterov, beta1, "
            "beta2, eps, weight_decay, grad_clip, state_dtype, offload, offload_keep_gib)");
  EXPECT_EQ(ErrorOf("", {"optim.lr"}), "--set optim.lr: expected key=value, e.g. --set optim.lr=0.01");
  EXPECT_EQ(ErrorOf("", {"optim.lr.x=1"}), "--set optim.lr.x=1: key 'optim.lr' has no sub-keys");
  EXPECT_EQ(ErrorOf("", {"run=x"}),
            "--set run=x: key 'run' is a mapping; set one of its keys (known keys of 'run': dir, tensorboard, "
            "trace_steps, trace_start, price_per_gpu_hour, gpu_sample_s, gpu_idle_util_pct, gpu_idle_s, "
            "gpu_idle_exit, prometheus_port, prometheus_addr, csv_metrics, final_weights)");
  EXPECT_EQ(ErrorOf("", {"model.mlp.hidden=[1, 2"}),
            "--set model.mlp.hidden=[1, 2: col 1: unterminated flow sequence: expected ']' on the same line");
  EXPECT_EQ(ErrorOf("", {"model.mlp.hidden=[8, 0]"}),
            "--set model.mlp.hidden=[8, 0]: key 'model.mlp.hidden[1]': expected an integer >= 1, got '0'");
}

TEST(ConfigTest, UnknownKeysListTheKnownOnes) {
  EXPECT_EQ(ErrorOf("optim:\n  name: sgd\n\n  lrr: 0.1\n"),
            "x.yaml:4: unknown key 'optim.lrr' (known keys of 'optim': name, lr, momentum, nesterov, beta1, beta2, "
            "eps, weight_decay, grad_clip, state_dtype, offload, offload_keep_gib)");
  EXPECT_EQ(ErrorOf("modle:\n  kind: mlp\n"),
            "x.yaml:1: unknown key 'modle' (known top-level keys: model, data, optim, schedule, train, run, dist, "
            "checkpoint, storage)");
}

TEST(ConfigTest, WrongTypesAreRejectedWithTheKey) {
  EXPECT_EQ(ErrorOf("data:\n  batch_size: 1.5\n"),
            "x.yaml:2: key 'data.batch_size': expected an integer in [1, 1048576], got '1.5'");
  EXPECT_EQ(ErrorOf("data:\n  batch_size: abc\n"),
            "x.yaml:2: key 'data.batch_size': expected an integer in [1, 1048576], got 'abc'");
  EXPECT_EQ(ErrorOf("data:\n  batch_size: 64x\n"),
            "x.yaml:2: key 'data.batch_size': expected an integer in [1, 1048576], got '64x'");
  EXPECT_EQ(ErrorOf("data:\n  batch_size: \"64\"\n"),
            "x.yaml:2: key 'data.batch_size': expected an integer in [1, 1048576], got the quoted string '64'");
  EXPECT_EQ(ErrorOf("data:\n  shuffle: yes\n"), "x.yaml:2: key 'data.shuffle': expected true or false, got 'yes'");
  EXPECT_EQ(ErrorOf("data:\n  shuffle: 1\n"), "x.yaml:2: key 'data.shuffle': expected true or false, got '1'");
  EXPECT_EQ(ErrorOf("optim:\n  lr: 0.1.2\n"), "x.yaml:2: key 'optim.lr': expected a number in [0, 10], got '0.1.2'");
  EXPECT_EQ(ErrorOf("optim:\n  lr: nan\n"), "x.yaml:2: key 'optim.lr': expected a number in [0, 10], got 'nan'");
  EXPECT_EQ(ErrorOf("optim:\n  lr:\n"), "x.yaml:2: key 'optim.lr': expected a number in [0, 10], got an empty value");
  EXPECT_EQ(ErrorOf("optim: sgd\n"), "x.yaml:1: key 'optim': expected a mapping, got 'sgd'");
  EXPECT_EQ(ErrorOf("run:\n  dir: [a]\n"), "x.yaml:2: key 'run.dir': expected a string, got a sequence");
  EXPECT_EQ(ErrorOf("model:\n  mlp:\n    hidden: 256\n"),
            "x.yaml:3: key 'model.mlp.hidden': expected a sequence such as [1, 2], got '256'");
  EXPECT_EQ(ErrorOf("model:\n  mlp:\n    hidden:\n      - 256\n      - x\n"),
            "x.yaml:5: key 'model.mlp.hidden[1]': expected an integer >= 1, got 'x'");
  EXPECT_EQ(ErrorOf("- 1\n"),
            "x.yaml:1: expected a mapping of sections (model, data, ...) at the top level, got a sequence");
}

TEST(ConfigTest, OutOfRangeValuesAreRejected) {
  EXPECT_EQ(ErrorOf("optim:\n  lr: 11\n"), "x.yaml:2: key 'optim.lr': expected a number in [0, 10], got '11'");
  EXPECT_EQ(ErrorOf("optim:\n  lr: -1e-3\n"), "x.yaml:2: key 'optim.lr': expected a number in [0, 10], got '-1e-3'");
  EXPECT_EQ(ErrorOf("optim:\n  grad_clip: 1e999\n"),
            "x.yaml:2: key 'optim.grad_clip': expected a number >= 0, got '1e999' (out of the double range)");
  EXPECT_EQ(ErrorOf("data:\n  batch_size: 0\n"),
            "x.yaml:2: key 'data.batch_size': expected an integer in [1, 1048576], got '0'");
  EXPECT_EQ(ErrorOf("train:\n  epochs: 9223372036854775808\n"),
            "x.yaml:2: key 'train.epochs': expected an integer >= 0, got '9223372036854775808' (out of the int64 "
            "range)");
  EXPECT_EQ(ErrorOf("train:\n  seed: -1\n"), "x.yaml:2: key 'train.seed': expected a non-negative integer, got '-1'");
  EXPECT_EQ(ErrorOf("train:\n  seed: 18446744073709551616\n"),
            "x.yaml:2: key 'train.seed': expected a non-negative integer, got '18446744073709551616' (out of the "
            "uint64 range)");
  EXPECT_EQ(ErrorOf("model:\n  mlp:\n    hidden: []\n"),
            "x.yaml:3: key 'model.mlp.hidden': expected at least 1 item(s), got 0");
}

TEST(ConfigTest, StringChoicesAreEnforced) {
  EXPECT_EQ(ErrorOf("optim:\n  name: adam\n"),
            "x.yaml:2: key 'optim.name': expected one of sgd|adamw|lion, got 'adam'");
  EXPECT_EQ(ErrorOf("train:\n  device: 'gpu'\n"),
            "x.yaml:2: key 'train.device': expected one of auto|cpu|cuda, got the quoted string 'gpu'");
  EXPECT_EQ(MustParse("train:\n  device: \"cuda\"\n").train().device(), "cuda");  // quoting a string is fine
}

TEST(ConfigTest, MalformedYamlNamesLineAndColumn) {
  EXPECT_EQ(ErrorOf("optim:\n  name: sgd\n   lr: 1\n"),
            "x.yaml:3:4: unexpected indentation: expected a key at column 3");
}

TEST(ConfigTest, LoadConfigNamesTheFile) {
  Config c;
  const std::string missing = kTestData + "does_not_exist.yaml";
  Status st = LoadConfig(missing, {}, &c);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_EQ(st.message(), "config file not found: " + missing);

  st = LoadConfig(kTestData + "wrong_type.yaml", {}, &c);
  EXPECT_EQ(st.message(),
            kTestData + "wrong_type.yaml:5: key 'data.batch_size': expected an integer in [1, 1048576], got '1.5'");
  st = LoadConfig(kTestData + "malformed.yaml", {}, &c);
  EXPECT_EQ(st.message(), kTestData + "malformed.yaml:4:7: unexpected '{': flow mappings are not supported");
  st = LoadConfig(kTestData + "unknown_key.yaml", {}, &c);
  EXPECT_EQ(st.message().rfind(kTestData + "unknown_key.yaml:3: unknown key 'optim.lrr' (", 0), 0u) << st.message();
  // A directory is bad input (exit 2), named as such.
  st = LoadConfig(kTestData, {}, &c);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("is a directory"), std::string::npos) << st.message();
}

// An empty config (or one of blanks and comments only) is refused rather than trained on defaults.
TEST(Config, EmptyFileIsRefused) {
  dtrain::testing::TempDir dir;
  dtrain::proto::Config c;
  for (const std::string text : {"", "\n  \n", "# only a comment\n---\n"}) {
    dtrain::testing::WriteFile(dir.path() + "/empty.yaml", text);
    const Status st = LoadConfig(dir.path() + "/empty.yaml", {}, &c);
    ASSERT_EQ(st.code(), Status::Code::kInvalidArgument) << text;
    EXPECT_EQ(st.message().find("config " + dir.path() + "/empty.yaml is empty"), 0u) << st.message();
  }
}

TEST(ConfigTest, ToYamlRendersEveryFieldInSchemaOrder) {
  const std::string yaml = ConfigToYaml(MustParse(""));
  EXPECT_EQ(yaml.rfind("model:\n  kind: mlp\n  mlp:\n    input_dim: 784\n    hidden: [256, 128]\n", 0), 0u) << yaml;
  EXPECT_NE(yaml.find("optim:\n  name: adamw\n  lr: 0.001\n  momentum: 0.9\n  nesterov: false\n"), std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("  eps: 1e-08\n  weight_decay: 0.0\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  seed: 1234\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("run:\n  dir: runs/default\n"), std::string::npos) << yaml;
}

TEST(ConfigTest, ToYamlRoundTrips) {
  Config c = MustParse("");
  c.mutable_optim()->set_lr(0.1 + 0.2);  // 0.30000000000000004: needs all 17 digits
  c.mutable_optim()->set_eps(3e-300);
  c.mutable_optim()->set_momentum(1.0);
  c.mutable_model()->mutable_mlp()->clear_hidden();
  c.mutable_model()->mutable_mlp()->add_hidden(4096);
  c.mutable_train()->set_seed(18446744073709551615ull);
  c.mutable_train()->set_max_steps(9223372036854775807ll);
  std::string odd = "runs/odd: #name 'q' \"dq\" \\ \t\n\x01 \xC3\xA9 -x";
  odd += '\0';
  c.mutable_run()->set_dir(odd);
  c.mutable_data()->set_dir("-leading-dash");
  const std::string yaml = ConfigToYaml(c);
  Config back;
  const Status st = ParseConfig(yaml, "roundtrip.yaml", {}, &back);
  ASSERT_TRUE(st.ok()) << st.ToString() << "\n" << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(c, back)) << yaml << "\nvs\n" << back.DebugString();
  EXPECT_EQ(ConfigToYaml(back), yaml);
}

TEST(ConfigTest, DiffYamlHoldsOnlyWhatDiffersAndRoundTrips) {
  std::string diff;
  ASSERT_TRUE(ConfigDiffYaml(MustParse(""), &diff).ok());
  EXPECT_EQ(diff, "");  // all defaults: nothing differs
  const Config c = MustParse("optim:\n  lr: 0.25\nmodel:\n  mlp:\n    hidden: [64]\nrun:\n  dir: runs/x\n");
  ASSERT_TRUE(ConfigDiffYaml(c, &diff).ok());
  EXPECT_EQ(diff, "model:\n  mlp:\n    hidden: [64]\noptim:\n  lr: 0.25\nrun:\n  dir: runs/x\n");
  // A key set to its default value is not a difference.
  ASSERT_TRUE(ConfigDiffYaml(MustParse("train:\n  seed: 1234\n"), &diff).ok());
  EXPECT_EQ(diff, "");
  Config back;
  ASSERT_TRUE(ConfigDiffYaml(c, &diff).ok());
  ASSERT_TRUE(ParseConfig(diff, "diff.yaml", {}, &back).ok()) << diff;
  EXPECT_TRUE(MessageDifferencer::Equals(c, back)) << diff;
}

TEST(ConfigTest, SchemaUsesOnlySupportedFieldTypes) {
  using FD = google::protobuf::FieldDescriptor;
  std::vector<const google::protobuf::Descriptor*> todo{Config::descriptor()};
  while (!todo.empty()) {
    const google::protobuf::Descriptor* d = todo.back();
    todo.pop_back();
    for (int i = 0; i < d->field_count(); ++i) {
      const FD* f = d->field(i);
      if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
        EXPECT_FALSE(f->is_repeated()) << f->full_name() << ": repeated messages are not supported";
        todo.push_back(f->message_type());
        continue;
      }
      const FD::CppType t = f->cpp_type();
      EXPECT_TRUE(t == FD::CPPTYPE_INT64 || t == FD::CPPTYPE_UINT64 || t == FD::CPPTYPE_DOUBLE ||
                  t == FD::CPPTYPE_BOOL || t == FD::CPPTYPE_STRING)
          << f->full_name() << " has type " << f->type_name();
    }
  }
}

TEST(ConfigTest, ShippedConfigsParse) {
  Config c;
  Status st = LoadConfig(std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml", {}, &c);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(c.model().mlp().input_dim(), 784);
  ASSERT_EQ(c.model().mlp().hidden_size(), 2);
  EXPECT_EQ(c.model().mlp().hidden(0), 256);
  EXPECT_EQ(c.model().mlp().hidden(1), 128);
  EXPECT_EQ(c.model().mlp().num_classes(), 10);
  EXPECT_EQ(c.model().mlp().activation(), "relu");
  EXPECT_EQ(c.optim().name(), "adamw");
  EXPECT_DOUBLE_EQ(c.optim().lr(), 1e-3);
  EXPECT_EQ(c.schedule().kind(), "cosine");
  EXPECT_EQ(c.schedule().warmup_steps(), 100);
  EXPECT_EQ(c.data().batch_size(), 64);
  EXPECT_EQ(c.train().epochs(), 3);
  EXPECT_EQ(c.train().log_every(), 100);
  EXPECT_EQ(c.train().device(), "auto");
  EXPECT_EQ(c.run().dir(), "runs/fashion_mnist_mlp");

  Config ci;
  st = LoadConfig(std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml", {}, &ci);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ci.train().epochs(), 1);
  EXPECT_EQ(ci.data().batch_size(), 128);
  EXPECT_EQ(ci.model().mlp().hidden_size(), 2);
  EXPECT_EQ(ci.run().dir(), "runs/fashion_mnist_mlp_ci");
}

// Mutations of the shipped config: each one either fails with an InvalidArgument that names the
// source, or loads a config that survives the ConfigToYaml round trip.
TEST(ConfigTest, MutatedConfigsFailCleanlyOrRoundTrip) {
  std::ifstream in(std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string seed = buf.str();
  ASSERT_FALSE(seed.empty());
  const std::string alphabet = " \n-:#[],'\"09.eEx_";
  std::mt19937 rng(42);
  int ok = 0;
  // 1,000 mutations (26 s under ASan at 3,000); fuzz/config_fuzzer.cc explores further, guided by coverage.
  for (int iter = 0; iter < 1000; ++iter) {
    std::string text = seed;
    for (int e = 0; e < 3; ++e) {
      const std::size_t pos = rng() % text.size();
      text[pos] = alphabet[rng() % alphabet.size()];
    }
    Config c;
    const Status st = ParseConfig(text, "m.yaml", {}, &c);
    if (!st.ok()) {
      ASSERT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
      ASSERT_EQ(st.message().rfind("m.yaml:", 0), 0u) << st.message();
      continue;
    }
    ++ok;
    Config back;
    ASSERT_TRUE(ParseConfig(ConfigToYaml(c), "back.yaml", {}, &back).ok()) << ConfigToYaml(c);
    ASSERT_TRUE(MessageDifferencer::Equals(c, back)) << text;
  }
  EXPECT_GT(ok, 30);  // many mutations land in comments or keep values valid
}

// ---- the storage section and its renamed keys ---------------------------------------------------

TEST(ConfigTest, StorageSectionDefaultsAndKeys) {
  Config c = MustParse("");
  EXPECT_EQ(c.storage().endpoint(), "");
  EXPECT_EQ(c.storage().region(), "");
  EXPECT_TRUE(c.storage().path_style());
  EXPECT_EQ(c.storage().multipart_threshold_mb(), 64);
  EXPECT_EQ(c.storage().part_size_mb(), 16);
  EXPECT_EQ(c.storage().parallel_parts(), 8);
  EXPECT_DOUBLE_EQ(c.storage().retry_budget_s(), 60);
  EXPECT_FALSE(c.storage().unsigned_payload());
  c = MustParse(
      "storage:\n  endpoint: http://127.0.0.1:7480\n  region: eu-west-1\n  path_style: false\n"
      "  multipart_threshold_mb: 8\n  part_size_mb: 5\n  parallel_parts: 2\n  retry_budget_s: 3\n"
      "  unsigned_payload: true\n");
  EXPECT_EQ(c.storage().endpoint(), "http://127.0.0.1:7480");
  EXPECT_EQ(c.storage().region(), "eu-west-1");
  EXPECT_FALSE(c.storage().path_style());
  EXPECT_EQ(c.storage().multipart_threshold_mb(), 8);
  EXPECT_EQ(c.storage().part_size_mb(), 5);
  EXPECT_EQ(c.storage().parallel_parts(), 2);
  EXPECT_DOUBLE_EQ(c.storage().retry_budget_s(), 3);
  EXPECT_TRUE(c.storage().unsigned_payload());
  EXPECT_NE(ErrorOf("storage:\n  part_size_mb: 4\n").find("key 'storage.part_size_mb': expected an integer >= 5"),
            std::string::npos);
  const std::string yaml = ConfigToYaml(c);
  EXPECT_NE(yaml.find("storage:\n  endpoint: \"http://127.0.0.1:7480\"\n"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("s3_"), std::string::npos) << yaml;  // the old keys are never written
}

// Every old key of the data and checkpoint sections still sets its storage key, with one warning naming them.
TEST(ConfigTest, OldStorageKeysAreReadUnderTheirNewNames) {
  dtrain::testing::LogCapture log;
  const Config c = MustParse(
      "data:\n  s3_region: eu-west-1\ncheckpoint:\n  s3_endpoint: http://127.0.0.1:7480\n  s3_path_style: false\n"
      "  s3_multipart_threshold_mb: 8\n  s3_part_size_mb: 5\n  s3_parallel_parts: 2\n  s3_retry_budget_s: 3\n"
      "  s3_unsigned_payload: true\n");
  EXPECT_EQ(c.storage().endpoint(), "http://127.0.0.1:7480");
  EXPECT_EQ(c.storage().region(), "eu-west-1");
  EXPECT_FALSE(c.storage().path_style());
  EXPECT_EQ(c.storage().multipart_threshold_mb(), 8);
  EXPECT_EQ(c.storage().part_size_mb(), 5);
  EXPECT_EQ(c.storage().parallel_parts(), 2);
  EXPECT_DOUBLE_EQ(c.storage().retry_budget_s(), 3);
  EXPECT_TRUE(c.storage().unsigned_payload());
  EXPECT_NE(log.text().find("x.yaml: deprecated keys, read under their new names: data.s3_region -> storage.region, "
                            "checkpoint.s3_endpoint -> storage.endpoint"),
            std::string::npos)
      << log.text();
  // --set with an old key sets the new one (overrides apply in order, the last wins).
  const Config o =
      MustParse("storage:\n  endpoint: http://a\n", {"checkpoint.s3_endpoint=http://b", "data.s3_region=r"});
  EXPECT_EQ(o.storage().endpoint(), "http://b");
  EXPECT_EQ(o.storage().region(), "r");
  EXPECT_NE(log.text().find("--set checkpoint.s3_endpoint=http://b: key 'checkpoint.s3_endpoint' is deprecated, set "
                            "as 'storage.endpoint'"),
            std::string::npos)
      << log.text();
}

// A config written before the rename (the one stored in an old checkpoint) holds every old key, mostly at its
// default: those say nothing, so data.s3_endpoint "" does not undo checkpoint.s3_endpoint.
TEST(ConfigTest, OldStorageKeysAtTheirDefaultSayNothing) {
  const Config c = MustParse(
      "data:\n  s3_endpoint: \"\"\n  s3_region: \"\"\n  s3_path_style: true\ncheckpoint:\n"
      "  s3_endpoint: \"http://x:1\"\n  s3_region: \"\"\n  s3_path_style: true\n  s3_part_size_mb: 16\n"
      "storage:\n  part_size_mb: 32\n");
  EXPECT_EQ(c.storage().endpoint(), "http://x:1");
  EXPECT_EQ(c.storage().region(), "");
  EXPECT_TRUE(c.storage().path_style());
  EXPECT_EQ(c.storage().part_size_mb(), 32);  // the old key at its default leaves the new key's value
  // The same value under both names is no conflict.
  EXPECT_EQ(MustParse("checkpoint:\n  s3_region: r\nstorage:\n  region: r\n").storage().region(), "r");
}

// Every (renamed_from) key is a key the schema no longer has (else it would never be read as the new one), on a
// singular scalar field.
TEST(ConfigTest, RenamedKeysAreNotLiveKeys) {
  using FD = google::protobuf::FieldDescriptor;
  std::vector<const google::protobuf::Descriptor*> todo{Config::descriptor()};
  int renamed = 0;
  while (!todo.empty()) {
    const google::protobuf::Descriptor* d = todo.back();
    todo.pop_back();
    for (int i = 0; i < d->field_count(); ++i) {
      const FD* f = d->field(i);
      if (f->cpp_type() == FD::CPPTYPE_MESSAGE) todo.push_back(f->message_type());
      std::stringstream olds(f->options().GetExtension(dtrain::proto::renamed_from));
      for (std::string old; std::getline(olds, old, '|');) {
        ++renamed;
        EXPECT_NE(f->cpp_type(), FD::CPPTYPE_MESSAGE) << f->full_name();
        EXPECT_FALSE(f->is_repeated()) << f->full_name();
        const google::protobuf::Descriptor* walk = Config::descriptor();
        const FD* live = nullptr;
        std::stringstream parts(old);
        for (std::string part; walk != nullptr && std::getline(parts, part, '.');) {
          live = walk->FindFieldByName(part);
          walk = live != nullptr ? live->message_type() : nullptr;
        }
        EXPECT_EQ(live, nullptr) << old << " (renamed to " << f->full_name() << ") is still a key of the schema";
      }
    }
  }
  EXPECT_EQ(renamed, 11);  // data.s3_* (3) and checkpoint.s3_* (8), now storage.*
}

TEST(ConfigTest, OldAndNewStorageKeysThatDisagreeAreAnError) {
  EXPECT_EQ(ErrorOf("data:\n  s3_endpoint: http://a\ncheckpoint:\n  s3_endpoint: http://b\n"),
            "x.yaml:4: key 'checkpoint.s3_endpoint': renamed to 'storage.endpoint', gives \"http://b\" but "
            "'data.s3_endpoint' gives \"http://a\": keep only 'storage.endpoint'");
  EXPECT_EQ(ErrorOf("checkpoint:\n  s3_parallel_parts: 4\nstorage:\n  parallel_parts: 2\n"),
            "x.yaml:2: key 'checkpoint.s3_parallel_parts': renamed to 'storage.parallel_parts', gives 4 but "
            "'storage.parallel_parts' gives 2: keep only 'storage.parallel_parts'");
  // An old key's value is checked as the new key's, and the error names the old key.
  EXPECT_NE(ErrorOf("checkpoint:\n  s3_part_size_mb: 4\n")
                .find("x.yaml:2: key 'checkpoint.s3_part_size_mb': "
                      "expected an integer >= 5, got '4'"),
            std::string::npos);
  // Old keys are only those the schema names in (renamed_from).
  EXPECT_NE(ErrorOf("checkpoint:\n  s3_bucket: b\n").find("unknown key 'checkpoint.s3_bucket'"), std::string::npos);
}

}  // namespace
}  // namespace dtrain::runtime
