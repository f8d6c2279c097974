// WeightsMetadata: what exported weights carry so they are usable without dtrain's config.

#include "runtime/train/weights_metadata.h"

#include <gtest/gtest.h>

#include "runtime/config/config.h"

namespace dtrain::runtime {
namespace {

proto::Config Parse(const std::string& yaml) {
  proto::Config cfg;
  const Status st = ParseConfig(yaml, "test.yaml", {}, &cfg);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return cfg;
}

TEST(WeightsMetadata, ImageModelsCarryTheirInputLayoutAndNormalization) {
  std::map<std::string, std::string> m;
  ASSERT_TRUE(WeightsMetadata(Parse("model:\n  kind: cnn\n"), &m).ok());
  EXPECT_EQ(m.at("format"), "pt");
  EXPECT_EQ(m.at("model_kind"), "cnn");
  EXPECT_EQ(m.at("input_shape"), "1x28x28");
  EXPECT_EQ(m.at("num_classes"), "10");
  EXPECT_EQ(m.at("input_normalization"), "(pixel / 255 - input_mean) / input_std");
  EXPECT_NEAR(std::stod(m.at("input_mean")), 0.2860, 1e-6);  // Fashion-MNIST's train-split statistics
  EXPECT_NEAR(std::stod(m.at("input_std")), 0.3530, 1e-6);
  EXPECT_EQ(m.at("model_config").rfind("model:\n  kind: cnn\n", 0), 0u) << m.at("model_config");
  EXPECT_EQ(m.at("model_config").find("\ndata:"), std::string::npos) << m.at("model_config");
}

TEST(WeightsMetadata, TokenModelsCarryVocabularyAndContextNotImageFields) {
  std::map<std::string, std::string> m;
  ASSERT_TRUE(WeightsMetadata(Parse("model:\n  kind: gpt2\n  gpt2:\n    vocab_size: 256\n"), &m).ok());
  EXPECT_EQ(m.at("model_kind"), "gpt2");
  EXPECT_EQ(m.at("vocab_size"), "256");
  EXPECT_EQ(m.at("max_seq_len"), "1024");
  EXPECT_EQ(m.count("input_mean"), 0u);
  EXPECT_EQ(m.count("num_classes"), 0u);
}

}  // namespace
}  // namespace dtrain::runtime
