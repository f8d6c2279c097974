#pragma once
// `dtrain data`: make and check sharded datasets (docs/data_format.md).
//
//   dtrain data convert-fashion-mnist --src DIR --out DIR [--samples-per-shard N] [--split train|t10k|all]
//       Fashion-MNIST IDX files -> OUT/train and OUT/t10k (one dataset each; default 10000 per shard)
//   dtrain data convert-text --out DIR [--tokenizer PATH] [--val-fraction F] [--dtype auto|uint16|uint32]
//                            [--seq-len L] [--samples-per-shard N] FILES...
//       tokens of FILES (byte-level without --tokenizer), records of L+1 tokens (default L 1024); with F > 0 the
//       last F of the tokens go to OUT/val and the rest to OUT/train
//   dtrain data train-tokenizer --input FILE... --out PREFIX [--vocab-size N] [--model-type bpe|unigram]
//       a SentencePiece model of the text: PREFIX.model and PREFIX.vocab (for convert-text --tokenizer)
//   dtrain data inspect DIR     the manifest: schema, samples, shards
//   dtrain data verify DIR      reads every shard, checks size and CRC32C; DataLoss (exit 2) naming the file
//   dtrain data bench DIR [--threads N] [--batch B] [--batches K] [--prefetch P] [--device cpu|cuda]
//       the loader's samples/s alone (bench/loader.sh compares it with PyTorch's DataLoader)
// Output goes to stdout.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/fashion_mnist.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

struct DataArgs {
  std::string verb, src = data::kFashionMnistDir, out, split = "all", dtype = "auto", device = "cpu";
  std::string tokenizer;            // convert-text
  double val_fraction = 0;          // convert-text
  std::string model_type = "bpe";   // train-tokenizer
  int64_t tokenizer_vocab = 8000;   // train-tokenizer
  std::vector<std::string> inputs;  // train-tokenizer
  std::string format = "auto";      // import-tokens
  int64_t samples_per_shard = -1, seq_len = 1024, threads = 4, batch = 256, batches = 200, prefetch = 4;
  int64_t vocab_size = 50257;    // import-tokens
  bool overwrite = false;        // convert-text, import-tokens: replace a dataset already in --out
  std::vector<std::string> pos;  // FILES of convert-text/import-tokens, DIR of inspect/verify/bench
};

// Registers `data` and its verbs (each with its own flags) on `parent` (launcher/cli_parse.h);
// *out must outlive `parent`. Returns the `data` group.
CLI::App* AddDataCommand(CLI::App* parent, DataArgs* out);

// Runs the parsed command.
Status RunDataCommand(const DataArgs& args);

// Parses the words after `data` as AddDataCommand does, then runs them; --help prints the help.
Status RunData(const std::vector<std::string>& args);

}  // namespace dtrain::launcher
