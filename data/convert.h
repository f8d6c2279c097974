#pragma once
// Converters from raw data to sharded datasets (docs/data_format.md); `dtrain data convert-*` calls
// these. Each writes a complete dataset directory (shards, then manifest.pb). Thread-safe: no shared state.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/shard.pb.h"

namespace dtrain::data {

// Fashion-MNIST IDX files of one split ("train" or "t10k") in `src_dir` (plain or .gz, as
// data/idx_reader.h reads them) -> an IMAGE dataset [28, 28] with labels (10 classes) and the
// Fashion-MNIST mean/std, samples in file order. `limit` > 0 keeps the first `limit` samples.
// Errors name the file (NotFound, DataLoss from ReadIdx, image/label count mismatch).
Status ConvertFashionMnist(const std::string& src_dir, const std::string& split, const std::string& out_dir,
                           int64_t samples_per_shard, int64_t limit, proto::DatasetManifest* manifest = nullptr);

struct TextConvertOptions {
  std::string tokenizer;  // a tokenizer path for OpenTokenizer (data/tokenizer.h); "" = one token per byte
  // UNSPECIFIED = the smallest that holds the vocabulary (UINT16 up to 65536 ids, else UINT32)
  proto::DatasetSchema::TokenDType dtype = proto::DatasetSchema::TOKEN_DTYPE_UNSPECIFIED;
  int64_t seq_len = 1024;   // tokens per record = seq_len + 1 (inputs and next-token targets)
  double val_fraction = 0;  // in [0, 1): > 0 writes out_dir/train and out_dir/val, else out_dir alone
  int64_t samples_per_shard = 4096;
  bool overwrite = false;  // move aside what is already in out_dir (see PrepareDatasetDir)
};

struct TextConvertResult {
  int64_t tokens = 0;           // of the whole stream, end-of-text tokens included
  int64_t train_records = 0;    // in out_dir (or out_dir/train)
  int64_t val_records = 0;      // in out_dir/val
  int64_t dropped_tokens = 0;   // tails shorter than a record, of both splits
  proto::DatasetSchema schema;  // the schema both datasets carry
};

// Makes `out_dir` ready for a new dataset, never deleting anything: an out_dir that holds (or is) one of `inputs`
// is refused (InvalidArgument, --overwrite or not: the conversion would replace its own input); otherwise OK when
// it does not exist or is empty; otherwise InvalidArgument ("... is not empty ... --overwrite") unless `overwrite`,
// which moves the whole directory aside to "<out_dir>.replaced-<UTC time>" (core/file_guard.h MoveAside) and
// says where in *note (optional; "" when nothing moved).
Status PrepareDatasetDir(const std::string& out_dir, bool overwrite, const std::vector<std::string>& inputs = {},
                         std::string* note = nullptr);

// Tokens of `files` by opts.tokenizer (data/tokenizer.h; one token per byte when empty), file after file, with the
// tokenizer's end-of-text token after each file when it has one, as one stream. With val_fraction F > 0 the first
// (1 - F) of the stream makes out_dir/train and the rest out_dir/val; else the stream makes out_dir. Each is cut
// into records of seq_len + 1 tokens with a stride of seq_len (consecutive records share one token, so every
// next-token pair of the stream is in some record); a tail shorter than a record is dropped. The schema carries
// the vocabulary size, the record length (dims) and the tokenizer (TokenizerInfo). Errors: NotFound / IoError /
// InvalidArgument naming an input file or the tokenizer file; InvalidArgument when a split is shorter than one
// record, when opts.dtype cannot hold the vocabulary, or for a non-empty out_dir without opts.overwrite.
Status ConvertText(const std::vector<std::string>& files, const std::string& out_dir, const TextConvertOptions& opts,
                   TextConvertResult* result = nullptr);

}  // namespace dtrain::data
