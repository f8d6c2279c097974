#pragma once
// GPT-2's byte-level BPE (Radford et al. 2019; openai/gpt-2 encoder.py, Hugging Face tokenizers' ByteLevel +
// BPE): text is cut into pre-tokens by GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (a hand-written scanner over UTF-8 code points, classes from data/unicode_classes.h; a byte that is not part of
// valid UTF-8 counts as one code point of no class, so any bytes tokenize and decode back to themselves); each
// pre-token's bytes become the 256 byte tokens (bytes_to_unicode) and are merged pair by pair, always the pair of
// lowest merge rank, every occurrence left to right, until no ranked pair is left. Results are cached per
// pre-token. Made by OpenTokenizer (data/tokenizer.h) from tokenizer.json or vocab.json + merges.txt.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/tokenizer.h"

namespace dtrain::data {

// The printable code point GPT-2 maps byte `b` to (bytes_to_unicode: printable Latin-1 bytes map to themselves,
// the other 68 to U+0100 + n in byte order).
char32_t Gpt2ByteToCodePoint(uint8_t b);

// The pre-tokens of `text` by GPT-2's regex, as [begin, end) byte ranges covering all of it in order.
std::vector<std::pair<size_t, size_t>> Gpt2PreTokenize(std::string_view text);

class Gpt2Bpe final : public Tokenizer {
 public:
  // `vocab`: token text (in bytes_to_unicode form, UTF-8) -> id; `merges`: pairs of token texts, rank = index;
  // `added`: special tokens (text -> id; their text is kept literally). Every byte's token must be in the vocab,
  // and both pieces and the merged text of every merge; InvalidArgument naming `source` and the merge's number
  // (1-based) otherwise. `info` is returned by info() (its eot_token is set by the caller).
  static Status Create(const std::unordered_map<std::string, int32_t>& vocab,
                       const std::vector<std::pair<std::string, std::string>>& merges,
                       const std::unordered_map<std::string, int32_t>& added, const std::string& source,
                       proto::TokenizerInfo info, std::unique_ptr<Gpt2Bpe>* out);

  Status Encode(std::string_view text, std::vector<int32_t>* ids) override;
  Status Decode(const std::vector<int32_t>& ids, std::string* text) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(bytes_of_.size()); }
  const proto::TokenizerInfo& info() const override { return info_; }

 private:
  Gpt2Bpe() = default;
  void EncodePiece(std::string_view piece, std::vector<int32_t>* ids);

  int32_t byte_id_[256] = {};
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left << 32 | right) -> (rank, merged id)
  std::vector<std::string> bytes_of_;                                 // id -> the bytes it decodes to
  std::vector<bool> known_;                                           // id -> in the vocabulary
  std::unordered_map<std::string, std::vector<int32_t>> cache_;       // pre-token -> ids
  proto::TokenizerInfo info_;
};

}  // namespace dtrain::data
