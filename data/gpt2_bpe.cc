#include "data/gpt2_bpe.h"

#include <limits>

#include "data/unicode_classes.h"

namespace dtrain::data {
namespace {

constexpr size_t kMaxCached = 1 << 18;  // pre-tokens kept in the cache before it starts again

// One code point of `s` at byte `i`: its value and length. A byte that does not start a valid, shortest-form UTF-8
// sequence of a scalar value is one unit of length 1 with a value no class holds (0x110000).
std::pair<char32_t, size_t> DecodeAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  constexpr char32_t kInvalid = 0x110000;
  if (c < 0x80) return {c, 1};
  size_t n = 0;
  char32_t cp = 0, min = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return {kInvalid, 1};
  }
  if (i + n > s.size()) return {kInvalid, 1};
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return {kInvalid, 1};
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalid, 1};
  return {cp, n};
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The scanner's view of `text`: the class and byte length of the code point at each position it visits.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : s_(text) {}
  size_t size() const { return s_.size(); }
  CodePointClass ClassAt(size_t i) const { return ClassifyCodePoint(DecodeAt(s_, i).first); }
  size_t Next(size_t i) const { return i + DecodeAt(s_, i).second; }
  char Byte(size_t i) const { return s_[i]; }
  // The end of the run of code points of class `c` from i (i itself when none).
  size_t RunOf(size_t i, CodePointClass c) const {
    while (i < s_.size() && ClassAt(i) == c) i = Next(i);
    return i;
  }
  // The end of the run of code points that are not space, letter or number ([^\s\p{L}\p{N}]).
  size_t RunOfOther(size_t i) const {
    while (i < s_.size() && ClassAt(i) == CodePointClass::kOther) i = Next(i);
    return i;
  }

 private:
  std::string_view s_;
};

// The end of GPT-2's regex match starting at i (i < size): the alternatives in the regex's order.
size_t MatchAt(const Scanner& s, size_t i) {
  const size_t n = s.size();
  // 's|'t|'re|'ve|'m|'ll|'d (ASCII apostrophe, lower case only, as the regex is written)
  if (s.Byte(i) == '\'' && i + 1 < n) {
    const char a = s.Byte(i + 1), b = i + 2 < n ? s.Byte(i + 2) : '\0';
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional U+0020, then a run of one class.
  const size_t body = (s.Byte(i) == ' ' && i + 1 < n) ? i + 1 : i;
  for (size_t start : {body, i}) {  // with the space first; without it only when the space is not taken
    const CodePointClass c = s.ClassAt(start);
    if (c == CodePointClass::kLetter || c == CodePointClass::kNumber) return s.RunOf(start, c);
    if (c == CodePointClass::kOther) return s.RunOfOther(start);
    if (start == i) break;
  }
  // Here s[i] is white space. `\s+(?!\S)`: the run, less its last code point when a non-space follows it
  // (backtracking to where the look-ahead sees space); `\s+` when that leaves nothing.
  const size_t end = s.RunOf(i, CodePointClass::kSpace);
  if (end == n) return end;
  size_t last = i;  // the start of the run's last code point
  for (size_t k = i; k < end; k = s.Next(k)) last = k;
  return last > i ? last : end;
}

}  // namespace

char32_t Gpt2ByteToCodePoint(uint8_t b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  if (printable) return b;
  int n = 0;  // the rank of b among the non-printable bytes
  for (int k = 0; k < b; ++k) {
    const bool p = (k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE);
    if (!p) ++n;
  }
  return 0x100 + n;
}

std::vector<std::pair<size_t, size_t>> Gpt2PreTokenize(std::string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  const Scanner s(text);
  for (size_t i = 0; i < text.size();) {
    const size_t end = MatchAt(s, i);
    out.emplace_back(i, end);
    i = end;
  }
  return out;
}

Status Gpt2Bpe::Create(const std::unordered_map<std::string, int32_t>& vocab,
                       const std::vector<std::pair<std::string, std::string>>& merges,
                       const std::unordered_map<std::string, int32_t>& added, const std::string& source,
                       proto::TokenizerInfo info, std::unique_ptr<Gpt2Bpe>* out) {
  std::unique_ptr<Gpt2Bpe> t(new Gpt2Bpe());
  int64_t max_id = -1;
  for (const auto* m : {&vocab, &added}) {
    for (const auto& [text, id] : *m) {
      if (id < 0) return Status::InvalidArgument(source + ": token '" + text + "' has a negative id");
      max_id = std::max<int64_t>(max_id, id);
    }
  }
  if (max_id < 0) return Status::InvalidArgument(source + ": the vocabulary is empty");
  t->bytes_of_.assign(static_cast<size_t>(max_id) + 1, "");
  t->known_.assign(static_cast<size_t>(max_id) + 1, false);
  std::unordered_map<char32_t, uint8_t> byte_of;  // bytes_to_unicode inverted
  for (int b = 0; b < 256; ++b) byte_of[Gpt2ByteToCodePoint(static_cast<uint8_t>(b))] = static_cast<uint8_t>(b);
  for (const auto& [text, id] : vocab) {
    std::string bytes;  // the token's text mapped back through bytes_to_unicode
    for (size_t i = 0; i < text.size();) {
      const auto [cp, len] = DecodeAt(text, i);
      const auto it = byte_of.find(cp);
      if (it == byte_of.end()) {
        return Status::InvalidArgument(source + ": vocabulary token '" + text +
                                       "' holds a character outside GPT-2's byte alphabet (bytes_to_unicode): not a "
                                       "byte-level BPE vocabulary");
      }
      bytes.push_back(static_cast<char>(it->second));
      i += len;
    }
    t->bytes_of_[id] = bytes;
    t->known_[id] = true;
  }
  for (const auto& [text, id] : added) {  // special tokens decode to their literal text
    t->bytes_of_[id] = text;
    t->known_[id] = true;
  }
  for (int b = 0; b < 256; ++b) {
    std::string text;
    AppendUtf8(Gpt2ByteToCodePoint(static_cast<uint8_t>(b)), &text);
    const auto it = vocab.find(text);
    if (it == vocab.end()) {
      return Status::InvalidArgument(source + ": no vocabulary token for byte " + std::to_string(b) + " ('" + text +
                                     "'): not a byte-level BPE vocabulary");
    }
    t->byte_id_[b] = it->second;
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || im == vocab.end()) {
      const std::string& missing = ia == vocab.end() ? a : ib == vocab.end() ? b : a + b;
      return Status::InvalidArgument(source + ": merge " + std::to_string(r + 1) + " ('" + a + " " + b + "'): '" +
                                     missing + "' is not in the vocabulary");
    }
    const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    t->merges_.emplace(key, std::make_pair(static_cast<int32_t>(r), im->second));  // a repeated pair keeps rank 1st
  }
  t->info_ = std::move(info);
  *out = std::move(t);
  return Status::OK();
}

void Gpt2Bpe::EncodePiece(std::string_view piece, std::vector<int32_t>* ids) {
  const auto hit = cache_.find(std::string(piece));
  if (hit != cache_.end()) {
    ids->insert(ids->end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<int32_t> word;
  word.reserve(piece.size());
  for (char c : piece) word.push_back(byte_id_[static_cast<uint8_t>(c)]);
  const auto key = [&](size_t k) {
    return (static_cast<uint64_t>(word[k]) << 32) | static_cast<uint32_t>(word[k + 1]);
  };
  while (word.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), merged = -1;
    uint64_t best = 0;
    for (size_t k = 0; k + 1 < word.size(); ++k) {
      const auto it = merges_.find(key(k));
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first, merged = it->second.second, best = key(k);
      }
    }
    if (merged < 0) break;
    size_t w = 0;  // merge every occurrence of the best pair, left to right, in place
    for (size_t k = 0; k < word.size(); ++k) {
      if (k + 1 < word.size() && key(k) == best) {
        word[w++] = merged;
        ++k;
      } else {
        word[w++] = word[k];
      }
    }
    word.resize(w);
  }
  ids->insert(ids->end(), word.begin(), word.end());
  if (cache_.size() >= kMaxCached) cache_.clear();
  cache_.emplace(std::string(piece), std::move(word));
}

Status Gpt2Bpe::Encode(std::string_view text, std::vector<int32_t>* ids) {
  const Scanner s(text);
  for (size_t i = 0; i < text.size();) {
    const size_t end = MatchAt(s, i);
    EncodePiece(text.substr(i, end - i), ids);
    i = end;
  }
  return Status::OK();
}

Status Gpt2Bpe::Decode(const std::vector<int32_t>& ids, std::string* text) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || !known_[id]) {
      return Status::InvalidArgument("decode: id " + std::to_string(id) + " at position " + std::to_string(i) +
                                     " is not in the vocabulary (" + std::to_string(vocab_size()) + " ids)");
    }
    text->append(bytes_of_[id]);
  }
  return Status::OK();
}

}  // namespace dtrain::data
