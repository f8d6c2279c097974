// ResolveAutoSizes (runtime/train/auto_sizes.h): model sizes given as 0 taken from a real dataset's manifest, and the
// errors naming the key when the data has no vocabulary or there is no local dataset.
#include "runtime/train/auto_sizes.h"

#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "data/convert.h"
#include "data/shard_writer.h"
#include "runtime/config/config.h"
#include "runtime/train/run_check.h"
#include "tests/testing/fixtures.h"

namespace dtrain::runtime {
namespace {

using testing::TempDir;

proto::Config Parse(const std::string& yaml) {
  proto::Config c;
  const Status st = ParseConfig(yaml, "test.yaml", {}, &c);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return c;
}

std::string Gpt2Auto(const std::string& train) {
  return "model:\n  kind: gpt2\n  gpt2:\n    vocab_size: 0\n    padded_vocab_size: 0\n    max_seq_len: 0\n"
         "    n_layer: 1\n    n_head: 2\n    n_embd: 16\ndata:\n  dataset: shards\n  train_shards: " +
         train + "\n  batch_size: 2\ntrain:\n  device: cpu\n  max_steps: 1\n";
}

TEST(AutoSizesTest, Gpt2SizesComeFromTheDataset) {
  TempDir dir;
  std::ofstream(dir.File("t.txt")) << std::string(3000, 'x');
  data::TextConvertOptions o;
  o.seq_len = 48;
  o.val_fraction = 0.1;
  ASSERT_TRUE(data::ConvertText({dir.File("t.txt")}, dir.File("ds"), o).ok());  // byte tokens: vocab 256
  proto::Config c = Parse(Gpt2Auto(dir.File("ds/train")));
  ASSERT_TRUE(ResolveAutoSizes(&c).ok());
  EXPECT_EQ(c.model().gpt2().vocab_size(), 256);
  EXPECT_EQ(c.model().gpt2().padded_vocab_size(), 256);
  EXPECT_EQ(c.model().gpt2().max_seq_len(), 48);
  RunCheck check;  // and the resolved config passes the run check on that data
  EXPECT_TRUE(CheckRun(c, 1, &check).ok());

  // Given sizes are kept; padded auto rounds the given vocabulary up to 128.
  c = Parse(Gpt2Auto(dir.File("ds/train")) + "\n");
  c.mutable_model()->mutable_gpt2()->set_vocab_size(300);
  ASSERT_TRUE(ResolveAutoSizes(&c).ok());
  EXPECT_EQ(c.model().gpt2().vocab_size(), 300);
  EXPECT_EQ(c.model().gpt2().padded_vocab_size(), 384);
}

TEST(AutoSizesTest, ImageDatasetHasNoVocabulary) {
  TempDir dir;
  proto::DatasetSchema s;
  s.set_kind(proto::DatasetSchema::IMAGE);
  s.add_dims(2);
  s.add_dims(2);
  s.set_has_label(true);
  s.set_num_classes(2);
  s.set_pixel_std(1.0f);  // a valid image schema (data/manifest.cc ValidateManifest)
  std::unique_ptr<data::DatasetWriter> w;
  ASSERT_TRUE(data::DatasetWriter::Create(dir.File("img"), s, 10, &w).ok());
  const std::vector<uint8_t> rec(4 + 4, 0);
  ASSERT_TRUE(w->Add(rec.data(), rec.size()).ok());
  ASSERT_TRUE(w->Finish("test").ok());
  proto::Config c = Parse(Gpt2Auto(dir.File("img")));
  const Status st = ResolveAutoSizes(&c);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model.gpt2.vocab_size: 0 (auto) takes it from the training dataset"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("has no token vocabulary (it holds images)"), std::string::npos) << st.ToString();
}

TEST(AutoSizesTest, NoLocalDatasetIsAnErrorNamingTheKey) {
  proto::Config c = Parse(
      "model:\n  kind: llama\n  llama:\n    vocab_size: 0\ndata:\n  dataset: synthetic_tokens\ntrain:\n  max_steps: "
      "1\n");
  const Status st = ResolveAutoSizes(&c);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model.llama.vocab_size: 0 (auto)"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("data.dataset is synthetic_tokens"), std::string::npos) << st.ToString();
  proto::Config given = Parse("model:\n  kind: gpt2\ndata:\n  dataset: synthetic_tokens\ntrain:\n  max_steps: 1\n");
  EXPECT_TRUE(ResolveAutoSizes(&given).ok());  // nothing auto: nothing read, nothing changed
  EXPECT_EQ(given.model().gpt2().vocab_size(), 50257);
}

}  // namespace
}  // namespace dtrain::runtime
