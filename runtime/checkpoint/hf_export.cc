#include "runtime/checkpoint/hf_export.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace dtrain::runtime {
namespace {

// The [rows, cols] matrix `t` as [cols, rows].
std::vector<float> Transposed(const NamedTensor& t) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> out(t.data.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = t.data[r * cols + c];
  }
  return out;
}

Status WriteText(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::IoError("cannot create '" + tmp + "': " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError("writing '" + path + "': " + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace

Status ExportHuggingFaceGpt2(const proto::Config& cfg, const std::vector<NamedTensor>& params,
                             const std::map<std::string, std::string>& metadata, const std::string& dir) {
  if (cfg.model().kind() != "gpt2") {
    return Status::InvalidArgument("--format hf exports GPT-2 models; this checkpoint holds model.kind " +
                                   cfg.model().kind() + " (use --format safetensors)");
  }
  const auto& g = cfg.model().gpt2();
  const int64_t c = g.n_embd();
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : params) by_name[t.name] = &t;
  auto get = [&](const std::string& name, const std::vector<int64_t>& shape, const NamedTensor** out) -> Status {
    auto it = by_name.find(name);
    if (it == by_name.end()) return Status::InvalidArgument("GPT-2 parameter '" + name + "' is missing");
    if (it->second->shape != shape) return Status::InvalidArgument("GPT-2 parameter '" + name + "' has another shape");
    *out = it->second;
    return Status::OK();
  };

  std::vector<NamedTensor> hf;
  const NamedTensor* t = nullptr;
  DT_RETURN_IF_ERROR(get("wte.weight", {g.padded_vocab_size(), c}, &t));
  hf.push_back({"transformer.wte.weight",
                {g.vocab_size(), c},
                std::vector<float>(t->data.begin(), t->data.begin() + g.vocab_size() * c)});
  DT_RETURN_IF_ERROR(get("wpe.weight", {g.max_seq_len(), c}, &t));
  hf.push_back({"transformer.wpe.weight", t->shape, t->data});
  // (name, its dtrain shape; matrices are transposed for HF's Conv1D)
  const std::vector<std::pair<std::string, std::vector<int64_t>>> layer = {{"ln_1.weight", {c}},
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
                                                                           {"mlp.c_proj.bias", {c}}};
  for (int64_t l = 0; l < g.n_layer(); ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    for (const auto& [name, shape] : layer) {
      DT_RETURN_IF_ERROR(get(p + name, shape, &t));
      if (shape.size() == 2) {
        hf.push_back({"transformer." + p + name, {shape[1], shape[0]}, Transposed(*t)});
      } else {
        hf.push_back({"transformer." + p + name, shape, t->data});
      }
    }
  }
  for (const char* name : {"ln_f.weight", "ln_f.bias"}) {
    DT_RETURN_IF_ERROR(get(name, {c}, &t));
    hf.push_back({std::string("transformer.") + name, {c}, t->data});
  }

  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::IoError("cannot create '" + dir + "': " + std::strerror(errno));
  }
  DT_RETURN_IF_ERROR(WriteSafetensors(dir + "/model.safetensors", hf, metadata));
  const nlohmann::ordered_json config = {{"architectures", {"GPT2LMHeadModel"}},
                                         {"model_type", "gpt2"},
                                         {"vocab_size", g.vocab_size()},
                                         {"n_positions", g.max_seq_len()},
                                         {"n_ctx", g.max_seq_len()},
                                         {"n_embd", c},
                                         {"n_layer", g.n_layer()},
                                         {"n_head", g.n_head()},
                                         {"n_inner", nullptr},
                                         {"activation_function", "gelu_new"},
                                         {"layer_norm_epsilon", 1e-5},
                                         {"resid_pdrop", 0.0},
                                         {"embd_pdrop", 0.0},
                                         {"attn_pdrop", 0.0},
                                         {"initializer_range", 0.02},
                                         {"tie_word_embeddings", true},
                                         {"bos_token_id", g.vocab_size() - 1},
                                         {"eos_token_id", g.vocab_size() - 1},
                                         {"torch_dtype", "float32"}};
  return WriteText(dir + "/config.json", config.dump(2) + "\n");
}

}  // namespace dtrain::runtime
