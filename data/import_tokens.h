#pragma once
// Token files from the ecosystem -> a dtrain TOKENS dataset, so a GPT-2 or Llama run can train on data already
// tokenized with GPT-2's or Llama 3's tokenizer (`dtrain data import-tokens`). Two inputs are understood:
//   raw     nanoGPT's prepare.py output: little-endian uint16 token ids, nothing else (train.bin, val.bin);
//   llmc    llm.c's .bin shards (dev/data/data_common.py write_datafile): a header of 256 little-endian int32 —
//           [0] magic, [1] version, [2] token count — then the tokens. Two headers exist and are read:
//           magic 20240520 version 1 (GPT-2, uint16 tokens) and magic 20240801 version 7 (Llama 3, uint32 tokens);
//           any other magic/version pair is refused, never guessed at;
//   auto    llmc when the file starts with one of llm.c's magics, else raw; a file whose first 1024 bytes look like
//           an llm.c header with a damaged magic (a few bits off one of the two, or a known version and token count
//           that fit the file's size) is DataLoss rather than raw tokens (--format raw forces raw).
// Files are read in order as one stream (streamed: a shard of any size takes bounded memory), cut into records of
// seq_len + 1 tokens with a stride of seq_len, like ConvertText; the tail shorter than a record is dropped.
// Every token must be below `vocab_size` (default 50257: GPT-2's BPE; Llama 3's is 128256); the first one that is
// not is InvalidArgument naming the file, its token index, its byte offset in the file and its value. The dataset
// stores uint16 tokens when vocab_size <= 65536, else uint32 (DatasetSchema.token_dtype), so no id is truncated.
// Thread-safe: no shared state.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/shard.pb.h"

namespace dtrain::data {

struct ImportTokensOptions {
  std::string format = "auto";  // auto | raw | llmc
  int64_t seq_len = 1024;
  int64_t vocab_size = 50257;
  int64_t samples_per_shard = 4096;
  bool overwrite = false;  // move aside what is already in out_dir (data/convert.h PrepareDatasetDir)
};

// Errors: NotFound / IoError naming the file; DataLoss for an llm.c header whose token count disagrees with the
// file's size (a truncated shard), a shard shorter than its header, a damaged header (auto), a raw file of an odd
// byte count; InvalidArgument for an llm.c header of an unknown magic or version (naming the values found and the
// two known), an unknown format, a token >= vocab_size, fewer tokens than one record, or a non-empty out_dir
// without `overwrite`. `*dropped_tokens` (optional) gets the
// tail's size.
Status ImportTokens(const std::vector<std::string>& files, const std::string& out_dir, const ImportTokensOptions& opts,
                    int64_t* dropped_tokens = nullptr, proto::DatasetManifest* manifest = nullptr);

}  // namespace dtrain::data
