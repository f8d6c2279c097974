#pragma once
// SentencePiece models through the command-line tools of Debian's `sentencepiece` package (spm_train, spm_encode,
// spm_decode, spm_export_vocab), run as child processes on files in a temporary directory: loading a `.model` (a
// Tokenizer, data/tokenizer.h) and training one on a corpus (`dtrain data train-tokenizer`).
// Why not libsentencepiece: Debian's build carries its own protobuf 3.14 and exports its symbols, which clash with
// the system libprotobuf 3.21 dtrain links (a crash before main, or every call refused as a version mismatch).
// SentencePiece normalizes text (NFKC by default, as the model says; a newline becomes a space, so the text is
// encoded line by line) and marks word starts with U+2581, so Decode gives back the normalized text, which for
// plain ASCII text without runs of spaces or line breaks is the text itself; a model trained by TrainSentencePiece
// has byte fallback, so no character becomes <unk>. Not thread-safe (one per thread), as the Tokenizer contract says.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace dtrain::data {

// Opens the SentencePiece model at `path` (its vocabulary read through spm_export_vocab). `info` gives files and
// crc32c (set by the caller); kind and eot_token (the model's </s>, -1 when it has none) are filled here.
// InvalidArgument naming the file when it does not load; NotFound naming the tool when the package is missing.
Status OpenSentencePiece(const std::string& path, proto::TokenizerInfo info, std::unique_ptr<Tokenizer>* out);

struct SentencePieceTrainOptions {
  std::vector<std::string> inputs;  // text files, one sentence per line (lines above 64 KiB are cut)
  std::string out_prefix;           // writes <out_prefix>.model and <out_prefix>.vocab
  int64_t vocab_size = 8000;        // pieces, including <unk>, <s>, </s> and the 256 byte pieces
  std::string model_type = "bpe";   // bpe | unigram
  int64_t threads = 2;
};

// Trains a model with spm_train (byte fallback on, digits split, whitespace-only pieces allowed). Refuses
// (InvalidArgument) an existing <out_prefix>.model or .vocab: nothing is overwritten. Inputs must be regular files
// (NotFound / InvalidArgument naming them). spm_train's own errors (a vocab_size too large for the corpus) come
// back as InvalidArgument with its last message; a missing spm_train as NotFound naming the package.
Status TrainSentencePiece(const SentencePieceTrainOptions& opts);

}  // namespace dtrain::data
