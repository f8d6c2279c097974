// ImportHuggingFace (model.init_from: hf:DIR): HF directories written here, in transformers' names and layouts,
// imported into dtrain's parameters; one clear error per kind of mistake; import -> export is byte-identical.

#include "runtime/train/hf_import.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "models/model_registry.h"
#include "runtime/train/hf_export.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// --- GPT-2 -----------------------------------------------------------------------------------------------------

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

// What transformers' config.json says for TinyGpt2 (a save_pretrained file has more keys; these decide).
nlohmann::json Gpt2ConfigJson() {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", 5},
          {"n_positions", 4},
          {"n_ctx", 4},
          {"n_embd", 2},
          {"n_layer", 2},
          {"n_head", 1},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-05},
          {"scale_attn_weights", true},
          {"torch_dtype", "float32"}};
}

// GPT2LMHeadModel's tensors for TinyGpt2 in HF's layout (Conv1D weights [in, out], the vocabulary unpadded), each
// element 1000 * (tensor index) + element index, all small integers (exact in bf16 too when below 256: see Bf16).
std::vector<NamedTensor> HfGpt2() {
  const int64_t c = 2;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"transformer.wte.weight", {5, c}},
                                                                      {"transformer.wpe.weight", {4, c}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    for (auto s : std::vector<std::pair<std::string, std::vector<int64_t>>>{{"ln_1.weight", {c}},
                                                                            {"ln_1.bias", {c}},
                                                                            {"attn.c_attn.weight", {c, 3 * c}},
                                                                            {"attn.c_attn.bias", {3 * c}},
                                                                            {"attn.c_proj.weight", {c, c}},
                                                                            {"attn.c_proj.bias", {c}},
                                                                            {"ln_2.weight", {c}},
                                                                            {"ln_2.bias", {c}},
                                                                            {"mlp.c_fc.weight", {c, 4 * c}},
                                                                            {"mlp.c_fc.bias", {4 * c}},
                                                                            {"mlp.c_proj.weight", {4 * c, c}},
                                                                            {"mlp.c_proj.bias", {c}}}) {
      shapes.push_back({p + s.first, s.second});
    }
  }
  shapes.push_back({"transformer.ln_f.weight", {c}});
  shapes.push_back({"transformer.ln_f.bias", {c}});
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

// DIR/config.json and DIR/model.safetensors.
std::string WriteHfDir(const std::string& dir, const nlohmann::json& config, const std::vector<NamedTensor>& tensors) {
  std::string cmd = "mkdir -p " + dir;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  WriteFile(dir + "/config.json", config.dump(2));
  const Status st = WriteSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  EXPECT_TRUE(st.ok()) << st.ToString();
  return dir;
}

const NamedTensor& Named(const std::vector<NamedTensor>& ts, const std::string& name) {
  for (const NamedTensor& t : ts) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  static const NamedTensor kNone;
  return kNone;
}

Status Import(const proto::Config& cfg, const std::string& dir, std::vector<NamedTensor>* out) {
  return ImportHuggingFace(cfg, dir, out);
}

// The checks of the GPT-2 import against HfGpt2's values.
void ExpectGpt2Params(const std::vector<NamedTensor>& p, const std::vector<NamedTensor>& hf) {
  ASSERT_EQ(p.size(), hf.size());
  EXPECT_EQ(p[0].name, "wte.weight");  // the plan's order
  // wte: padded to 8 rows; rows 5..7 zero.
  const NamedTensor& wte = Named(p, "wte.weight");
  ASSERT_EQ(wte.shape, (std::vector<int64_t>{8, 2}));
  std::vector<float> want = hf[0].data;
  want.resize(16, 0.0f);
  EXPECT_EQ(wte.data, want);
  EXPECT_EQ(Named(p, "wpe.weight").data, hf[1].data);
  // c_attn of layer 1: HF Conv1D [2, 6] -> dtrain [6, 2], (r, c) = HF (c, r).
  const NamedTensor& qkv = Named(p, "h.1.attn.c_attn.weight");
  const NamedTensor& hqkv = Named(hf, "transformer.h.1.attn.c_attn.weight");
  ASSERT_EQ(qkv.shape, (std::vector<int64_t>{6, 2}));
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 2; ++c) EXPECT_EQ(qkv.data[r * 2 + c], hqkv.data[c * 6 + r]) << r << "," << c;
  }
  // mlp.c_proj: HF [8, 2] -> dtrain [2, 8].
  const NamedTensor& proj = Named(p, "h.0.mlp.c_proj.weight");
  ASSERT_EQ(proj.shape, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(proj.data[1 * 8 + 3], Named(hf, "transformer.h.0.mlp.c_proj.weight").data[3 * 2 + 1]);
  EXPECT_EQ(Named(p, "h.0.mlp.c_fc.bias").data, Named(hf, "transformer.h.0.mlp.c_fc.bias").data);
  EXPECT_EQ(Named(p, "ln_f.bias").data, hf.back().data);
}

TEST(HfImport, Gpt2ImportsIntoDtrainsParameters) {
  TempDir tmp;
  const std::vector<NamedTensor> hf = HfGpt2();
  std::vector<NamedTensor> files = hf;
  // What older transformers versions saved beside the weights: mask buffers, and the tied head.
  files.push_back({"transformer.h.0.attn.bias", {1, 1, 4, 4}, std::vector<float>(16, 1.0f)});
  files.push_back({"transformer.h.1.attn.masked_bias", {}, {-1e4f}});
  files.push_back({"lm_head.weight", {5, 2}, hf[0].data});
  const std::string dir = WriteHfDir(tmp.path() + "/hf", Gpt2ConfigJson(), files);
  std::vector<NamedTensor> p;
  const Status st = Import(TinyGpt2(), dir, &p);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectGpt2Params(p, hf);
  // Layer 1's c_attn.weight is tensor 16: dtrain's (5, 1) is HF's (1, 5), element 1 * 6 + 5.
  EXPECT_EQ(Named(p, "h.1.attn.c_attn.weight").data[5 * 2 + 1], 1000 * 16 + 1 * 6 + 5);

  // The hub's gpt2 file names its tensors without "transformer." (a base-model checkpoint): the same import.
  std::vector<NamedTensor> bare = hf;
  for (NamedTensor& t : bare) t.name = t.name.substr(std::strlen("transformer."));
  const std::string bare_dir = WriteHfDir(tmp.path() + "/bare", Gpt2ConfigJson(), bare);
  std::vector<NamedTensor> q;
  ASSERT_TRUE(Import(TinyGpt2(), bare_dir, &q).ok());
  ExpectGpt2Params(q, hf);

  // hf:DIR and a plain directory with config.json name an HF source; a file does not.
  std::string d;
  EXPECT_TRUE(HfInitDir("hf:" + dir, &d));
  EXPECT_EQ(d, dir);
  d.clear();
  EXPECT_TRUE(HfInitDir(dir, &d));
  EXPECT_EQ(d, dir);
  EXPECT_FALSE(HfInitDir(dir + "/model.safetensors", &d));
  EXPECT_FALSE(HfInitDir(tmp.path(), &d));  // a directory without config.json
}

// model.safetensors.index.json's weight_map names the shard of every tensor.
TEST(HfImport, ShardedCheckpointsReadThroughTheIndex) {
  TempDir tmp;
  const std::vector<NamedTensor> hf = HfGpt2();
  const std::string dir = tmp.path() + "/hf";
  WriteHfDir(dir, Gpt2ConfigJson(), {});
  std::remove((dir + "/model.safetensors").c_str());
  const std::vector<NamedTensor> a(hf.begin(), hf.begin() + 10), b(hf.begin() + 10, hf.end());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", a).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors", b).ok());
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const NamedTensor& t : a) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const NamedTensor& t : b) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  WriteFile(dir + "/model.safetensors.index.json", index.dump());
  std::vector<NamedTensor> p;
  const Status st = Import(TinyGpt2(), dir, &p);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectGpt2Params(p, hf);

  // An index that names a tensor in the wrong shard, or a shard outside DIR, is refused by name.
  nlohmann::json wrong = index;
  wrong["weight_map"][hf[0].name] = "model-00002-of-00002.safetensors";
  WriteFile(dir + "/model.safetensors.index.json", wrong.dump());
  Status bad = Import(TinyGpt2(), dir, &p);
  EXPECT_EQ(bad.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("model-00001-of-00002.safetensors: tensor 'transformer.wte.weight' is mapped to "
                               "model-00002-of-00002.safetensors by " +
                               dir + "/model.safetensors.index.json"),
            std::string::npos)
      << bad.message();
  nlohmann::json escape = index;
  escape["weight_map"][hf[0].name] = "../../etc/passwd";
  WriteFile(dir + "/model.safetensors.index.json", escape.dump());
  bad = Import(TinyGpt2(), dir, &p);
  EXPECT_EQ(bad.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("weight_map names '../../etc/passwd' for tensor 'transformer.wte.weight', which is "
                               "no file name in " +
                               dir),
            std::string::npos)
      << bad.message();
}

// A safetensors file of BF16 tensors (values must be exact in bf16), as published Llama weights are.
void WriteBf16(const std::string& path, const std::vector<NamedTensor>& tensors) {
  nlohmann::ordered_json header;
  std::string data;
  for (const NamedTensor& t : tensors) {
    const size_t begin = data.size();
    for (float f : t.data) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      ASSERT_EQ(bits & 0xffffu, 0u) << f << " is not a bf16 value";
      data += static_cast<char>((bits >> 16) & 0xff);
      data += static_cast<char>(bits >> 24);
    }
    header[t.name] = {{"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(h.size()) >> (8 * i));
  WriteFile(path, out + h + data);
}

TEST(HfImport, Bf16WeightsWidenExactly) {
  TempDir tmp;
  std::vector<NamedTensor> hf = HfGpt2();
  for (size_t i = 0; i < hf.size(); ++i) {
    for (size_t k = 0; k < hf[i].data.size(); ++k) hf[i].data[k] = static_cast<float>((7 * i + k) % 200) - 100.5f;
  }
  const std::string dir = WriteHfDir(tmp.path() + "/hf", Gpt2ConfigJson(), {});
  WriteBf16(dir + "/model.safetensors", hf);
  std::vector<NamedTensor> p;
  const Status st = Import(TinyGpt2(), dir, &p);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectGpt2Params(p, hf);
}

// One clear error for each mistake, naming the file and the tensor or key.
TEST(HfImport, EachMistakeIsOneClearError) {
  TempDir tmp;
  const std::vector<NamedTensor> hf = HfGpt2();
  const auto expect_error = [&](const std::string& what, const nlohmann::json& config,
                                const std::vector<NamedTensor>& tensors, Status::Code code, const std::string& says) {
    const std::string dir = WriteHfDir(tmp.path() + "/" + what, config, tensors);
    std::vector<NamedTensor> p;
    const Status st = Import(TinyGpt2(), dir, &p);
    EXPECT_EQ(st.code(), code) << what << ": " << st.ToString();
    EXPECT_NE(st.message().find(says), std::string::npos) << what << ": " << st.message();
    EXPECT_NE(st.message().find(dir), std::string::npos) << what << ": " << st.message();
  };
  const std::string weights = "/model.safetensors: ";

  std::vector<NamedTensor> missing(hf.begin(), hf.end() - 1);
  expect_error("missing", Gpt2ConfigJson(), missing, Status::Code::kInvalidArgument,
               weights + "no tensor 'transformer.ln_f.bias' (model.kind gpt2 takes 28 tensors");

  std::vector<NamedTensor> unflipped = hf;  // c_attn left in Linear's [out, in]
  unflipped[4].shape = {6, 2};
  expect_error("shape", Gpt2ConfigJson(), unflipped, Status::Code::kInvalidArgument,
               weights +
                   "tensor 'transformer.h.0.attn.c_attn.weight' has shape [6, 2], but model.kind gpt2 with "
                   "this config takes [2, 6] (dtrain's 'h.0.attn.c_attn.weight' [6, 2])");

  std::vector<NamedTensor> extra = hf;
  extra.push_back({"transformer.h.0.attn.lora_A", {2}, {1, 2}});
  extra.push_back({"transformer.h.1.attn.lora_A", {2}, {1, 2}});
  expect_error("extra", Gpt2ConfigJson(), extra, Status::Code::kInvalidArgument,
               weights +
                   "tensor 'transformer.h.0.attn.lora_A' is not part of model.kind gpt2's HF layout (2 such "
                   "tensors in all)");

  std::vector<NamedTensor> untied = hf;
  untied.push_back({"lm_head.weight", {5, 2}, std::vector<float>(10, 0.5f)});
  expect_error("untied", Gpt2ConfigJson(), untied, Status::Code::kInvalidArgument,
               weights +
                   "tensor 'lm_head.weight' differs from every tensor of the model, but the model ties its head "
                   "to the embedding (tie_word_embeddings)");

  nlohmann::json wide = Gpt2ConfigJson();
  wide["n_embd"] = 768;
  expect_error("config", wide, hf, Status::Code::kInvalidArgument,
               "/config.json: n_embd is 768, but the run's model has 2 (set model.gpt2.n_embd: 768)");
  // n_inner written out as 4 n_embd, or null (transformers' default, as the hub's gpt2 has it): the same model.
  for (const nlohmann::json& inner : {nlohmann::json(8), nlohmann::json(nullptr)}) {
    nlohmann::json with_inner = Gpt2ConfigJson();
    with_inner["n_inner"] = inner;
    std::vector<NamedTensor> got;
    const Status st = Import(TinyGpt2(), WriteHfDir(tmp.path() + "/inner" + inner.dump(), with_inner, hf), &got);
    EXPECT_TRUE(st.ok()) << inner.dump() << ": " << st.ToString();
  }
  nlohmann::json narrow = Gpt2ConfigJson();
  narrow["n_inner"] = 6;
  expect_error("inner", narrow, hf, Status::Code::kInvalidArgument,
               "/config.json: n_inner is 6, but the run's model has 8");
  nlohmann::json tanh_alias = Gpt2ConfigJson();  // the same function under transformers' other name: accepted
  tanh_alias["activation_function"] = "gelu_pytorch_tanh";
  std::vector<NamedTensor> p;
  ASSERT_TRUE(Import(TinyGpt2(), WriteHfDir(tmp.path() + "/alias", tanh_alias, hf), &p).ok());
  nlohmann::json relu = Gpt2ConfigJson();
  relu["activation_function"] = "relu";
  expect_error("activation", relu, hf, Status::Code::kInvalidArgument,
               "/config.json: activation_function is \"relu\", but the run's model has \"gelu_new\" (set the "
               "model.kind gpt2 config key that gives it)");
  nlohmann::json scaled = Gpt2ConfigJson();
  scaled["scale_attn_by_inverse_layer_idx"] = true;
  expect_error("scaled", scaled, hf, Status::Code::kInvalidArgument,
               "/config.json: scale_attn_by_inverse_layer_idx is true, but the run's model has none (model.kind gpt2 "
               "does not do this)");
}

// Sizes and offsets in the files are hostile until checked: errors, never a crash.
TEST(HfImport, HostileFilesAreErrorsNamingTheFile) {
  TempDir tmp;
  const std::string dir = WriteHfDir(tmp.path() + "/hf", Gpt2ConfigJson(), HfGpt2());
  std::string bytes = ReadFile(dir + "/model.safetensors");
  std::vector<NamedTensor> p;
  // A header length past the end of the file.
  WriteFile(dir + "/model.safetensors", std::string("\xf0\xff\xff\xff\xff\xff\xff\x00", 8) + bytes.substr(8));
  Status st = Import(TinyGpt2(), dir, &p);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find(dir + "/model.safetensors: header length"), std::string::npos) << st.message();
  // An offset past the data.
  const size_t at = bytes.find("[0,40]");  // transformer.wte.weight: 10 floats
  ASSERT_NE(at, std::string::npos) << bytes.substr(8, 200);
  std::string far = bytes;
  far.replace(at, 6, "[0,4e9");
  far[at + 6] = ']';
  WriteFile(dir + "/model.safetensors", far);
  st = Import(TinyGpt2(), dir, &p);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
  // config.json that is not JSON; no config.json; no weights.
  WriteFile(dir + "/model.safetensors", bytes);
  WriteFile(dir + "/config.json", "{\"n_embd\": 2,");
  st = Import(TinyGpt2(), dir, &p);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.message(), dir + "/config.json: not a JSON object");
  // A value nested a million deep (printing it in the error used to recurse once per level: a stack overflow).
  WriteFile(dir + "/config.json", "{\"model_type\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}");
  st = Import(TinyGpt2(), dir, &p);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.message(), dir + "/config.json: JSON nested deeper than 64 levels");
  std::remove((dir + "/config.json").c_str());
  st = Import(TinyGpt2(), dir, &p);
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find(dir + "/config.json"), std::string::npos) << st.message();
  WriteFile(dir + "/config.json", Gpt2ConfigJson().dump());
  std::remove((dir + "/model.safetensors").c_str());
  st = Import(TinyGpt2(), dir, &p);
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find(dir + " holds neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos)
      << st.message();
  st = Import(TinyGpt2(), tmp.path() + "/nowhere", &p);
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();
  st = Import(TinyGpt2(), dir + "/config.json", &p);  // hf: naming a file
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(dir + "/config.json: not a directory"), std::string::npos) << st.message();
  // A model kind without an HF layout.
  proto::Config mlp;
  mlp.mutable_model()->set_kind("mlp");
  st = Import(mlp, tmp.path(), &p);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("model.kind mlp has no Hugging Face layout (these do: gpt2"), std::string::npos)
      << st.message();
}

// Compares an export with the HF tensors it came from: same names, shapes and bytes.
void ExpectSameFile(const std::vector<NamedTensor>& want, const std::string& path) {
  std::vector<NamedTensor> got;
  const Status st = ReadSafetensors(path, &got);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(got.size(), want.size());
  for (const NamedTensor& w : want) {
    const NamedTensor& g = Named(got, w.name);
    EXPECT_EQ(g.shape, w.shape) << w.name;
    ASSERT_EQ(g.data.size(), w.data.size()) << w.name;
    EXPECT_EQ(std::memcmp(g.data.data(), w.data.data(), w.data.size() * sizeof(float)), 0) << w.name;
  }
}

TEST(HfImport, Gpt2ImportThenExportIsByteIdentical) {
  TempDir tmp;
  std::vector<NamedTensor> hf = HfGpt2();
  hf[3].data[0] = -0.0f;   // bytes, not values: -0 must stay -0
  hf[5].data[1] = 1e-40f;  // a subnormal
  const std::string dir = WriteHfDir(tmp.path() + "/hf", Gpt2ConfigJson(), hf);
  std::vector<NamedTensor> p;
  ASSERT_TRUE(Import(TinyGpt2(), dir, &p).ok());
  ASSERT_TRUE(ExportHuggingFace(TinyGpt2(), p, {}, tmp.path() + "/out").ok());
  ExpectSameFile(hf, tmp.path() + "/out/model.safetensors");
}

// The export copies the tokenizer files of the run's hf: source; a source that is gone is a warning.
TEST(HfImport, ExportCopiesTheTokenizerFilesOfTheHfSource) {
  TempDir tmp;
  const std::vector<NamedTensor> hf = HfGpt2();
  const std::string dir = WriteHfDir(tmp.path() + "/hf", Gpt2ConfigJson(), hf);
  WriteFile(dir + "/tokenizer.json", "{\"model\": {}}");
  WriteFile(dir + "/merges.txt", "#version: 0.2\n");
  WriteFile(dir + "/README.md", "not a tokenizer file");
  proto::Config cfg = TinyGpt2();
  cfg.mutable_model()->set_init_from("hf:" + dir);
  std::vector<NamedTensor> p;
  ASSERT_TRUE(Import(cfg, dir, &p).ok());
  HfExportReport report;
  ASSERT_TRUE(ExportHuggingFace(cfg, p, {}, tmp.path() + "/out", &report).ok());
  EXPECT_EQ(report.tokenizer_files, (std::vector<std::string>{"tokenizer.json", "merges.txt"}));
  EXPECT_TRUE(report.warning.empty());
  EXPECT_EQ(ReadFile(tmp.path() + "/out/tokenizer.json"), "{\"model\": {}}");
  EXPECT_EQ(ReadFile(tmp.path() + "/out/merges.txt"), "#version: 0.2\n");
  EXPECT_FALSE(std::ifstream(tmp.path() + "/out/README.md").good());
  // config.json stays the plan's (dtrain's statement of what it computes), not the source's.
  EXPECT_NE(ReadFile(tmp.path() + "/out/config.json").find("\"n_inner\": 8"), std::string::npos);

  cfg.mutable_model()->set_init_from("hf:" + tmp.path() + "/gone");
  HfExportReport gone;
  ASSERT_TRUE(ExportHuggingFace(cfg, p, {}, tmp.path() + "/out2", &gone).ok());
  EXPECT_TRUE(gone.tokenizer_files.empty());
  EXPECT_EQ(gone.warning, "the run started from model.init_from hf:" + tmp.path() +
                              "/gone, which is gone: no tokenizer files copied");
}

// --- a spec with row slices (Llama-style fused weights) -------------------------------------------------------

// kind "hf_fused_test": an embedding of 5 rows padded to 8, tied; q/k/v rows of one fused [4, 2] weight (2 query
// heads, 1 kv head of size 1); gate/up rows of one [6, 2] weight; a down projection; a norm. No transposes.
Status FusedPlan(const proto::Config&, models::HfExportPlan* plan) {
  models::HfTensor emb{"model.embed_tokens.weight", "emb.weight", {8, 2}};
  emb.keep_rows = 5;
  plan->tensors = {emb};
  const auto slice = [&](const std::string& name, const std::string& param, std::vector<int64_t> shape, int64_t begin,
                         int64_t rows) {
    models::HfTensor t{name, param, std::move(shape)};
    t.row_begin = begin;
    t.keep_rows = rows;
    plan->tensors.push_back(t);
  };
  slice("model.layers.0.self_attn.q_proj.weight", "l0.qkv.weight", {4, 2}, 0, 2);
  slice("model.layers.0.self_attn.k_proj.weight", "l0.qkv.weight", {4, 2}, 2, 1);
  slice("model.layers.0.self_attn.v_proj.weight", "l0.qkv.weight", {4, 2}, 3, 1);
  slice("model.layers.0.mlp.gate_proj.weight", "l0.gate_up.weight", {6, 2}, 0, 3);
  slice("model.layers.0.mlp.up_proj.weight", "l0.gate_up.weight", {6, 2}, 3, 3);
  plan->tensors.push_back({"model.layers.0.mlp.down_proj.weight", "l0.down.weight", {2, 3}});
  plan->tensors.push_back({"model.norm.weight", "norm.weight", {2}});
  plan->config_json = nlohmann::json{{"model_type", "llama"},    {"hidden_size", 2},     {"num_attention_heads", 2},
                                     {"num_key_value_heads", 1}, {"vocab_size", 5},      {"rope_theta", 10000.0},
                                     {"rms_norm_eps", 1e-5},     {"hidden_act", "silu"}, {"tie_word_embeddings", true},
                                     {"intermediate_size", 3}}
                          .dump();
  plan->config_keys = {{"num_key_value_heads", "model.fused.n_kv_head"}, {"rope_theta", "model.fused.rope_theta"}};
  return Status::OK();
}

proto::Config FusedConfig() {
  static const bool registered = [] {
    models::ModelSpec spec;
    spec.kind = "hf_fused_test";
    spec.build = [](const proto::Config&, DeviceContext&, std::unique_ptr<models::Model>*) {
      return Status::Unimplemented("test spec");
    };
    spec.hf_export = &FusedPlan;
    return models::RegisterModel(std::move(spec)).ok();
  }();
  EXPECT_TRUE(registered);
  proto::Config cfg;
  cfg.mutable_model()->set_kind("hf_fused_test");
  return cfg;
}

std::vector<NamedTensor> HfFused() {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.embed_tokens.weight", {5, 2}},
      {"model.layers.0.self_attn.q_proj.weight", {2, 2}},
      {"model.layers.0.self_attn.k_proj.weight", {1, 2}},
      {"model.layers.0.self_attn.v_proj.weight", {1, 2}},
      {"model.layers.0.mlp.gate_proj.weight", {3, 2}},
      {"model.layers.0.mlp.up_proj.weight", {3, 2}},
      {"model.layers.0.mlp.down_proj.weight", {2, 3}},
      {"model.norm.weight", {2}}};
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i].second) n *= d;
    std::vector<float> v(n);
    for (int64_t k = 0; k < n; ++k) v[k] = static_cast<float>(100 * (i + 1) + k);
    out.push_back({shapes[i].first, shapes[i].second, v});
  }
  return out;
}

nlohmann::json FusedConfigJson() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 2},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"intermediate_size", 3},
          {"vocab_size", 5},
          {"rope_theta", 10000},
          {"rope_scaling", nullptr},
          {"rms_norm_eps", 1e-05},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"max_position_embeddings", 8192},
          {"tie_word_embeddings", true}};
}

TEST(HfImport, RowSlicesFillFusedParametersAndRoundTrip) {
  TempDir tmp;
  const proto::Config cfg = FusedConfig();
  const std::vector<NamedTensor> hf = HfFused();
  std::vector<NamedTensor> files = hf;
  files.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {1}, {1.0f}});
  const std::string dir = WriteHfDir(tmp.path() + "/hf", FusedConfigJson(), files);
  std::vector<NamedTensor> p;
  const Status st = Import(cfg, dir, &p);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(Named(p, "emb.weight").data,
            (std::vector<float>{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Named(p, "l0.qkv.weight").data, (std::vector<float>{200, 201, 202, 203, 300, 301, 400, 401}));
  EXPECT_EQ(Named(p, "l0.gate_up.weight").data,
            (std::vector<float>{500, 501, 502, 503, 504, 505, 600, 601, 602, 603, 604, 605}));
  EXPECT_EQ(Named(p, "l0.down.weight").data, hf[6].data);

  // Export writes back the same tensors, byte for byte (the inverted plan, then the plan).
  ASSERT_TRUE(ExportHuggingFace(cfg, p, {}, tmp.path() + "/out").ok());
  ExpectSameFile(hf, tmp.path() + "/out/model.safetensors");

  // k_proj of another kv-head count: the config names the dtrain key; the tensor shape names the slice.
  nlohmann::json kv = FusedConfigJson();
  kv["num_key_value_heads"] = 2;
  Status bad = Import(cfg, WriteHfDir(tmp.path() + "/kv", kv, hf), &p);
  EXPECT_NE(bad.message().find("config.json: num_key_value_heads is 2, but the run's model has 1 (set "
                               "model.fused.n_kv_head: 2)"),
            std::string::npos)
      << bad.message();
  std::vector<NamedTensor> wide_k = hf;
  wide_k[2] = {wide_k[2].name, {2, 2}, {1, 2, 3, 4}};
  bad = Import(cfg, WriteHfDir(tmp.path() + "/k", FusedConfigJson(), wide_k), &p);
  EXPECT_NE(bad.message().find("tensor 'model.layers.0.self_attn.k_proj.weight' has shape [2, 2], but model.kind "
                               "hf_fused_test with this config takes [1, 2] (dtrain's 'l0.qkv.weight' [4, 2])"),
            std::string::npos)
      << bad.message();
  // Llama 3's rope scaling (not done by the model), in transformers 4's and 5's spelling.
  nlohmann::json scaling = FusedConfigJson();
  scaling["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}};
  bad = Import(cfg, WriteHfDir(tmp.path() + "/scaling", scaling, hf), &p);
  EXPECT_NE(bad.message().find("config.json: rope_scaling is {\"factor\":32.0,\"rope_type\":\"llama3\"}, but the "
                               "run's model has none (model.kind hf_fused_test does not do this)"),
            std::string::npos)
      << bad.message();
  nlohmann::json v5 = FusedConfigJson();
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
  bad = Import(cfg, WriteHfDir(tmp.path() + "/v5", v5, hf), &p);
  EXPECT_NE(bad.message().find("config.json: rope_theta is 500000.0, but the run's model has 10000.0 (set "
                               "model.fused.rope_theta: 500000.0)"),
            std::string::npos)
      << bad.message();
}

// --- Llama (models/llama_spec.cc) -----------------------------------------------------------------------------

proto::Config TinyLlama(bool tied) {
  proto::Config cfg;
  cfg.mutable_model()->set_kind("llama");
  auto* g = cfg.mutable_model()->mutable_llama();
  g->set_vocab_size(200);  // padded to 256 inside dtrain
  g->set_max_seq_len(16);
  g->set_n_layer(2);
  g->set_n_head(4);
  g->set_n_kv_head(2);
  g->set_hidden(8);  // head size 2
  g->set_ffn_hidden(6);
  g->set_rope_theta(10000);
  g->set_rms_norm_eps(1e-5);
  g->set_tie_embeddings(tied);
  return cfg;
}

// LlamaForCausalLM's tensors for TinyLlama (PyTorch Linear [out, in], no transposes), distinct values.
std::vector<NamedTensor> HfLlama(bool tied) {
  const int64_t c = 8, f = 6, v = 200, q = 4 * 2, kv = 2 * 2;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"model.embed_tokens.weight", {v, c}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (auto s : std::vector<std::pair<std::string, std::vector<int64_t>>>{{"input_layernorm.weight", {c}},
                                                                            {"self_attn.q_proj.weight", {q, c}},
                                                                            {"self_attn.k_proj.weight", {kv, c}},
                                                                            {"self_attn.v_proj.weight", {kv, c}},
                                                                            {"self_attn.o_proj.weight", {c, q}},
                                                                            {"post_attention_layernorm.weight", {c}},
                                                                            {"mlp.gate_proj.weight", {f, c}},
                                                                            {"mlp.up_proj.weight", {f, c}},
                                                                            {"mlp.down_proj.weight", {c, f}}}) {
      shapes.push_back({p + s.first, s.second});
    }
  }
  shapes.push_back({"model.norm.weight", {c}});
  if (!tied) shapes.push_back({"lm_head.weight", {v, c}});
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i].second) n *= d;
    std::vector<float> vals(n);
    for (int64_t k = 0; k < n; ++k) vals[k] = static_cast<float>(10000 * i + k) / 64.0f;
    out.push_back({shapes[i].first, shapes[i].second, vals});
  }
  return out;
}

nlohmann::json LlamaConfigJson(bool tied) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 200},
          {"hidden_size", 8},
          {"intermediate_size", 6},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 2},
          {"max_position_embeddings", 2048},
          {"hidden_act", "silu"},
          {"rms_norm_eps", 1e-05},
          {"rope_theta", 10000.0},
          {"rope_scaling", nullptr},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"pretraining_tp", 1},
          {"tie_word_embeddings", tied},
          {"torch_dtype", "bfloat16"}};
}

TEST(HfImport, LlamaFusesQkvAndGateUpAndRoundTrips) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TempDir tmp;
    const proto::Config cfg = TinyLlama(tied);
    const std::vector<NamedTensor> hf = HfLlama(tied);
    const std::string dir = WriteHfDir(tmp.path() + "/hf", LlamaConfigJson(tied), hf);
    std::vector<NamedTensor> p;
    const Status st = Import(cfg, dir, &p);
    ASSERT_TRUE(st.ok()) << st.ToString();
    // qkv_proj = q rows, then k, then v; gate_up_proj = gate rows, then up.
    const NamedTensor& qkv = Named(p, "model.layers.1.self_attn.qkv_proj.weight");
    ASSERT_EQ(qkv.shape, (std::vector<int64_t>{16, 8}));
    std::vector<float> want;
    for (const char* n : {"q_proj", "k_proj", "v_proj"}) {
      const std::vector<float>& d = Named(hf, std::string("model.layers.1.self_attn.") + n + ".weight").data;
      want.insert(want.end(), d.begin(), d.end());
    }
    EXPECT_EQ(qkv.data, want);
    const NamedTensor& gate_up = Named(p, "model.layers.0.mlp.gate_up_proj.weight");
    ASSERT_EQ(gate_up.shape, (std::vector<int64_t>{12, 8}));
    EXPECT_EQ(std::vector<float>(gate_up.data.begin() + 48, gate_up.data.end()),
              Named(hf, "model.layers.0.mlp.up_proj.weight").data);
    // The embedding is padded to 256 rows with zeros.
    const NamedTensor& emb = Named(p, "model.embed_tokens.weight");
    ASSERT_EQ(emb.shape, (std::vector<int64_t>{256, 8}));
    EXPECT_EQ(std::vector<float>(emb.data.begin(), emb.data.begin() + 1600), hf[0].data);
    EXPECT_EQ(std::vector<float>(emb.data.begin() + 1600, emb.data.end()), std::vector<float>(56 * 8, 0.0f));

    ASSERT_TRUE(ExportHuggingFace(cfg, p, {}, tmp.path() + "/out").ok());
    ExpectSameFile(hf, tmp.path() + "/out/model.safetensors");
  }
  // A file of another shape names the dtrain key to set.
  TempDir tmp;
  nlohmann::json kv = LlamaConfigJson(true);
  kv["num_key_value_heads"] = 4;
  std::vector<NamedTensor> p;
  const Status bad = Import(TinyLlama(true), WriteHfDir(tmp.path() + "/kv", kv, HfLlama(true)), &p);
  EXPECT_EQ(bad.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("config.json: num_key_value_heads is 4, but the run's model has 2 (set "
                               "model.llama.n_kv_head: 4)"),
            std::string::npos)
      << bad.message();
  // An untied checkpoint into a tied model: its head is no copy of the embedding.
  const Status untied =
      Import(TinyLlama(true), WriteHfDir(tmp.path() + "/untied", LlamaConfigJson(true), HfLlama(false)), &p);
  EXPECT_NE(untied.message().find("tensor 'lm_head.weight' differs from every tensor of the model, but the model "
                                  "ties its head"),
            std::string::npos)
      << untied.message();
}

// --- Llama 3.1/3.2: RoPE frequency scaling ("rope_type": "llama3") ---------------------------------------------

proto::Config Llama3(bool tied) {
  proto::Config cfg = TinyLlama(tied);
  auto* g = cfg.mutable_model()->mutable_llama();
  g->set_rope_theta(500000);
  auto* rs = g->mutable_rope_scaling();
  rs->set_rope_type("llama3");
  rs->set_factor(32);
  rs->set_low_freq_factor(1);
  rs->set_high_freq_factor(4);
  rs->set_original_max_position_embeddings(8192);
  return cfg;
}

// Llama-3.2-1B's rope_scaling as transformers 4.4x's save_pretrained writes it.
nlohmann::json Llama3ConfigJson(bool tied) {
  nlohmann::json j = LlamaConfigJson(tied);
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"factor", 32.0},
                       {"high_freq_factor", 4.0},
                       {"low_freq_factor", 1.0},
                       {"original_max_position_embeddings", 8192},
                       {"rope_type", "llama3"}};
  return j;
}

// The text of the "rope_scaling" entry of a config.json, from its key to its closing brace or null.
std::string RopeScalingText(const std::string& json) {
  const size_t at = json.find("\"rope_scaling\"");
  if (at == std::string::npos) return "";
  const size_t value = at + std::strlen("\"rope_scaling\": ");
  const size_t end = json.find(json.compare(value, 1, "{") == 0 ? '}' : ',', value);
  return json.substr(at, end == std::string::npos ? std::string::npos : end + 1 - at);
}

TEST(HfImport, Llama3RopeScalingImportsAndRoundTrips) {
  TempDir tmp;
  const std::vector<NamedTensor> hf = HfLlama(true);
  const std::string dir = WriteHfDir(tmp.path() + "/hf", Llama3ConfigJson(true), hf);
  std::vector<NamedTensor> p;
  Status st = Import(Llama3(true), dir, &p);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(ExportHuggingFace(Llama3(true), p, {}, tmp.path() + "/out").ok());
  ExpectSameFile(hf, tmp.path() + "/out/model.safetensors");
  // The exported rope_scaling is the file's, byte for byte, and the export imports again.
  const std::string exported = ReadFile(tmp.path() + "/out/config.json");
  EXPECT_EQ(RopeScalingText(exported), RopeScalingText(ReadFile(dir + "/config.json")));
  EXPECT_NE(RopeScalingText(exported).find("\"rope_type\": \"llama3\""), std::string::npos) << exported;
  std::vector<NamedTensor> again;
  st = Import(Llama3(true), tmp.path() + "/out", &again);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(again.size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(again[i].data, p[i].data) << p[i].name;

  // Older files name the kind "type"; transformers 5 writes rope_parameters (rope_theta inside).
  nlohmann::json old = Llama3ConfigJson(true);
  old["rope_scaling"].erase("rope_type");
  old["rope_scaling"]["type"] = "llama3";
  st = Import(Llama3(true), WriteHfDir(tmp.path() + "/old", old, hf), &p);
  EXPECT_TRUE(st.ok()) << st.ToString();
  nlohmann::json v5 = Llama3ConfigJson(true);
  v5["rope_parameters"] = v5["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  st = Import(Llama3(true), WriteHfDir(tmp.path() + "/v5", v5, hf), &p);
  EXPECT_TRUE(st.ok()) << st.ToString();
  v5["rope_parameters"]["low_freq_factor"] = 2.0;
  st = Import(Llama3(true), WriteHfDir(tmp.path() + "/v5low", v5, hf), &p);
  EXPECT_NE(st.message().find("config.json: rope_parameters.low_freq_factor is 2.0, but the run's model has 1.0 "
                              "(set model.llama.rope_scaling.low_freq_factor: 2.0)"),
            std::string::npos)
      << st.ToString();
  // A transformers 5 file without scaling into the llama3 model: rope_type default is none.
  v5["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
  st = Import(Llama3(true), WriteHfDir(tmp.path() + "/v5plain", v5, hf), &p);
  EXPECT_NE(st.message().find("config.json: rope_parameters is {\"rope_theta\":500000.0,\"rope_type\":\"default\"}, "
                              "but the run's model has {\"factor\":32.0,"
                              "\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
                              "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"} (set "
                              "model.llama.rope_scaling.rope_type: none)"),
            std::string::npos)
      << st.ToString();
  nlohmann::json none = Llama3ConfigJson(true);
  none["rope_scaling"] = nullptr;
  st = Import(Llama3(true), WriteHfDir(tmp.path() + "/null", none, hf), &p);
  EXPECT_NE(st.message().find("config.json: rope_scaling is null, but the run's model has {"), std::string::npos)
      << st.ToString();
}

TEST(HfImport, Llama3RopeScalingDisagreementsNameTheKeyOrTheType) {
  TempDir tmp;
  const std::vector<NamedTensor> hf = HfLlama(true);
  std::vector<NamedTensor> p;
  // Llama 3.1's factor 8 into a model of factor 32.
  nlohmann::json j = Llama3ConfigJson(true);
  j["rope_scaling"]["factor"] = 8.0;
  Status st = Import(Llama3(true), WriteHfDir(tmp.path() + "/factor", j, hf), &p);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("config.json: rope_scaling.factor is 8.0, but the run's model has 32.0 (set "
                              "model.llama.rope_scaling.factor: 8.0)"),
            std::string::npos)
      << st.ToString();
  // Meta's file into a model without scaling: every key to set is named.
  proto::Config plain = Llama3(true);
  plain.mutable_model()->mutable_llama()->clear_rope_scaling();
  st = Import(plain, WriteHfDir(tmp.path() + "/plain", Llama3ConfigJson(true), hf), &p);
  EXPECT_NE(st.message().find("but the run's model has none (set model.llama.rope_scaling.rope_type: llama3, "
                              "model.llama.rope_scaling.factor: 32.0, model.llama.rope_scaling.high_freq_factor: 4.0, "
                              "model.llama.rope_scaling.low_freq_factor: 1.0, "
                              "model.llama.rope_scaling.original_max_position_embeddings: 8192)"),
            std::string::npos)
      << st.ToString();
  // Other kinds of scaling are refused naming the kind and what the key takes.
  j = LlamaConfigJson(true);
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  for (const proto::Config& cfg : {plain, Llama3(true)}) {
    st = Import(cfg, WriteHfDir(tmp.path() + "/yarn", j, hf), &p);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(st.message().find("config.json: rope_scaling is {\"factor\":4.0,"
                                "\"original_max_position_embeddings\":32768,\"rope_type\":\"yarn\"}, but the "
                                "run's model has "),
              std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("(model.kind llama does not do rope_type \"yarn\"; "
                                "model.llama.rope_scaling.rope_type is one of none|llama3)"),
              std::string::npos)
        << st.ToString();
  }
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  st = Import(plain, WriteHfDir(tmp.path() + "/linear", j, hf), &p);
  EXPECT_NE(st.message().find("does not do rope_type \"linear\""), std::string::npos) << st.ToString();
  // A key llama3 does not take, and one it needs.
  j = Llama3ConfigJson(true);
  j["rope_scaling"]["attention_factor"] = 2.0;
  st = Import(Llama3(true), WriteHfDir(tmp.path() + "/extra", j, hf), &p);
  EXPECT_NE(st.message().find("config.json: rope_scaling.attention_factor is 2.0, but the run's model has none"),
            std::string::npos)
      << st.ToString();
  j = Llama3ConfigJson(true);
  j["rope_scaling"].erase("original_max_position_embeddings");
  st = Import(Llama3(true), WriteHfDir(tmp.path() + "/missing", j, hf), &p);
  EXPECT_NE(st.message().find("config.json: rope_scaling.original_max_position_embeddings is missing, but the run's "
                              "model has 8192"),
            std::string::npos)
      << st.ToString();
}

}  // namespace
}  // namespace dtrain::runtime
