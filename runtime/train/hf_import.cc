#include "runtime/train/hf_import.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/check.h"
#include "core/file_guard.h"
#include "models/model_registry.h"
#include "models/model_spec.h"
#include "runtime/train/model_factory.h"

namespace dtrain::runtime {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxJsonBytes = 64 << 20;  // config.json and the index are kilobytes; refuse what is not
constexpr int kMaxJsonDepth = 64;            // HF configs nest 3 deep

// Tensors an HF checkpoint may hold that are no weights of the model: (name suffix, why they are not imported).
// lm_head.weight is the one more case, handled by name below: skipped when the model ties its head and the file's
// copy equals the embedding.
const std::pair<const char*, const char*> kIgnoredHfBuffers[] = {
    {".attn.bias", "GPT-2's causal mask buffer (older transformers saved it)"},
    {".attn.masked_bias", "GPT-2's masked-score constant (older transformers saved it)"},
    {".rotary_emb.inv_freq", "RoPE's frequencies, recomputed from rope_theta"},
};
constexpr const char* kLmHead = "lm_head.weight";

// config.json keys that fix the weights' layout or what the model computes, beyond the plan's config_keys. A key
// the plan's config_json has must have the same value in the file (absent or null there: transformers' default,
// taken as the same); a key the plan does not have must be absent, null or false in the file (biases). RoPE scaling
// (rope_scaling, transformers 5's rope_parameters) is compared on its own, key by key (CheckRopeScaling).
const char* const kStructuralKeys[] = {
    "model_type",
    "vocab_size",
    "hidden_size",
    "n_embd",
    "intermediate_size",
    "n_inner",
    "num_hidden_layers",
    "n_layer",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "head_dim",
    "n_positions",
    "rope_theta",
    "rms_norm_eps",
    "layer_norm_epsilon",
    "tie_word_embeddings",
    "hidden_act",
    "activation_function",
    "attention_bias",
    "mlp_bias",
    "scale_attn_by_inverse_layer_idx",
};

// Names transformers gives one function: the tanh-approximated GELU, SiLU.
std::string CanonicalActivation(const std::string& a) {
  if (a == "gelu_pytorch_tanh" || a == "gelu_fast") return "gelu_new";
  if (a == "swish") return "silu";
  return a;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The deepest nesting of arrays and objects in JSON `text` (strings skipped). Serialising or comparing a value
// recurses once per level: a hostile file nested a million deep would overflow the stack.
int JsonDepth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// A JSON object from `path` (at most kMaxJsonBytes). NotFound when it does not exist.
Status ReadJsonObject(const std::string& path, Json* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > kMaxJsonBytes) {
    return Status::InvalidArgument(path + ": " + std::to_string(st.st_size) + " bytes, more than a config holds");
  }
  std::string text;
  DT_RETURN_IF_ERROR(ReadRegularFile(path, "Hugging Face file", &text));
  if (JsonDepth(text) > kMaxJsonDepth) {
    return Status::InvalidArgument(path + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  *out = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) return Status::InvalidArgument(path + ": not a JSON object");
  return Status::OK();
}

// --- config.json ---------------------------------------------------------------------------------------------

// The file's value of `key`; transformers 5 keeps rope_theta under rope_parameters.
const Json* FileValue(const Json& file, const std::string& key) {
  if (file.contains(key)) return &file[key];
  const auto rp = file.find("rope_parameters");
  if (key == "rope_theta" && rp != file.end() && rp->is_object() && rp->contains("rope_theta")) {
    return &(*rp)["rope_theta"];
  }
  return nullptr;
}

bool SameValue(const std::string& key, const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {  // 1e-05 and 1e-5, 10000 and 10000.0; a float32 eps written as a double
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::fabs(x - y) <= 1e-6 * std::max(std::fabs(x), std::fabs(y));
  }
  if (a.is_string() && b.is_string() && (key == "hidden_act" || key == "activation_function")) {
    return CanonicalActivation(a.get<std::string>()) == CanonicalActivation(b.get<std::string>());
  }
  return a == b;
}

bool Unset(const Json& v) { return v.is_null() || (v.is_boolean() && !v.get<bool>()); }

// The (choices) of the dtrain config key `dotted` ("model.llama.rope_scaling.rope_type"; proto/config.proto), ""
// when it has none or names no field.
std::string ConfigChoices(const std::string& dotted) {
  const google::protobuf::Descriptor* d = proto::Config::descriptor();
  for (size_t start = 0; d != nullptr;) {
    const size_t dot = dotted.find('.', start);
    const google::protobuf::FieldDescriptor* f =
        d->FindFieldByName(dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (f == nullptr) return "";
    if (dot == std::string::npos) return f->options().GetExtension(proto::choices);
    d = f->message_type();
    start = dot + 1;
  }
  return "";
}

bool IsChoice(const std::string& value, const std::string& choices) {
  for (size_t start = 0; start <= choices.size();) {
    const size_t bar = std::min(choices.find('|', start), choices.size());
    if (choices.compare(start, bar - start, value) == 0) return true;
    start = bar + 1;
  }
  return false;
}

// The file's RoPE scaling as one object {"rope_type": ..., its numbers}, or null for none: transformers 4's
// rope_scaling (older files name the kind "type", which LlamaConfig copies over "rope_type"), else transformers 5's
// rope_parameters less its rope_theta (transformers 5 reads rope_scaling first too). rope_type "default" is none.
// *key gets the file's key it came from.
Json FileRopeScaling(const Json& file, std::string* key) {
  Json s;
  const auto rs = file.find("rope_scaling");
  const auto rp = file.find("rope_parameters");
  *key = "rope_scaling";
  if (rs != file.end() && !rs->is_null()) {
    s = *rs;
  } else if (rp != file.end() && rp->is_object()) {
    *key = "rope_parameters";
    s = *rp;
    s.erase("rope_theta");
  } else {
    return nullptr;
  }
  if (!s.is_object()) return s;
  if (s.contains("type")) {
    s["rope_type"] = s["type"];
    s.erase("type");
  }
  const auto type = s.find("rope_type");
  return type != s.end() && *type == "default" ? Json(nullptr) : s;
}

// The file's RoPE scaling against the plan's "rope_scaling" (null, or an object with "rope_type"; a plan without the
// key does none): the same kind, and the same value for every other key, numbers compared exactly (they decide the
// fp32 frequencies). Errors name the file's kind or key and, through the plan's config_keys ("rope_scaling.<key>"),
// the dtrain key to set, or the kinds the dtrain key takes when it cannot take the file's.
Status CheckRopeScaling(const std::string& path, const Json& file, const Json& plan,
                        const std::map<std::string, std::string>& config_keys, const std::string& kind) {
  std::string name;
  const Json have = FileRopeScaling(file, &name);
  const auto p = plan.find("rope_scaling");
  const Json want = p == plan.end() ? Json(nullptr) : *p;
  if (have.is_null() && want.is_null()) return Status::OK();
  if (!have.is_null() && !have.is_object()) {
    return Status::InvalidArgument(path + ": " + name + " is " + have.dump() + ", not an object or null");
  }
  const auto dkey = [&](const std::string& k) {
    const auto it = config_keys.find("rope_scaling." + k);
    return it == config_keys.end() ? std::string() : it->second;
  };
  const auto type_of = [](const Json& s) {
    if (s.is_null()) return std::string("none");
    const auto t = s.find("rope_type");
    return t != s.end() && t->is_string() ? t->get<std::string>() : std::string();
  };
  const std::string have_type = type_of(have), want_type = type_of(want);
  if (have_type.empty()) return Status::InvalidArgument(path + ": " + name + " " + have.dump() + " has no rope_type");
  const auto raw = file.find(name);  // what the file says, for a "default" kind
  const std::string have_text = !have.is_null() ? have.dump() : raw == file.end() ? "null" : raw->dump();
  const std::string want_text = want.is_null() ? "none" : want.dump();
  if (have_type != want_type) {
    const std::string key = dkey("rope_type"), choices = key.empty() ? "" : ConfigChoices(key);
    std::string fix = "model.kind " + kind + " does not do this";
    if (!key.empty() && !choices.empty() && !IsChoice(have_type, choices)) {
      fix = "model.kind " + kind + " does not do rope_type \"" + have_type + "\"; " + key + " is one of " + choices;
    } else if (!key.empty()) {
      fix = "set " + key + ": " + have_type;
      if (!have.is_null()) {
        for (const auto& [k, v] : have.items()) {
          if (k != "rope_type" && !dkey(k).empty()) fix += ", " + dkey(k) + ": " + v.dump();
        }
      }
    }
    return Status::InvalidArgument(path + ": " + name + " is " + have_text + ", but the run's model has " + want_text +
                                   " (" + fix + ")");
  }
  for (const auto& [k, w] : want.items()) {
    if (k == "rope_type") continue;
    const auto h = have.find(k);
    if (h != have.end() && (h->is_number() && w.is_number() ? h->get<double>() == w.get<double>() : *h == w)) {
      continue;
    }
    const std::string key = dkey(k);
    std::string fix = key.empty() ? "set the model.kind " + kind + " config key that gives it" : "set " + key;
    if (h == have.end()) {
      fix = "transformers needs it";
    } else if (!key.empty()) {
      fix += ": " + h->dump();
    }
    return Status::InvalidArgument(path + ": " + name + "." + k + " is " + (h == have.end() ? "missing" : h->dump()) +
                                   ", but the run's model has " + w.dump() + " (" + fix + ")");
  }
  for (const auto& [k, h] : have.items()) {
    if (k == "rope_type" || want.contains(k) || h.is_null()) continue;
    return Status::InvalidArgument(path + ": " + name + "." + k + " is " + h.dump() +
                                   ", but the run's model has none (model.kind " + kind + " does not do this)");
  }
  return Status::OK();
}

Status CheckConfig(const std::string& path, const Json& file, const Json& plan,
                   const std::map<std::string, std::string>& config_keys, const std::string& kind) {
  std::vector<std::string> keys(std::begin(kStructuralKeys), std::end(kStructuralKeys));
  for (const auto& [k, unused] : config_keys) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  for (const std::string& key : keys) {
    if (key.find('.') != std::string::npos) continue;  // a sub-key ("rope_scaling.factor"): CheckRopeScaling
    const Json* have = FileValue(file, key);
    if (have == nullptr || have->is_null()) continue;  // transformers' default (n_inner: null is 4 n_embd)
    const auto want = plan.find(key);
    if (want == plan.end() ? Unset(*have) : SameValue(key, *have, *want)) continue;
    const auto dkey = config_keys.find(key);
    std::string fix = "set the model.kind " + kind + " config key that gives it";
    if (dkey != config_keys.end() && want != plan.end()) {
      fix = "set " + dkey->second + ": " + have->dump();
    } else if (want == plan.end() || Unset(*want)) {
      fix = "model.kind " + kind + " does not do this";
    }
    return Status::InvalidArgument(path + ": " + key + " is " + have->dump() + ", but the run's model has " +
                                   (want == plan.end() ? std::string("none") : want->dump()) + " (" + fix + ")");
  }
  return CheckRopeScaling(path, file, plan, config_keys, kind);
}

// --- weights -------------------------------------------------------------------------------------------------

// The HF weights of `dir`: model.safetensors, else the shards of model.safetensors.index.json. *where gets, per
// tensor, the file it came from (for errors).
Status ReadWeights(const std::string& dir, std::vector<NamedTensor>* tensors,
                   std::map<std::string, std::string>* where) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  tensors->clear();
  if (IsFile(single) || !IsFile(index)) {
    if (!IsFile(single) && !IsFile(index)) {
      return Status::NotFound(dir +
                              " holds neither model.safetensors nor model.safetensors.index.json (PyTorch .bin "
                              "weights are not read: save with save_pretrained(..., safe_serialization=True))");
    }
    DT_RETURN_IF_ERROR(ReadSafetensors(single, tensors));
    for (const NamedTensor& t : *tensors) (*where)[t.name] = single;
    return Status::OK();
  }
  Json idx;
  DT_RETURN_IF_ERROR(ReadJsonObject(index, &idx));
  const auto map = idx.find("weight_map");
  if (map == idx.end() || !map->is_object()) return Status::InvalidArgument(index + ": no weight_map object");
  std::map<std::string, std::string> shard_of;  // tensor -> shard file name
  std::set<std::string> shards;
  for (const auto& [name, shard] : map->items()) {
    const std::string s = shard.is_string() ? shard.get<std::string>() : "";
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos || s.find('\0') != std::string::npos) {
      return Status::InvalidArgument(index + ": weight_map names '" + (shard.is_string() ? s : shard.dump()) +
                                     "' for tensor '" + name + "', which is no file name in " + dir);
    }
    shard_of[name] = s;
    shards.insert(s);
  }
  for (const std::string& s : shards) {
    std::vector<NamedTensor> part;
    DT_RETURN_IF_ERROR(ReadSafetensors(dir + "/" + s, &part));
    for (NamedTensor& t : part) {
      const auto it = shard_of.find(t.name);
      if (it == shard_of.end() || it->second != s) {
        return Status::InvalidArgument(
            dir + "/" + s + ": tensor '" + t.name + "' is " +
            (it == shard_of.end() ? "not in " + index + "'s weight_map" : "mapped to " + it->second + " by " + index));
      }
      (*where)[t.name] = dir + "/" + s;
      tensors->push_back(std::move(t));
    }
  }
  for (const auto& [name, s] : shard_of) {
    if (where->count(name) == 0) {
      return Status::InvalidArgument(index + ": weight_map puts tensor '" + name + "' in " + s +
                                     ", which does not hold it");
    }
  }
  return Status::OK();
}

// One dtrain parameter being assembled: its values and, per dim-0 row, the plan tensor that set it (-1: none).
struct Assembled {
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::vector<int> filled_by;
  int64_t row = 1;  // values per row
};

// Puts HF tensor `t` (plan entry `h`, number `idx`) into its parameter's rows. Rows another entry set already
// must get the same values (a plan may name a tied weight twice).
Status Place(const models::HfTensor& h, int idx, const NamedTensor& t, const std::string& file,
             const std::vector<models::HfTensor>& plan, Assembled* p) {
  const int64_t rows = h.keep_rows >= 0 ? h.keep_rows : p->shape[0] - h.row_begin;
  std::vector<float> values(p->row);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pr = h.row_begin + r;
    float* dst = p->data.data() + pr * p->row;
    for (int64_t c = 0; c < p->row; ++c) values[c] = h.transpose ? t.data[c * rows + r] : t.data[r * p->row + c];
    if (p->filled_by[pr] >= 0) {
      if (!std::equal(values.begin(), values.end(), dst)) {
        return Status::InvalidArgument(file + ": tensors '" + plan[p->filled_by[pr]].name + "' and '" + h.name +
                                       "' both give row " + std::to_string(pr) + " of dtrain's '" + h.param +
                                       "' and differ");
      }
      continue;
    }
    std::copy(values.begin(), values.end(), dst);
    p->filled_by[pr] = idx;
  }
  return Status::OK();
}

// The plan's names that the file may hold without their first component (transformers' base_model_prefix): the
// prefix when no file tensor carries it, else "".
std::string DroppedPrefix(const models::HfExportPlan& plan, const std::map<std::string, const NamedTensor*>& file) {
  if (plan.tensors.empty()) return "";
  const std::string& first = plan.tensors.front().name;
  const size_t dot = first.find('.');
  if (dot == std::string::npos) return "";
  const std::string prefix = first.substr(0, dot + 1);
  for (const auto& [name, t] : file) {
    if (name.compare(0, prefix.size(), prefix) == 0) return "";
  }
  return prefix;
}

// Whether the file tensor `name`, which no plan entry names, may be left out; *why says why, or what is wrong.
bool Ignorable(const std::string& name, const NamedTensor& t, const Json& plan_json,
               const std::map<std::string, const NamedTensor*>& used, std::string* why) {
  for (const auto& [suffix, reason] : kIgnoredHfBuffers) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      *why = reason;
      return true;
    }
  }
  if (name != kLmHead) return false;
  const auto tie = plan_json.find("tie_word_embeddings");
  if (tie == plan_json.end() || !tie->is_boolean() || !tie->get<bool>()) return false;
  for (const auto& [other, u] : used) {
    if (u->shape == t.shape && u->data == t.data) {
      *why = "the tied head: equal to " + other;
      return true;
    }
  }
  *why =
      "differs from every tensor of the model, but the model ties its head to the embedding "
      "(tie_word_embeddings): this checkpoint was trained with an untied head";
  return false;
}

}  // namespace

bool HfInitDir(const std::string& init_from, std::string* dir) {
  if (init_from.compare(0, 3, "hf:") == 0) {
    *dir = init_from.substr(3);
    return true;
  }
  if (IsDir(init_from) && IsFile(init_from + "/config.json")) {
    *dir = init_from;
    return true;
  }
  return false;
}

const std::vector<std::string>& HfTokenizerFiles() {
  static const std::vector<std::string> kFiles = {
      "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
      "merges.txt",     "tokenizer.model",       "generation_config.json"};
  return kFiles;
}

Status ImportHuggingFace(const proto::Config& cfg, const std::string& dir, std::vector<NamedTensor>* params) {
  const std::string& kind = cfg.model().kind();
  if (dir.empty()) return Status::InvalidArgument("model.init_from hf: names no directory (hf:DIR)");
  if (!IsDir(dir)) {
    const std::string what =
        " (hf:DIR names a Hugging Face model directory, as save_pretrained writes it: "
        "config.json and model.safetensors)";
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) return Status::InvalidArgument(dir + ": not a directory" + what);
    return Status::NotFound(dir + ": no such directory" + what);
  }
  const models::ModelSpec* spec = nullptr;
  DT_RETURN_IF_ERROR(FindModelSpec(cfg, &spec));
  if (!spec->hf_export) {
    std::string with;
    for (const std::string& k : ModelKinds()) {
      const models::ModelSpec* s = models::FindModel(k);
      if (s != nullptr && s->hf_export) with += (with.empty() ? "" : ", ") + k;
    }
    return Status::InvalidArgument("model.init_from hf:" + dir + ": model.kind " + kind +
                                   " has no Hugging Face layout (these do: " + with + ")");
  }
  models::HfExportPlan plan;
  DT_RETURN_IF_ERROR(spec->hf_export(cfg, &plan));
  const Json plan_json = Json::parse(plan.config_json, nullptr, /*allow_exceptions=*/false);
  if (plan_json.is_discarded() || !plan_json.is_object()) {
    return Status::Internal("model.kind " + kind + ": the HF plan's config.json is not a JSON object");
  }
  Json file_json;
  const std::string config_path = dir + "/config.json";
  DT_RETURN_IF_ERROR(ReadJsonObject(config_path, &file_json));
  DT_RETURN_IF_ERROR(CheckConfig(config_path, file_json, plan_json, plan.config_keys, kind));

  std::vector<NamedTensor> tensors;
  std::map<std::string, std::string> where;
  DT_RETURN_IF_ERROR(ReadWeights(dir, &tensors, &where));
  std::map<std::string, const NamedTensor*> file;
  for (const NamedTensor& t : tensors) file[t.name] = &t;
  const std::string dropped = DroppedPrefix(plan, file);
  const std::string weights =
      IsFile(dir + "/model.safetensors") ? dir + "/model.safetensors" : dir + "/model.safetensors.index.json";

  std::map<std::string, Assembled> assembled;
  std::vector<std::string> order;  // parameters in the plan's order
  std::map<std::string, const NamedTensor*> used;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const models::HfTensor& h = plan.tensors[i];
    auto it = file.find(h.name);
    if (it == file.end() && !dropped.empty() && h.name.compare(0, dropped.size(), dropped) == 0) {
      it = file.find(h.name.substr(dropped.size()));
    }
    if (it == file.end()) {
      return Status::InvalidArgument(weights + ": no tensor '" + h.name + "' (model.kind " + kind + " takes " +
                                     std::to_string(plan.tensors.size()) +
                                     " tensors in HF's layout; all must be there)");
    }
    const NamedTensor& t = *it->second;
    // The plan's shapes come from a config the model was built from; checked anyway, it is cheap.
    int64_t numel = 1;
    for (int64_t d : h.param_shape) {
      if (d < 0 || (d > 0 && numel > models::kMaxModelParams / d)) {
        return Status::Internal("model.kind " + kind + ": HF plan shape of '" + h.param + "' out of range");
      }
      numel *= d;
    }
    if (h.param_shape.empty() || (h.transpose && h.param_shape.size() != 2)) {
      return Status::Internal("model.kind " + kind + ": HF plan: '" + h.param + "' is no matrix to slice or transpose");
    }
    const int64_t rows = h.keep_rows >= 0 ? h.keep_rows : h.param_shape[0] - h.row_begin;
    if (h.row_begin < 0 || rows < 0 || h.row_begin + rows > h.param_shape[0]) {
      return Status::Internal("model.kind " + kind + ": HF plan: rows of '" + h.param + "' outside its shape");
    }
    std::vector<int64_t> want = h.param_shape;
    want[0] = rows;
    if (h.transpose) want = {want[1], want[0]};
    if (t.shape != want) {
      return Status::InvalidArgument(where[t.name] + ": tensor '" + t.name + "' has shape " + ShapeString(t.shape) +
                                     ", but model.kind " + kind + " with this config takes " + ShapeString(want) +
                                     " (dtrain's '" + h.param + "' " + ShapeString(h.param_shape) + ")");
    }
    auto [p, fresh] = assembled.try_emplace(h.param);
    if (fresh) {
      p->second.shape = h.param_shape;
      p->second.data.assign(numel, 0.0f);
      p->second.filled_by.assign(h.param_shape[0], -1);
      p->second.row = h.param_shape[0] > 0 ? numel / h.param_shape[0] : 0;
      order.push_back(h.param);
    } else if (p->second.shape != h.param_shape) {
      return Status::Internal("model.kind " + kind + ": HF plan gives '" + h.param + "' two shapes");
    }
    DT_RETURN_IF_ERROR(Place(h, static_cast<int>(i), t, where[t.name], plan.tensors, &p->second));
    used[t.name] = &t;
  }

  // Uncovered rows may only be a parameter's tail (the padded vocabulary), left zero.
  for (const std::string& name : order) {
    const std::vector<int>& by = assembled[name].filled_by;
    const auto hole = std::find(by.begin(), by.end(), -1);
    const auto after = std::find_if(hole, by.end(), [](int f) { return f >= 0; });
    if (after != by.end()) {
      return Status::Internal("model.kind " + kind + ": the HF plan leaves row " + std::to_string(hole - by.begin()) +
                              " of '" + name + "' unset");
    }
  }
  // Every file tensor is used or is a known non-weight.
  std::vector<std::string> unknown;
  std::string first_why;
  for (const auto& [name, t] : file) {
    if (used.count(name) != 0) continue;
    std::string why;
    if (Ignorable(name, *t, plan_json, used, &why)) continue;
    if (unknown.empty()) first_why = why;
    unknown.push_back(name);
  }
  if (!unknown.empty()) {
    return Status::InvalidArgument(
        where[unknown[0]] + ": tensor '" + unknown[0] + "' " +
        (first_why.empty() ? "is not part of model.kind " + kind + "'s HF layout" : first_why) +
        (unknown.size() > 1 ? " (" + std::to_string(unknown.size()) + " such tensors in all)" : ""));
  }
  params->clear();
  for (const std::string& name : order) {
    Assembled& a = assembled[name];
    params->push_back({name, a.shape, std::move(a.data)});
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
