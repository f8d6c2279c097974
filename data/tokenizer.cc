#include "data/tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/file_guard.h"
#include "data/gpt2_bpe.h"
#include "data/sentencepiece_tokenizer.h"

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Vocab = std::unordered_map<std::string, int32_t>;
using Merges = std::vector<std::pair<std::string, std::string>>;

constexpr char kEndOfText[] = "<|endoftext|>";

class ByteTokenizer final : public Tokenizer {
 public:
  ByteTokenizer() {
    info_.set_kind("bytes");
    info_.set_eot_token(-1);
  }
  Status Encode(std::string_view text, std::vector<int32_t>* ids) override {
    for (char c : text) ids->push_back(static_cast<uint8_t>(c));
    return Status::OK();
  }
  Status Decode(const std::vector<int32_t>& ids, std::string* text) const override {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > 255) {
        return Status::InvalidArgument("decode: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                       " is not a byte token (0..255)");
      }
      text->push_back(static_cast<char>(ids[i]));
    }
    return Status::OK();
  }
  int64_t vocab_size() const override { return 256; }
  const proto::TokenizerInfo& info() const override { return info_; }

 private:
  proto::TokenizerInfo info_;
};

bool IsFile(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Reads `files` (each a regular file) into *texts and records them, absolute, with their CRC32C in *info.
Status ReadFiles(const std::vector<std::string>& files, const std::string& what, std::vector<std::string>* texts,
                 proto::TokenizerInfo* info) {
  uint32_t crc = 0;
  for (const std::string& f : files) {
    std::string text;
    DT_RETURN_IF_ERROR(ReadRegularFile(f, what, &text));
    crc = Crc32cExtend(crc, text.data(), text.size());
    std::error_code ec;
    const fs::path abs = fs::absolute(f, ec);
    info->add_files(ec ? f : abs.lexically_normal().string());
    texts->push_back(std::move(text));
  }
  info->set_crc32c(crc);
  return Status::OK();
}

Status ParseJson(const std::string& path, const std::string& text, Json* out) {
  *out = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return Status::InvalidArgument(path + ": is not valid JSON");
  if (!out->is_object()) return Status::InvalidArgument(path + ": expected a JSON object");
  return Status::OK();
}

// A {"token": id, ...} object (vocab.json, encoder.json, tokenizer.json's model.vocab).
Status ReadVocab(const std::string& path, const std::string& key, const Json& j, Vocab* vocab) {
  if (!j.is_object() || j.empty()) return Status::InvalidArgument(path + ": " + key + " must be a non-empty object");
  for (const auto& [text, id] : j.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return Status::InvalidArgument(path + ": " + key + " token '" + text + "': id must be an integer in [0, 2^31)");
    }
    (*vocab)[text] = id.get<int32_t>();
  }
  return Status::OK();
}

// merges.txt / vocab.bpe: an optional "#version" line, then one "left right" pair per line.
Status ReadMergesText(const std::string& path, const std::string& text, Merges* merges) {
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": expected a merge 'LEFT RIGHT', got '" +
                                     line + "'");
    }
    merges->emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  return Status::OK();
}

void SetEot(const Vocab& vocab, const Vocab& added, proto::TokenizerInfo* info) {
  const auto a = added.find(kEndOfText), v = vocab.find(kEndOfText);
  info->set_eot_token(a != added.end() ? a->second : v != vocab.end() ? v->second : -1);
}

Status OpenVocabMerges(const std::string& vocab_path, const std::string& merges_path, std::unique_ptr<Tokenizer>* out) {
  std::vector<std::string> texts;
  proto::TokenizerInfo info;
  DT_RETURN_IF_ERROR(ReadFiles({vocab_path, merges_path}, "tokenizer file", &texts, &info));
  Json j;
  DT_RETURN_IF_ERROR(ParseJson(vocab_path, texts[0], &j));
  Vocab vocab;
  DT_RETURN_IF_ERROR(ReadVocab(vocab_path, "the vocabulary", j, &vocab));
  Merges merges;
  DT_RETURN_IF_ERROR(ReadMergesText(merges_path, texts[1], &merges));
  info.set_kind("gpt2_bpe");
  SetEot(vocab, {}, &info);
  std::unique_ptr<Gpt2Bpe> bpe;
  DT_RETURN_IF_ERROR(Gpt2Bpe::Create(vocab, merges, {}, vocab_path + " + " + merges_path, info, &bpe));
  *out = std::move(bpe);
  return Status::OK();
}

// A Hugging Face tokenizer.json: model BPE, pre-tokenizer ByteLevel (GPT-2's regex, no prefix space), no
// normalizer; anything else is refused, naming the key, rather than tokenized differently from the original.
Status OpenTokenizerJson(const std::string& path, const Json& j, proto::TokenizerInfo info,
                         std::unique_ptr<Tokenizer>* out) {
  auto bad = [&](const std::string& what) { return Status::InvalidArgument(path + ": " + what); };
  const Json& model = j["model"];
  if (!model.is_object()) return bad("\"model\" must be an object");
  const std::string type = model.value("type", std::string());
  if (type != "BPE") {
    return bad("model.type is '" + type +
               "': dtrain reads byte-level BPE tokenizer.json files (GPT-2's); for a SentencePiece tokenizer give its "
               ".model file");
  }
  const Json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json();
  if (!pre.is_object() || pre.value("type", std::string()) != "ByteLevel") {
    return bad("pre_tokenizer must be {\"type\": \"ByteLevel\"} (GPT-2's), got " + pre.dump().substr(0, 120));
  }
  if (pre.value("add_prefix_space", false)) return bad("pre_tokenizer.add_prefix_space true is not supported");
  if (!pre.value("use_regex", true)) return bad("pre_tokenizer.use_regex false is not supported");
  if (j.contains("normalizer") && !j["normalizer"].is_null()) return bad("a normalizer is not supported (null only)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      return bad(std::string("model.") + key + " is not supported by byte-level BPE");
    }
  }
  Vocab vocab, added;
  DT_RETURN_IF_ERROR(ReadVocab(path, "model.vocab", model["vocab"], &vocab));
  Merges merges;
  const Json& jm = model["merges"];
  if (!jm.is_array()) return bad("model.merges must be an array");
  for (size_t i = 0; i < jm.size(); ++i) {
    const Json& m = jm[i];
    if (m.is_string()) {  // "left right"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return bad("model.merges[" + std::to_string(i) + "]: expected 'LEFT RIGHT', got '" + s + "'");
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return bad("model.merges[" + std::to_string(i) + "]: expected \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"]");
    }
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const Json& t : j["added_tokens"]) {
      if (!t.is_object() || !t["id"].is_number_integer() || !t["content"].is_string()) {
        return bad("added_tokens: each entry needs an integer \"id\" and a string \"content\"");
      }
      added[t["content"].get<std::string>()] = t["id"].get<int32_t>();
    }
  }
  info.set_kind("gpt2_bpe");
  SetEot(vocab, added, &info);
  std::unique_ptr<Gpt2Bpe> bpe;
  DT_RETURN_IF_ERROR(Gpt2Bpe::Create(vocab, merges, added, path, info, &bpe));
  *out = std::move(bpe);
  return Status::OK();
}

// A .json file: a tokenizer.json (its "model" is an object), else a vocabulary whose merges file lies beside it.
Status OpenJson(const std::string& path, std::unique_ptr<Tokenizer>* out) {
  std::vector<std::string> texts;
  proto::TokenizerInfo info;
  DT_RETURN_IF_ERROR(ReadFiles({path}, "tokenizer file", &texts, &info));
  Json j;
  DT_RETURN_IF_ERROR(ParseJson(path, texts[0], &j));
  // (GPT-2's vocabulary has a token "model", with an integer id: only an object is tokenizer.json's model.)
  if (j.contains("model") && j["model"].is_object()) return OpenTokenizerJson(path, j, info, out);
  const fs::path dir = fs::path(path).parent_path();
  for (const char* name : {"merges.txt", "vocab.bpe"}) {
    const std::string merges = (dir / name).string();
    if (IsFile(merges)) return OpenVocabMerges(path, merges, out);
  }
  return Status::NotFound(path +
                          ": a vocabulary without \"model\" (not a tokenizer.json) needs its merges beside it: " +
                          (dir / "merges.txt").string() + " (or vocab.bpe) not found");
}

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

Status OpenTokenizer(const std::string& path, std::unique_ptr<Tokenizer>* out) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path d(path);
    if (IsFile((d / "tokenizer.json").string())) return OpenJson((d / "tokenizer.json").string(), out);
    for (const auto& [v, m] : {std::pair{"vocab.json", "merges.txt"}, std::pair{"encoder.json", "vocab.bpe"}}) {
      if (IsFile((d / v).string()) && IsFile((d / m).string())) {
        return OpenVocabMerges((d / v).string(), (d / m).string(), out);
      }
    }
    if (IsFile((d / "tokenizer.model").string())) {
      const std::string p = (d / "tokenizer.model").string();
      std::vector<std::string> texts;
      proto::TokenizerInfo info;
      DT_RETURN_IF_ERROR(ReadFiles({p}, "SentencePiece model", &texts, &info));
      return OpenSentencePiece(p, info, out);
    }
    return Status::NotFound(path + ": a directory with no tokenizer in it (expected tokenizer.json, vocab.json + " +
                            "merges.txt, encoder.json + vocab.bpe, or tokenizer.model)");
  }
  DT_RETURN_IF_ERROR(CheckRegularFile(path, "tokenizer"));
  if (fs::path(path).extension() == ".json") return OpenJson(path, out);
  std::vector<std::string> texts;
  proto::TokenizerInfo info;
  DT_RETURN_IF_ERROR(ReadFiles({path}, "tokenizer file", &texts, &info));
  return OpenSentencePiece(path, info, out);
}

Status HfTokenizerLayoutOf(const proto::TokenizerInfo& info, HfTokenizerLayout* out) {
  // Per kind and file count (the files the kind's Open* records, in order): their Hugging Face names and the class
  // AutoTokenizer builds from them.
  struct Layout {
    const char* kind;
    std::vector<std::string> names;
    const char* config_json;
  };
  static const Layout kLayouts[] = {
      {"sentencepiece",
       {"tokenizer.model"},
       R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": false, "add_eos_token": false, "legacy": true})"},
      {"gpt2_bpe", {"tokenizer.json"}, R"({"tokenizer_class": "PreTrainedTokenizerFast"})"},
      {"gpt2_bpe",
       {"vocab.json", "merges.txt"},
       R"({"tokenizer_class": "GPT2TokenizerFast", "add_prefix_space": false})"},
  };
  const size_t n = static_cast<size_t>(info.files_size());
  bool kind_has_files = false;
  for (const Layout& l : kLayouts) {
    if (info.kind() != l.kind) continue;
    kind_has_files = true;
    if (l.names.size() != n) continue;
    *out = HfTokenizerLayout();
    out->names = l.names;
    out->config_json = std::string(l.config_json) + "\n";
    return Status::OK();
  }
  *out = HfTokenizerLayout();
  if (n == 0 || !kind_has_files)
    return Status::NotFound("a " + info.kind() + " tokenizer has no files for Hugging Face");
  return Status::DataLoss("a " + info.kind() + " tokenizer of " + std::to_string(n) + " files");
}

}  // namespace dtrain::data
