// BuildModel and the custom-model registry (runtime/train/model_factory.h). The registry is process-wide, so
// every kind registered here has a name no other test of this binary uses.

#include "runtime/train/model_factory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "models/mlp.h"
#include "tests/testing/grad_check.h"

namespace dtrain::runtime {
namespace {

proto::Config ConfigOfKind(const std::string& kind) {
  proto::Config cfg;
  cfg.mutable_model()->set_kind(kind);
  cfg.mutable_model()->mutable_mlp()->set_input_dim(6);
  cfg.mutable_model()->mutable_mlp()->add_hidden(5);
  cfg.mutable_model()->mutable_mlp()->set_num_classes(3);
  cfg.mutable_train()->set_precision("auto");
  return cfg;
}

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

// A factory that builds a built-in Mlp of width model.mlp.hidden[0] + 1, so the test sees that the
// factory ran on the config it was given.
Status WiderMlp(const proto::Config& cfg, DeviceContext& ctx, std::unique_ptr<models::Model>* out) {
  models::MlpOptions o;
  o.input_dim = cfg.model().mlp().input_dim();
  o.hidden = {cfg.model().mlp().hidden(0) + 1};
  o.num_classes = cfg.model().mlp().num_classes();
  std::unique_ptr<models::Mlp> mlp;
  DT_RETURN_IF_ERROR(models::Mlp::Create(ctx, o, &mlp));
  *out = std::move(mlp);
  return Status::OK();
}

TEST(ModelFactoryTest, RegisteredKindIsBuiltByItsFactoryFromTheConfig) {
  ASSERT_TRUE(RegisterModel("test_wider_mlp", &WiderMlp).ok());
  auto ctx = Cpu();
  std::unique_ptr<models::Model> m;
  DT_ASSERT_OK(BuildModel(ConfigOfKind("test_wider_mlp"), *ctx, &m));
  ASSERT_NE(m, nullptr);
  // 6 -> 6 -> 3: (6*6 + 6) + (3*6 + 3) parameters, on the CPU.
  EXPECT_EQ(m->params().numel(), 6 * 6 + 6 + 3 * 6 + 3);
  EXPECT_FALSE(m->params().is_cuda());
  const auto kinds = ModelKinds();
  EXPECT_EQ(std::vector<std::string>(kinds.begin(), kinds.begin() + 3),
            (std::vector<std::string>{"mlp", "cnn", "gpt2"}));
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "test_wider_mlp"), kinds.end());
}

TEST(ModelFactoryTest, BuiltinKindsStillBuildAndTakePrecedence) {
  auto ctx = Cpu();
  std::unique_ptr<models::Model> m;
  DT_ASSERT_OK(BuildModel(ConfigOfKind("mlp"), *ctx, &m));
  EXPECT_EQ(m->params().numel(), 5 * 6 + 5 + 3 * 5 + 3);  // 6 -> 5 -> 3
  proto::Config bf16 = ConfigOfKind("mlp");
  bf16.mutable_train()->set_precision("bf16");
  const Status st = BuildModel(bf16, *ctx, &m);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("is not implemented for model.kind mlp, which trains in fp32"), std::string::npos)
      << st.ToString();
  // The CNN has a bf16 path, on a GPU only; it has no fp16 one.
  proto::Config cnn = ConfigOfKind("cnn");
  proto::CnnConfig* c = cnn.mutable_model()->mutable_cnn();
  c->set_in_channels(1);
  c->set_image_size(8);
  c->add_channels(4);
  c->set_blocks_per_stage(1);
  c->set_num_classes(3);
  cnn.mutable_train()->set_precision("bf16");
  const Status cnn_st = BuildModel(cnn, *ctx, &m);
  EXPECT_EQ(cnn_st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(cnn_st.message().find("bf16 needs a GPU"), std::string::npos) << cnn_st.ToString();
  cnn.mutable_train()->set_precision("fp16");
  const Status fp16_st = BuildModel(cnn, *ctx, &m);
  EXPECT_NE(fp16_st.message().find("fp16 is not implemented for model.kind cnn"), std::string::npos)
      << fp16_st.ToString();
  cnn.mutable_train()->set_precision("auto");  // auto on the CPU: fp32
  DT_ASSERT_OK(BuildModel(cnn, *ctx, &m));
  // GPT-2's chunked loss runs the LM head's backward in the forward, before fp16's dynamic loss scale is known: the
  // pair is refused naming both keys (before the CPU's own fp16 refusal), and the key builds in fp32.
  proto::Config gpt2 = ConfigOfKind("gpt2");
  proto::Gpt2Config* g = gpt2.mutable_model()->mutable_gpt2();
  g->set_vocab_size(61);
  g->set_padded_vocab_size(64);
  g->set_max_seq_len(8);
  g->set_n_layer(1);
  g->set_n_head(2);
  g->set_n_embd(16);
  g->set_loss_chunk_tokens(5);
  gpt2.mutable_data()->set_batch_size(1);  // 8 tokens: chunks of 5 and 3
  gpt2.mutable_train()->set_precision("fp16");
  const Status chunk_st = BuildModel(gpt2, *ctx, &m);
  EXPECT_EQ(chunk_st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(chunk_st.message().find("model.gpt2.loss_chunk_tokens 5 needs train.precision bf16, fp8 or fp32, not fp16"),
            std::string::npos)
      << chunk_st.ToString();
  gpt2.mutable_train()->set_precision("fp32");
  DT_ASSERT_OK(BuildModel(gpt2, *ctx, &m));
  EXPECT_EQ(m->logits().dim(0), 5);  // [chunk, padded vocabulary]
}

TEST(ModelFactoryTest, RegistrationRejectsBadNamesBuiltinsDuplicatesAndEmptyFactories) {
  ASSERT_TRUE(RegisterModel("test_dup", &WiderMlp).ok());
  const struct {
    std::string kind;
    bool empty_factory;
    std::string says;
  } cases[] = {
      {"test_dup", false, "'test_dup' is already registered"},
      {"mlp", false, "'mlp' is a built-in model kind"},
      {"gpt2", false, "'gpt2' is a built-in model kind"},
      {"", false, "bad model kind ''"},
      {"my model", false, "bad model kind 'my model'"},
      {"test_no_factory", true, "empty factory for 'test_no_factory'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.kind);
    const Status st = RegisterModel(c.kind, c.empty_factory ? ModelFactory() : ModelFactory(&WiderMlp));
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.ToString();
  }
  const auto kinds = ModelKinds();
  EXPECT_EQ(std::find(kinds.begin(), kinds.end(), "test_no_factory"), kinds.end());
}

TEST(ModelFactoryTest, UnknownKindNamesEveryKnownKindAndTheRegistry) {
  ASSERT_TRUE(RegisterModel("test_listed", &WiderMlp).ok());
  auto ctx = Cpu();
  std::unique_ptr<models::Model> m;
  const Status st = BuildModel(ConfigOfKind("mlpp"), *ctx, &m);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("model.kind: unknown model 'mlpp' (known: mlp, cnn, gpt2, "), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("test_listed"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("RegisterModel"), std::string::npos) << st.ToString();
}

TEST(ModelFactoryTest, CheckModelKindAcceptsWhatBuildModelKnowsWithoutBuilding) {
  ASSERT_TRUE(RegisterModel("test_checked", &WiderMlp).ok());
  for (const char* kind : {"mlp", "cnn", "gpt2", "test_checked"}) {
    EXPECT_TRUE(CheckModelKind(ConfigOfKind(kind)).ok()) << kind;
  }
  const Status st = CheckModelKind(ConfigOfKind("gtp2"));
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("model.kind: unknown model 'gtp2' (known: mlp, cnn, gpt2, "), std::string::npos)
      << st.ToString();
}

TEST(ModelFactoryTest, FactoryErrorsKeepTheirCodeAndNameTheKind) {
  ASSERT_TRUE(RegisterModel("test_failing", [](const proto::Config&, DeviceContext&, std::unique_ptr<models::Model>*) {
                return Status::InvalidArgument("hidden must be even");
              }).ok());
  ASSERT_TRUE(RegisterModel("test_null", [](const proto::Config&, DeviceContext&, std::unique_ptr<models::Model>*) {
                return Status::OK();
              }).ok());
  auto ctx = Cpu();
  std::unique_ptr<models::Model> m;
  Status st = BuildModel(ConfigOfKind("test_failing"), *ctx, &m);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "model.kind test_failing: hidden must be even");
  st = BuildModel(ConfigOfKind("test_null"), *ctx, &m);
  EXPECT_EQ(st.code(), Status::Code::kInternal);
  EXPECT_NE(st.message().find("returned no model"), std::string::npos) << st.ToString();
}

TEST(ModelFactoryTest, TokensComeFromTheSpecOfTokenModelsOnly) {
  proto::Config gpt2 = ConfigOfKind("gpt2");
  gpt2.mutable_model()->mutable_gpt2()->set_max_seq_len(64);
  gpt2.mutable_model()->mutable_gpt2()->set_vocab_size(300);
  EXPECT_EQ(TokensPerSample(gpt2), 64);
  models::TokenInput t;
  DT_ASSERT_OK(SyntheticTokenInput(gpt2, &t));
  EXPECT_EQ(t.seq_len, 64);
  EXPECT_EQ(t.vocab_size, 300);
  EXPECT_EQ(TokensPerSample(ConfigOfKind("mlp")), 0);
  EXPECT_EQ(TokensPerSample(ConfigOfKind("no_such_kind")), 0);
  const Status st = SyntheticTokenInput(ConfigOfKind("cnn"), &t);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("model.kind cnn takes no tokens (token models: gpt2"), std::string::npos)
      << st.ToString();
}

TEST(ModelFactoryTest, FindModelSpecGivesTheRegisteredRecord) {
  ASSERT_TRUE(RegisterModel("test_found", &WiderMlp).ok());
  const models::ModelSpec* spec = nullptr;
  DT_ASSERT_OK(FindModelSpec(ConfigOfKind("test_found"), &spec));
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(spec->kind, "test_found");
  EXPECT_TRUE(spec->build);
  EXPECT_FALSE(spec->check_data || spec->tokens || spec->weights_metadata || spec->hf_export);  // a bare factory
  EXPECT_EQ(FindModelSpec(ConfigOfKind("test_not_found"), &spec).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::runtime
