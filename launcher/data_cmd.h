#pragma once
// `dtrain data`: make and check sharded datasets (docs/data_format.md).
//
//   dtrain data convert-fashion-mnist --src DIR --out DIR [--samples-per-shard N] [--split train|t10k|all]
//       Fashion-MNIST IDX files -> OUT/train and OUT/t10k (one dataset each; default 10000 per shard)
//   dtrain data convert-text --out DIR [--dtype uint16|uint32] [--seq-len L] [--samples-per-shard N] FILES...
//       byte-level tokens of FILES, records of L+1 tokens (default L 1024)
//   dtrain data inspect DIR     the manifest: schema, samples, shards
//   dtrain data verify DIR      reads every shard, checks size and CRC32C; DataLoss (exit 2) naming the file
//   dtrain data bench DIR [--threads N] [--batch B] [--batches K] [--prefetch P] [--device cpu|cuda]
//       the loader's samples/s alone (bench/loader.sh compares it with PyTorch's DataLoader)
// Output goes to stdout.

#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::launcher {

Status RunData(const std::vector<std::string>& args);

}  // namespace dtrain::launcher
