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
  proto::DatasetSchema::TokenDType dtype = proto::DatasetSchema::UINT16;
  int64_t seq_len = 1024;  // tokens per record = seq_len + 1 (inputs and next-token targets)
  int64_t samples_per_shard = 4096;
  bool overwrite = false;  // move aside what is already in out_dir (see PrepareDatasetDir)
};

// Makes `out_dir` ready for a new dataset, never deleting anything: an out_dir that holds (or is) one of `inputs`
// is refused (InvalidArgument, --overwrite or not: the conversion would replace its own input); otherwise OK when
// it does not exist or is empty; otherwise InvalidArgument ("... is not empty ... --overwrite") unless `overwrite`,
// which moves the whole directory aside to "<out_dir>.replaced-<UTC time>" (core/file_guard.h MoveAside) and
// says where in *note (optional; "" when nothing moved).
Status PrepareDatasetDir(const std::string& out_dir, bool overwrite, const std::vector<std::string>& inputs = {},
                         std::string* note = nullptr);

// Byte-level tokens (each byte one token, vocab 256) of `files`, concatenated in order, cut into
// records of seq_len + 1 tokens with a stride of seq_len (consecutive records share one token, so
// every next-token pair of the stream is in some record). The tail shorter than a record is
// dropped; `*dropped_tokens` (optional) says how many. NotFound / IoError name the file (with the
// errno reason); InvalidArgument for a directory or an unreadable file given as input, when the text
// is shorter than one record, or for a non-empty out_dir without opts.overwrite.
Status ConvertText(const std::vector<std::string>& files, const std::string& out_dir, const TextConvertOptions& opts,
                   int64_t* dropped_tokens = nullptr, proto::DatasetManifest* manifest = nullptr);

}  // namespace dtrain::data
