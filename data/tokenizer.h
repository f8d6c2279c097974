#pragma once
// The tokenizer seam (docs/architecture.md "Seams"): text -> token ids -> text, its vocabulary size, and the
// description stored in a token dataset's schema (proto::TokenizerInfo). OpenTokenizer picks the implementation
// from the file it is given; callers never ask which one they hold.
//
// Kinds, and the files they are read from:
//   bytes          one token per byte (MakeByteTokenizer), no file.
//   gpt2_bpe       GPT-2's byte-level BPE (data/gpt2_bpe.h): a Hugging Face `tokenizer.json` whose model is BPE
//                  with the ByteLevel pre-tokenizer (GPT-2, RoBERTa, GPT-Neo, ...); or a vocabulary JSON
//                  (`vocab.json`, OpenAI's `encoder.json`) with its merges file beside it (`merges.txt`, OpenAI's
//                  `vocab.bpe`); or a directory holding either.
//   sentencepiece  a SentencePiece `.model` (data/sentencepiece_tokenizer.h; Llama 2, T5, or one made by
//                  `dtrain data train-tokenizer`), or a directory holding `tokenizer.model`.
// Encode reads text literally: a special token's text inside it ("<|endoftext|>") is encoded as ordinary text,
// never as the special token (tiktoken's encode_ordinary; Hugging Face's encode would turn it into the special
// id), so that no input text can forge a document boundary. The end-of-text id (eot_token) is written by the
// caller where a document ends.
//
// Thread-safety: a Tokenizer is not thread-safe (Encode keeps a cache); use one per thread.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "proto/shard.pb.h"

namespace dtrain::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` (any bytes; invalid UTF-8 included for gpt2_bpe, whose byte-level tokens round-trip
  // every byte) to *ids. Errors: InvalidArgument from SentencePiece only.
  virtual Status Encode(std::string_view text, std::vector<int32_t>* ids) = 0;

  // The text of `ids`, appended to *text. InvalidArgument naming the first id outside [0, vocab_size()).
  virtual Status Decode(const std::vector<int32_t>& ids, std::string* text) const = 0;

  // Every id Encode returns is below it (the largest id + 1, special tokens included).
  virtual int64_t vocab_size() const = 0;

  // kind, files, crc32c and eot_token (-1 when the vocabulary has no end-of-text token).
  virtual const proto::TokenizerInfo& info() const = 0;
};

// One token per byte (vocab 256, kind "bytes", no end-of-text token): convert-text without --tokenizer.
std::unique_ptr<Tokenizer> MakeByteTokenizer();

// Opens the tokenizer at `path` (a file or directory, as listed above). Errors name the file and what was wrong:
// NotFound (no such file; a directory holding none of the known files), InvalidArgument (a JSON that does not
// parse, a tokenizer.json of another model or pre-tokenizer, a merge whose pieces are not in the vocabulary, a
// SentencePiece model that does not load).
Status OpenTokenizer(const std::string& path, std::unique_ptr<Tokenizer>* out);

// How a dataset's tokenizer (its schema's TokenizerInfo) is written beside exported weights for Hugging Face's
// AutoTokenizer: a name for each of info.files, in order, and tokenizer_config.json naming the class that tokenizes
// as dtrain did (gpt2_bpe: tokenizer.json -> PreTrainedTokenizerFast, vocab.json + merges.txt -> GPT2TokenizerFast;
// sentencepiece: tokenizer.model -> LlamaTokenizer with no BOS/EOS added). NotFound for a kind with no files to
// write ("bytes", an empty list); DataLoss when the file count does not fit the kind.
struct HfTokenizerLayout {
  std::vector<std::string> names;
  std::string config_json;
};
Status HfTokenizerLayoutOf(const proto::TokenizerInfo& info, HfTokenizerLayout* out);

}  // namespace dtrain::data
