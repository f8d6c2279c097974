#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <unordered_map>

#include "core/check.h"
#include "core/file_guard.h"

namespace dtrain::data {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, proto::TokenizerInfo info)
      : sp_(std::move(sp)), info_(std::move(info)) {}

  Status Encode(std::string_view text, std::vector<int32_t>* ids) override {
    std::vector<int> out;
    const auto st = sp_->Encode(absl::string_view(text.data(), text.size()), &out);
    if (!st.ok()) return Status::InvalidArgument("sentencepiece encode: " + st.ToString());
    ids->insert(ids->end(), out.begin(), out.end());
    return Status::OK();
  }

  Status Decode(const std::vector<int32_t>& ids, std::string* text) const override {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocab_size()) {
        return Status::InvalidArgument("decode: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                       " is not in the vocabulary (" + std::to_string(vocab_size()) + " ids)");
      }
    }
    std::string out;
    const auto st = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &out);
    if (!st.ok()) return Status::InvalidArgument("sentencepiece decode: " + st.ToString());
    text->append(out);
    return Status::OK();
  }

  int64_t vocab_size() const override { return sp_->GetPieceSize(); }
  const proto::TokenizerInfo& info() const override { return info_; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  proto::TokenizerInfo info_;
};

}  // namespace

Status OpenSentencePiece(const std::string& path, proto::TokenizerInfo info, std::unique_ptr<Tokenizer>* out) {
  std::string bytes;
  DT_RETURN_IF_ERROR(ReadRegularFile(path, "SentencePiece model", &bytes));
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = sp->LoadFromSerializedProto(bytes);
  if (!st.ok()) {
    return Status::InvalidArgument(path + ": not a SentencePiece model (" + st.ToString() +
                                   "); --tokenizer takes a tokenizer.json, vocab.json + merges.txt, or a .model");
  }
  info.set_kind("sentencepiece");
  info.set_eot_token(sp->eos_id() >= 0 ? sp->eos_id() : -1);
  *out = std::make_unique<SentencePieceTokenizer>(std::move(sp), std::move(info));
  return Status::OK();
}

Status TrainSentencePiece(const SentencePieceTrainOptions& o) {
  DT_CHECK_ARG(!o.inputs.empty(), "train-tokenizer: no --input files");
  DT_CHECK_ARG(!o.out_prefix.empty(), "train-tokenizer: --out PREFIX is required");
  DT_CHECK_ARG(o.model_type == "bpe" || o.model_type == "unigram",
               "train-tokenizer: --model-type must be bpe or unigram, got '" << o.model_type << "'");
  DT_CHECK_ARG(o.vocab_size >= 260 && o.vocab_size <= (1 << 24),
               "train-tokenizer: --vocab-size must be in [260, 16777216] (256 byte pieces + <unk> <s> </s> + 1), got "
                   << o.vocab_size);
  std::string inputs;
  for (const std::string& f : o.inputs) {
    DT_RETURN_IF_ERROR(CheckRegularFile(f, "train-tokenizer input"));
    DT_CHECK_ARG(f.find(',') == std::string::npos,
                 "train-tokenizer: input '" << f << "' has a comma in its name, which SentencePiece cannot take");
    inputs += (inputs.empty() ? "" : ",") + f;
  }
  for (const char* ext : {".model", ".vocab"}) {
    std::error_code ec;
    if (std::filesystem::exists(o.out_prefix + ext, ec)) {
      return Status::InvalidArgument(o.out_prefix + ext +
                                     ": exists; train-tokenizer does not overwrite (give "
                                     "another --out PREFIX)");
    }
  }
  const std::unordered_map<std::string, std::string> args = {
      {"input", inputs},
      {"model_prefix", o.out_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", "65536"},
      {"num_threads", std::to_string(o.threads)},
      {"minloglevel", "1"},
  };
  const auto st = sentencepiece::SentencePieceTrainer::Train(args);
  if (!st.ok()) return Status::InvalidArgument("train-tokenizer (SentencePiece): " + st.ToString());
  return Status::OK();
}

}  // namespace dtrain::data
