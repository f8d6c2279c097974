#include "launcher/cli/data_cmd.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/check.h"
#include "core/device_context.h"
#include "data/convert.h"
#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "data/import_tokens.h"
#include "data/loader.h"
#include "data/sentencepiece_tokenizer.h"
#include "launcher/cli_parse.h"

namespace dtrain::launcher {
namespace {

Status ConvertFashion(const DataArgs& a) {
  DT_CHECK_ARG(!a.out.empty(), "data convert-fashion-mnist: --out DIR is required");
  DT_CHECK_ARG(a.split == "all" || a.split == "train" || a.split == "t10k",
               "data: --split must be train, t10k or all, got '" << a.split << "'");
  for (const std::string split : {"train", "t10k"}) {
    if (a.split != "all" && a.split != split) continue;
    proto::DatasetManifest m;
    const std::string dir = a.out + "/" + split;
    DT_RETURN_IF_ERROR(
        data::ConvertFashionMnist(a.src, split, dir, a.samples_per_shard > 0 ? a.samples_per_shard : 10000, 0, &m));
    std::printf("%s: %llu samples in %d shards\n", dir.c_str(), static_cast<unsigned long long>(m.total_samples()),
                m.shards_size());
  }
  return Status::OK();
}

Status ConvertText(const DataArgs& a) {
  DT_CHECK_ARG(!a.out.empty(), "data convert-text: --out DIR is required");
  DT_CHECK_ARG(!a.pos.empty(), "data convert-text: no input FILES");
  data::TextConvertOptions o;
  o.tokenizer = a.tokenizer;
  o.dtype = a.dtype == "uint32"   ? proto::DatasetSchema::UINT32
            : a.dtype == "uint16" ? proto::DatasetSchema::UINT16
                                  : proto::DatasetSchema::TOKEN_DTYPE_UNSPECIFIED;
  o.seq_len = a.seq_len;
  o.val_fraction = a.val_fraction;
  o.overwrite = a.overwrite;
  if (a.samples_per_shard > 0) o.samples_per_shard = a.samples_per_shard;
  data::TextConvertResult r;
  DT_RETURN_IF_ERROR(data::ConvertText(a.pos, a.out, o, &r));
  const auto& s = r.schema;
  std::printf("%s: %lld %s tokens (vocab %lld, %s)", a.out.c_str(), static_cast<long long>(r.tokens),
              s.tokenizer().kind().c_str(), static_cast<long long>(s.vocab_size()),
              s.token_dtype() == proto::DatasetSchema::UINT32 ? "uint32" : "uint16");
  if (a.val_fraction > 0) {
    std::printf(" -> %s/train %lld and %s/val %lld records", a.out.c_str(), static_cast<long long>(r.train_records),
                a.out.c_str(), static_cast<long long>(r.val_records));
  } else {
    std::printf(" -> %lld records", static_cast<long long>(r.train_records));
  }
  std::printf(" of %lld tokens (%lld tail tokens dropped)\n", static_cast<long long>(a.seq_len + 1),
              static_cast<long long>(r.dropped_tokens));
  return Status::OK();
}

Status TrainTokenizer(const DataArgs& a) {
  data::SentencePieceTrainOptions o;
  o.inputs = a.inputs;
  o.out_prefix = a.out;
  o.vocab_size = a.tokenizer_vocab;
  o.model_type = a.model_type;
  o.threads = a.threads;
  DT_RETURN_IF_ERROR(data::TrainSentencePiece(o));
  std::printf(
      "%s.model, %s.vocab: SentencePiece %s, %lld pieces (use: dtrain data convert-text --tokenizer %s.model)\n",
      a.out.c_str(), a.out.c_str(), a.model_type.c_str(), static_cast<long long>(a.tokenizer_vocab), a.out.c_str());
  return Status::OK();
}

Status ImportTokens(const DataArgs& a) {
  DT_CHECK_ARG(!a.out.empty(), "data import-tokens: --out DIR is required");
  DT_CHECK_ARG(!a.pos.empty(), "data import-tokens: no input FILES");
  data::ImportTokensOptions o;
  o.format = a.format;
  o.seq_len = a.seq_len;
  o.vocab_size = a.vocab_size;
  o.overwrite = a.overwrite;
  if (a.samples_per_shard > 0) o.samples_per_shard = a.samples_per_shard;
  int64_t dropped = 0;
  proto::DatasetManifest m;
  DT_RETURN_IF_ERROR(data::ImportTokens(a.pos, a.out, o, &dropped, &m));
  std::printf("%s: %llu records of %lld tokens (vocab %lld) in %d shards (%lld tail tokens dropped)\n", a.out.c_str(),
              static_cast<unsigned long long>(m.total_samples()), static_cast<long long>(a.seq_len + 1),
              static_cast<long long>(a.vocab_size), m.shards_size(), static_cast<long long>(dropped));
  return Status::OK();
}

// Loader alone: `batches` batches after 10 warm-up ones; on CUDA each batch ends in device memory
// and the compute stream is synchronized at the end (the copies are part of the time).
Status Bench(const DataArgs& a) {
  DT_CHECK_ARG(a.pos.size() == 1, "data bench: expected one dataset DIR");
  DT_CHECK_ARG(a.device == "cpu" || a.device == "cuda", "data: --device must be cpu or cuda, got '" << a.device << "'");
  std::unique_ptr<DeviceContext> ctx;
  if (a.device == "cuda") {
    DT_RETURN_IF_ERROR(DeviceContext::CreateCuda(0, &ctx));
  } else {
    DT_RETURN_IF_ERROR(DeviceContext::CreateCpu(&ctx));
  }
  data::LoaderOptions o;
  o.dataset_dir = a.pos[0];
  o.batch_size = a.batch;
  o.num_threads = static_cast<int>(a.threads);
  o.prefetch_depth = static_cast<int>(a.prefetch);
  o.remainder = data::RemainderPolicy::kPad;
  std::unique_ptr<data::Loader> loader;
  DT_RETURN_IF_ERROR(data::Loader::Create(o, ctx.get(), &loader));
  data::Batch b;
  for (int i = 0; i < 10; ++i) DT_RETURN_IF_ERROR(loader->Next(&b));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < a.batches; ++i) DT_RETURN_IF_ERROR(loader->Next(&b));
  DT_RETURN_IF_ERROR(ctx->Synchronize());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("dtrain loader: device %s threads %lld batch %lld batches %lld: %.0f samples/s (%.3f s)\n",
              a.device.c_str(), static_cast<long long>(a.threads), static_cast<long long>(a.batch),
              static_cast<long long>(a.batches), static_cast<double>(a.batches * a.batch) / s, s);
  return Status::OK();
}

}  // namespace

CLI::App* AddDataCommand(CLI::App* parent, DataArgs* a) {
  *a = DataArgs();
  CLI::App* data = parent->add_subcommand("data", "make and check sharded datasets (docs/data_format.md)");
  data->footer("example: dtrain data verify data/fmnist/train\n");
  auto verb = [data, a](const char* name, const char* help, const char* example) {
    CLI::App* app = data->add_subcommand(name, help);
    app->footer(std::string("example: ") + example + "\n");
    app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    const std::string v = name;
    app->preparse_callback([a, v](size_t) { a->verb = v; });
    return app;
  };
  auto count = [](CLI::App* app, const char* flag, int64_t* target, const char* help) {
    app->add_option(flag, *target, help)->type_name("N")->check(PositiveInt());
  };

  CLI::App* fm = verb("convert-fashion-mnist", "Fashion-MNIST IDX (.gz) -> OUT/train, OUT/t10k",
                      "dtrain data convert-fashion-mnist --out data/fmnist --samples-per-shard 5000");
  fm->add_option("--src", a->src, "directory of the IDX files (default /usr/share/datasets/fashion-mnist)")
      ->type_name("DIR");
  fm->add_option("--out", a->out, "output directory (required)")->type_name("DIR");
  count(fm, "--samples-per-shard", &a->samples_per_shard, "samples per shard (default 10000)");
  fm->add_option("--split", a->split, "which split (default all)")
      ->type_name("train|t10k|all")
      ->check(OneOf({"train", "t10k", "all"}));

  CLI::App* text = verb("convert-text", "tokens of FILES (byte-level, or --tokenizer's), records of L+1 tokens",
                        "dtrain data convert-text --tokenizer tok.model --val-fraction 0.1 --out data/tokens "
                        "--seq-len 256 corpus/*.txt");
  text->add_option("--out", a->out, "output directory (required); with --val-fraction it holds train/ and val/")
      ->type_name("DIR");
  text->add_option("--tokenizer", a->tokenizer,
                   "tokenizer.json, vocab.json (merges.txt beside it), a SentencePiece .model, or a directory "
                   "holding one (default: one token per byte)")
      ->type_name("PATH");
  text->add_option("--val-fraction", a->val_fraction,
                   "the last F of the tokens make OUT/val, the rest OUT/train (default 0: OUT alone)")
      ->type_name("F")
      ->check([](const std::string& v) {
        char* end = nullptr;
        const double f = std::strtod(v.c_str(), &end);
        return (!v.empty() && *end == '\0' && f >= 0 && f < 1) ? std::string()
                                                               : "expected a fraction in [0, 1), got '" + v + "'";
      });
  text->add_option("--dtype", a->dtype, "token type (default auto: uint16 when the vocabulary fits, else uint32)")
      ->type_name("auto|uint16|uint32")
      ->check(OneOf({"auto", "uint16", "uint32"}));
  count(text, "--seq-len", &a->seq_len, "tokens per record minus one (default 1024)");
  count(text, "--samples-per-shard", &a->samples_per_shard, "records per shard");
  text->add_flag("--overwrite", a->overwrite,
                 "move a non-empty --out aside to DIR.replaced-<time> and write anew (else it is refused); an --out "
                 "that holds an input is always refused");
  text->add_option("FILES", a->pos, "input text files");

  CLI::App* tt = verb("train-tokenizer", "a SentencePiece model (BPE or unigram) of text files: PREFIX.model",
                      "dtrain data train-tokenizer --input corpus.txt --vocab-size 8000 --out tok");
  tt->add_option("--input", a->inputs, "text files, one sentence per line (required)")
      ->type_name("FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->expected(1, -1);
  tt->add_option("--out", a->out, "writes PREFIX.model and PREFIX.vocab; existing ones are refused (required)")
      ->type_name("PREFIX");
  count(tt, "--vocab-size", &a->tokenizer_vocab, "pieces, with <unk> <s> </s> and 256 byte pieces (default 8000)");
  tt->add_option("--model-type", a->model_type, "SentencePiece's algorithm (default bpe)")
      ->type_name("bpe|unigram")
      ->check(OneOf({"bpe", "unigram"}));
  count(tt, "--threads", &a->threads, "trainer threads (default 4)");

  CLI::App* imp = verb("import-tokens",
                       "token files of nanoGPT (raw uint16) or llm.c (.bin shards) -> a token dataset, records of L+1",
                       "dtrain data import-tokens --out data/owt --seq-len 1024 owt/train.bin");
  imp->add_option("--out", a->out, "output directory (required)")->type_name("DIR");
  imp->add_option("--format", a->format, "input format (default auto: llm.c when its header is there, else raw)")
      ->type_name("auto|raw|llmc")
      ->check(OneOf({"auto", "raw", "llmc"}));
  count(imp, "--seq-len", &a->seq_len, "tokens per record minus one (default 1024)");
  count(imp, "--vocab-size", &a->vocab_size, "every token must be below it (default 50257, GPT-2's BPE)");
  count(imp, "--samples-per-shard", &a->samples_per_shard, "records per shard");
  imp->add_flag("--overwrite", a->overwrite,
                "move a non-empty --out aside to DIR.replaced-<time> and write anew (else it is refused); an --out "
                "that holds an input is always refused");
  imp->add_option("FILES", a->pos, "token files, read in order as one stream");

  verb("inspect", "print the manifest", "dtrain data inspect data/fmnist/train")
      ->add_option("DIR", a->pos, "a dataset directory");
  verb("verify", "check every shard's size and CRC32C", "dtrain data verify data/fmnist/train")
      ->add_option("DIR", a->pos, "a dataset directory");

  CLI::App* bench = verb("bench", "loader throughput (samples/s) on this dataset (bench/loader.sh)",
                         "dtrain data bench data/fmnist/train --threads 8 --batch 512");
  bench->add_option("DIR", a->pos, "a dataset directory");
  count(bench, "--threads", &a->threads, "reader threads (default 4)");
  count(bench, "--batch", &a->batch, "batch size (default 256)");
  count(bench, "--batches", &a->batches, "timed batches (default 200)");
  count(bench, "--prefetch", &a->prefetch, "batches in flight (default 4)");
  bench->add_option("--device", a->device, "where batches end (default cpu)")
      ->type_name("cpu|cuda")
      ->check(OneOf({"cpu", "cuda"}));
  return data;
}

Status RunData(const std::vector<std::string>& args) {
  DataArgs a;
  std::vector<std::string> words = {"data"};
  words.insert(words.end(), args.begin(), args.end());
  ParseResult r;
  DT_RETURN_IF_ERROR(ParseWithCli([&a](CLI::App* root) { AddDataCommand(root, &a); }, words, &r));
  if (r.help) {
    std::fputs(r.help_text.c_str(), stdout);
    return Status::OK();
  }
  return RunDataCommand(a);
}

Status RunDataCommand(const DataArgs& a) {
  if (a.verb == "convert-fashion-mnist") return ConvertFashion(a);
  if (a.verb == "convert-text") return ConvertText(a);
  if (a.verb == "train-tokenizer") return TrainTokenizer(a);
  if (a.verb == "import-tokens") return ImportTokens(a);
  if (a.verb == "bench") return Bench(a);
  if (a.verb != "inspect" && a.verb != "verify") {
    return Status::InvalidArgument("data: unknown command '" + a.verb + "'");
  }
  DT_CHECK_ARG(a.pos.size() == 1, "data " << a.verb << ": expected one dataset DIR");
  std::unique_ptr<data::Dataset> ds;
  DT_RETURN_IF_ERROR(data::Dataset::Open(a.pos[0], /*verify_checksums=*/false, &ds));
  if (a.verb == "inspect") {
    std::fputs(ds->Describe().c_str(), stdout);
    return Status::OK();
  }
  std::vector<std::string> report;
  const Status st = ds->Verify(&report, /*check_tokens=*/true);
  for (const auto& line : report) std::printf("%s\n", line.c_str());
  if (st.ok()) std::printf("%s: all %d shards ok\n", a.pos[0].c_str(), ds->manifest().shards_size());
  return st;
}

}  // namespace dtrain::launcher
