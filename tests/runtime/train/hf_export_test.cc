// ExportHuggingFace: names, transposes, the trimmed vocabulary and config.json, read back from the files.

#include "runtime/train/hf_export.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/crc32c.h"
#include "data/shard_writer.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::ReadFile;
using testing::TempDir;

proto::Config TinyGpt2() {
  proto::Config cfg;
  cfg.mutable_model()->set_kind("gpt2");
  auto* g = cfg.mutable_model()->mutable_gpt2();
  g->set_vocab_size(5);
  g->set_padded_vocab_size(8);
  g->set_max_seq_len(4);
  g->set_n_layer(2);
  g->set_n_head(1);
  g->set_n_embd(2);
  return cfg;
}

// dtrain's parameters of TinyGpt2, each element = 1000 * (tensor index) + element index.
std::vector<NamedTensor> Params() {
  const int64_t c = 2;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"wte.weight", {8, c}}, {"wpe.weight", {4, c}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    for (auto s : std::vector<std::pair<std::string, std::vector<int64_t>>>{{"ln_1.weight", {c}},
                                                                            {"ln_1.bias", {c}},
                                                                            {"attn.c_attn.weight", {3 * c, c}},
                                                                            {"attn.c_attn.bias", {3 * c}},
                                                                            {"attn.c_proj.weight", {c, c}},
                                                                            {"attn.c_proj.bias", {c}},
                                                                            {"ln_2.weight", {c}},
                                                                            {"ln_2.bias", {c}},
                                                                            {"mlp.c_fc.weight", {4 * c, c}},
                                                                            {"mlp.c_fc.bias", {4 * c}},
                                                                            {"mlp.c_proj.weight", {c, 4 * c}},
                                                                            {"mlp.c_proj.bias", {c}}}) {
      shapes.push_back({p + s.first, s.second});
    }
  }
  shapes.push_back({"ln_f.weight", {c}});
  shapes.push_back({"ln_f.bias", {c}});
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i].second) n *= d;
    std::vector<float> v(n);
    for (int64_t k = 0; k < n; ++k) v[k] = static_cast<float>(1000 * i + k);
    out.push_back({shapes[i].first, shapes[i].second, v});
  }
  return out;
}

TEST(HfExport, Gpt2NamesTransposesAndTrimsTheVocabulary) {
  TempDir dir;
  const std::vector<NamedTensor> params = Params();
  ASSERT_TRUE(ExportHuggingFace(TinyGpt2(), params, {{"producer", "dtrain"}}, dir.path() + "/hf").ok());
  std::vector<NamedTensor> hf;
  ASSERT_TRUE(ReadSafetensors(dir.path() + "/hf/model.safetensors", &hf).ok());
  ASSERT_EQ(hf.size(), params.size());
  std::map<std::string, const NamedTensor*> by;
  for (const NamedTensor& t : hf) by[t.name] = &t;

  // wte: the 5 real rows of the 8 padded ones.
  const NamedTensor* wte = by.at("transformer.wte.weight");
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(wte->data, std::vector<float>(params[0].data.begin(), params[0].data.begin() + 10));
  EXPECT_EQ(by.at("transformer.wpe.weight")->data, params[1].data);
  // c_attn: dtrain [3C, C] -> HF Conv1D [C, 3C]; element (r, c) moves to (c, r).
  const NamedTensor* attn = by.at("transformer.h.1.attn.c_attn.weight");
  const NamedTensor& src = *std::find_if(params.begin(), params.end(),
                                         [](const NamedTensor& t) { return t.name == "h.1.attn.c_attn.weight"; });
  EXPECT_EQ(attn->shape, (std::vector<int64_t>{2, 6}));
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 2; ++c) EXPECT_EQ(attn->data[c * 6 + r], src.data[r * 2 + c]) << r << "," << c;
  }
  EXPECT_EQ(by.at("transformer.h.0.mlp.c_proj.weight")->shape, (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(by.at("transformer.h.0.ln_1.bias")->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(by.count("transformer.ln_f.weight"), 1u);

  const auto config = nlohmann::json::parse(ReadFile(dir.path() + "/hf/config.json"));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["vocab_size"], 5);
  EXPECT_EQ(config["n_positions"], 4);
  EXPECT_EQ(config["n_layer"], 2);
  EXPECT_EQ(config["n_embd"], 2);
  EXPECT_EQ(config["activation_function"], "gelu_new");
  EXPECT_EQ(config["tie_word_embeddings"], true);
}

TEST(HfExport, RefusesOtherModelsAndMissingParameters) {
  TempDir dir;
  proto::Config mlp;
  mlp.mutable_model()->set_kind("mlp");
  EXPECT_EQ(ExportHuggingFace(mlp, Params(), {}, dir.path() + "/a").code(), Status::Code::kInvalidArgument);
  std::vector<NamedTensor> missing = Params();
  missing.pop_back();
  const Status st = ExportHuggingFace(TinyGpt2(), missing, {}, dir.path() + "/b");
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("ln_f.bias"), std::string::npos) << st.ToString();
}

// A token dataset at `dir` whose schema names `files` (their CRC32C as `convert-text --tokenizer` records it).
void WriteTokenDataset(const std::string& dir, const std::string& kind, const std::vector<std::string>& files,
                       uint32_t crc) {
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::TOKENS);
  schema.add_dims(5);
  schema.set_token_dtype(proto::DatasetSchema::UINT16);
  schema.set_vocab_size(5);
  schema.mutable_tokenizer()->set_kind(kind);
  for (const std::string& f : files) schema.mutable_tokenizer()->add_files(f);
  schema.mutable_tokenizer()->set_crc32c(crc);
  schema.mutable_tokenizer()->set_eot_token(-1);
  std::unique_ptr<data::DatasetWriter> w;
  ASSERT_TRUE(data::DatasetWriter::Create(dir, schema, 4, &w).ok());
  const uint16_t rec[5] = {0, 1, 2, 3, 4};
  ASSERT_TRUE(w->Add(rec, sizeof(rec)).ok());
  ASSERT_TRUE(w->Finish("test").ok());
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// With no hf: source, the export writes the training dataset's tokenizer under transformers' names with a
// tokenizer_config.json naming the class; a tokenizer file changed since the conversion is a warning, not a copy.
TEST(HfExport, WritesTheDatasetsTokenizer) {
  TempDir tmp;
  const std::string vocab = tmp.path() + "/encoder.json", merges = tmp.path() + "/vocab.bpe";
  WriteText(vocab, "{\"a\": 0}");
  WriteText(merges, "#version: 0.2\n");
  const std::string a = "{\"a\": 0}", b = "#version: 0.2\n";
  const uint32_t crc = Crc32cExtend(Crc32c(a.data(), a.size()), b.data(), b.size());
  WriteTokenDataset(tmp.path() + "/bpe", "gpt2_bpe", {vocab, merges}, crc);
  const std::string spm = tmp.path() + "/tok.model";
  WriteText(spm, "spm bytes");
  WriteTokenDataset(tmp.path() + "/spm", "sentencepiece", {spm}, Crc32c("spm bytes", 9));

  proto::Config cfg = TinyGpt2();
  cfg.mutable_data()->set_dataset("shards");
  cfg.mutable_data()->set_train_shards(tmp.path() + "/bpe");
  HfExportReport r;
  ASSERT_TRUE(ExportHuggingFace(cfg, Params(), {}, tmp.path() + "/out", &r).ok());
  EXPECT_EQ(r.tokenizer_files, (std::vector<std::string>{"vocab.json", "merges.txt", "tokenizer_config.json"}));
  EXPECT_TRUE(r.warning.empty()) << r.warning;
  EXPECT_EQ(ReadFile(tmp.path() + "/out/vocab.json"), a);
  EXPECT_EQ(ReadFile(tmp.path() + "/out/merges.txt"), b);
  EXPECT_EQ(nlohmann::json::parse(ReadFile(tmp.path() + "/out/tokenizer_config.json"))["tokenizer_class"],
            "GPT2TokenizerFast");

  cfg.mutable_data()->set_train_shards(tmp.path() + "/spm");
  HfExportReport s;
  ASSERT_TRUE(ExportHuggingFace(cfg, Params(), {}, tmp.path() + "/out_spm", &s).ok());
  EXPECT_EQ(s.tokenizer_files, (std::vector<std::string>{"tokenizer.model", "tokenizer_config.json"}));
  EXPECT_EQ(ReadFile(tmp.path() + "/out_spm/tokenizer.model"), "spm bytes");
  const auto tc = nlohmann::json::parse(ReadFile(tmp.path() + "/out_spm/tokenizer_config.json"));
  EXPECT_EQ(tc["tokenizer_class"], "LlamaTokenizer");
  EXPECT_EQ(tc["add_bos_token"], false);

  WriteText(spm, "another model");  // changed after the conversion
  HfExportReport changed;
  ASSERT_TRUE(ExportHuggingFace(cfg, Params(), {}, tmp.path() + "/out_changed", &changed).ok());
  EXPECT_TRUE(changed.tokenizer_files.empty());
  EXPECT_NE(changed.warning.find("changed since the data was converted"), std::string::npos) << changed.warning;
  EXPECT_FALSE(std::ifstream(tmp.path() + "/out_changed/tokenizer.model").good());
}

}  // namespace
}  // namespace dtrain::runtime
