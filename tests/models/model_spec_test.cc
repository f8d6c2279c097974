// The model registry and the built-in ModelSpecs (models/model_registry.h, models/model_spec.h): what each
// built-in kind tells the runtime (run check, tokens, weights metadata, HF export), and registering a whole spec.
// The registry is process-wide: every kind registered here has a name no other test of this binary uses.

#include "models/model_spec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "models/model_registry.h"

namespace dtrain::models {
namespace {

proto::DatasetSchema Images(std::vector<int64_t> dims, int classes, bool labels = true) {
  proto::DatasetSchema s;
  s.set_kind(proto::DatasetSchema::IMAGE);
  for (int64_t d : dims) s.add_dims(d);
  s.set_has_label(labels);
  s.set_num_classes(classes);
  return s;
}

proto::DatasetSchema Tokens(int64_t record, int64_t vocab) {
  proto::DatasetSchema s;
  s.set_kind(proto::DatasetSchema::TOKENS);
  s.add_dims(record);
  s.set_vocab_size(vocab);
  return s;
}

proto::Config Config(const std::string& kind) {
  proto::Config cfg;
  cfg.mutable_model()->set_kind(kind);
  auto* mlp = cfg.mutable_model()->mutable_mlp();
  mlp->set_input_dim(784);
  mlp->set_num_classes(10);
  auto* cnn = cfg.mutable_model()->mutable_cnn();
  cnn->set_in_channels(1);
  cnn->set_image_size(28);
  cnn->set_num_classes(10);
  auto* g = cfg.mutable_model()->mutable_gpt2();
  g->set_vocab_size(256);
  g->set_padded_vocab_size(320);
  g->set_max_seq_len(64);
  g->set_n_layer(2);
  g->set_n_head(2);
  g->set_n_embd(8);
  return cfg;
}

// The message of `st`, which must be InvalidArgument.
std::string Refusal(const Status& st) {
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  return st.message();
}

TEST(ModelRegistry, BuiltinsComeFirstEachWithItsParts) {
  const std::vector<std::string> kinds = ModelKinds();
  ASSERT_GE(kinds.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(kinds.begin(), kinds.begin() + 3),
            (std::vector<std::string>{"mlp", "cnn", "gpt2"}));
  for (const char* kind : {"mlp", "cnn", "gpt2"}) {
    const ModelSpec* spec = FindModel(kind);
    ASSERT_NE(spec, nullptr) << kind;
    EXPECT_EQ(spec->kind, kind);
    EXPECT_TRUE(spec->build && spec->check_data && spec->weights_metadata) << kind;
    EXPECT_EQ(static_cast<bool>(spec->tokens), std::string(kind) == "gpt2") << kind;
    EXPECT_EQ(static_cast<bool>(spec->hf_export), std::string(kind) == "gpt2") << kind;
  }
  EXPECT_EQ(FindModel("gtp2"), nullptr);
  EXPECT_EQ(FindModel(""), nullptr);
}

TEST(ModelRegistry, AWholeSpecRegistersOnceAndIsFoundAtAStableAddress) {
  ModelSpec spec;
  spec.kind = "test_lm";
  spec.build = [](const proto::Config&, DeviceContext&, std::unique_ptr<Model>*) { return Status::OK(); };
  spec.tokens = [](const proto::Config&) { return TokenInput{128, 1000}; };
  ASSERT_TRUE(RegisterModel(spec).ok());
  const ModelSpec* found = FindModel("test_lm");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->tokens(proto::Config()).seq_len, 128);
  EXPECT_FALSE(found->check_data);
  EXPECT_EQ(FindModel("test_lm"), found);
  const std::vector<std::string> kinds = ModelKinds();
  EXPECT_NE(std::find(kinds.begin() + 3, kinds.end(), "test_lm"), kinds.end());

  EXPECT_NE(Refusal(RegisterModel(spec)).find("'test_lm' is already registered"), std::string::npos);
  spec.kind = "cnn";
  EXPECT_NE(Refusal(RegisterModel(spec)).find("'cnn' is a built-in model kind"), std::string::npos);
  spec.kind = "a/b";
  EXPECT_NE(Refusal(RegisterModel(spec)).find("bad model kind 'a/b'"), std::string::npos);
  spec.kind = "test_no_build";
  spec.build = nullptr;
  EXPECT_NE(Refusal(RegisterModel(spec)).find("empty factory for 'test_no_build'"), std::string::npos);
  EXPECT_EQ(FindModel("test_no_build"), nullptr);
}

TEST(ModelSpecCheck, MlpTakesLabelledImagesOfItsInputDimAndClasses) {
  const ModelSpec& mlp = *FindModel("mlp");
  const proto::Config cfg = Config("mlp");
  EXPECT_TRUE(mlp.check_data(cfg, "d", Images({28, 28}, 10)).ok());
  EXPECT_TRUE(mlp.check_data(cfg, "d", Images({1, 28, 28}, 7)).ok());  // fewer classes than the head: fine
  EXPECT_NE(Refusal(mlp.check_data(cfg, "data.train_shards x", Tokens(65, 256)))
                .find("data.train_shards x holds tokens, but model.kind mlp takes images"),
            std::string::npos);
  EXPECT_NE(Refusal(mlp.check_data(cfg, "d", Images({32, 32}, 10)))
                .find("d has images of 1024 values, but the mlp takes model.mlp.input_dim 784"),
            std::string::npos);
  EXPECT_NE(Refusal(mlp.check_data(cfg, "d", Images({28, 28}, 10, /*labels=*/false))).find("d has no labels"),
            std::string::npos);
  EXPECT_NE(Refusal(mlp.check_data(cfg, "d", Images({28, 28}, 100)))
                .find("d has 100 classes, but model.mlp.num_classes is 10"),
            std::string::npos);
}

TEST(ModelSpecCheck, CnnTakesItsChannelsAndImageSizeNotJustTheCount) {
  const ModelSpec& cnn = *FindModel("cnn");
  proto::Config cfg = Config("cnn");
  EXPECT_TRUE(cnn.check_data(cfg, "d", Images({28, 28}, 10)).ok());  // [H, W]: one channel
  EXPECT_TRUE(cnn.check_data(cfg, "d", Images({1, 28, 28}, 10)).ok());
  cfg.mutable_model()->mutable_cnn()->set_in_channels(4);
  cfg.mutable_model()->mutable_cnn()->set_image_size(14);  // 4x14x14 = 784 values, another layout
  EXPECT_NE(Refusal(cnn.check_data(cfg, "d", Images({28, 28}, 10)))
                .find("d has 1x28x28 images, but the cnn takes 4x14x14 (model.cnn.in_channels x image_size x "
                      "image_size)"),
            std::string::npos);
}

TEST(ModelSpecCheck, Gpt2TakesTokensOfItsVocabularyAndContext) {
  const ModelSpec& gpt2 = *FindModel("gpt2");
  const proto::Config cfg = Config("gpt2");
  EXPECT_TRUE(gpt2.check_data(cfg, "d", Tokens(65, 256)).ok());
  EXPECT_NE(Refusal(gpt2.check_data(cfg, "data.dataset fashion_mnist", Images({28, 28}, 10)))
                .find("data.dataset fashion_mnist holds images, but model.kind gpt2 takes tokens"),
            std::string::npos);
  EXPECT_NE(Refusal(gpt2.check_data(cfg, "d", Tokens(65, 300)))
                .find("model.gpt2.vocab_size is 256: raise it to at least 300"),
            std::string::npos);
  EXPECT_NE(Refusal(gpt2.check_data(cfg, "d", Tokens(66, 256))).find("longer than model.gpt2.max_seq_len 64"),
            std::string::npos);
}

TEST(ModelSpecParts, TokensAndWeightsMetadataComeFromTheModelSection) {
  const TokenInput t = FindModel("gpt2")->tokens(Config("gpt2"));
  EXPECT_EQ(t.seq_len, 64);
  EXPECT_EQ(t.vocab_size, 256);
  std::map<std::string, std::string> m;
  FindModel("gpt2")->weights_metadata(Config("gpt2"), &m);
  EXPECT_EQ(m, (std::map<std::string, std::string>{{"vocab_size", "256"}, {"max_seq_len", "64"}}));
  m.clear();
  FindModel("cnn")->weights_metadata(Config("cnn"), &m);
  EXPECT_EQ(m, (std::map<std::string, std::string>{{"num_classes", "10"}, {"input_shape", "1x28x28"}}));
  m.clear();
  FindModel("mlp")->weights_metadata(Config("mlp"), &m);
  EXPECT_EQ(m, (std::map<std::string, std::string>{{"num_classes", "10"}, {"input_shape", "784"}}));
}

TEST(ModelSpecParts, Gpt2HfPlanTransposesTheLinearWeightsAndTrimsTheVocabulary) {
  HfExportPlan plan;
  ASSERT_TRUE(FindModel("gpt2")->hf_export(Config("gpt2"), &plan).ok());
  ASSERT_EQ(plan.tensors.size(), 2u + 12u * 2u + 2u);
  EXPECT_EQ(plan.tensors[0].name, "transformer.wte.weight");
  EXPECT_EQ(plan.tensors[0].param_shape, (std::vector<int64_t>{320, 8}));
  EXPECT_EQ(plan.tensors[0].keep_rows, 256);
  for (const HfTensor& t : plan.tensors) {
    EXPECT_EQ(t.name, "transformer." + t.param);
    EXPECT_EQ(t.transpose, t.param_shape.size() == 2 && t.param.rfind("h.", 0) == 0) << t.param;
  }
  EXPECT_NE(plan.config_json.find("\"GPT2LMHeadModel\""), std::string::npos) << plan.config_json;
  EXPECT_NE(plan.config_json.find("\"n_positions\": 64"), std::string::npos) << plan.config_json;
}

}  // namespace
}  // namespace dtrain::models
