#include "launcher/data_cmd.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "core/check.h"
#include "core/device_context.h"
#include "data/convert.h"
#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"

namespace dtrain::launcher {
namespace {

constexpr const char* kDataUsage =
    "usage: dtrain data <command> [options]\n"
    "  convert-fashion-mnist --src DIR --out DIR [--samples-per-shard N] [--split train|t10k|all]\n"
    "                        Fashion-MNIST IDX (.gz) -> OUT/train, OUT/t10k (default --src "
    "/usr/share/datasets/fashion-mnist)\n"
    "  convert-text --out DIR [--dtype uint16|uint32] [--seq-len L] [--samples-per-shard N] [--overwrite] FILES...\n"
    "                        byte-level tokens, records of L+1 tokens (default L 1024, uint16); a non-empty\n"
    "                        --out is refused unless --overwrite (which replaces the dataset there)\n"
    "  inspect DIR           print the manifest\n"
    "  verify DIR            check every shard's size and CRC32C\n"
    "  bench DIR [--threads N] [--batch B] [--batches K] [--prefetch P] [--device cpu|cuda]\n"
    "                        loader throughput (samples/s) on this dataset (bench/loader.sh)\n";

struct DataArgs {
  std::string verb, src = data::kFashionMnistDir, out, split = "all", dtype = "uint16", device = "cpu";
  int64_t samples_per_shard = -1, seq_len = 1024, threads = 4, batch = 256, batches = 200, prefetch = 4;
  bool overwrite = false;
  std::vector<std::string> pos;
};

Status ParseInt(const std::string& flag, const std::string& v, int64_t* out) {
  if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos || std::stoll(v) < 1) {
    return Status::InvalidArgument("data: " + flag + " expects a positive integer, got '" + v + "'");
  }
  *out = std::stoll(v);
  return Status::OK();
}

Status Parse(const std::vector<std::string>& args, DataArgs* a) {
  if (args.empty()) return Status::InvalidArgument(std::string("data: expected a command\n") + kDataUsage);
  a->verb = args[0];
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& s = args[i];
    if (s.rfind("--", 0) != 0) {
      a->pos.push_back(s);
      continue;
    }
    if (s == "--overwrite") {  // the one flag without a value
      a->overwrite = true;
      continue;
    }
    if (i + 1 == args.size()) return Status::InvalidArgument("data: " + s + " needs a value");
    const std::string& v = args[++i];
    if (s == "--src") {
      a->src = v;
    } else if (s == "--out") {
      a->out = v;
    } else if (s == "--split") {
      a->split = v;
    } else if (s == "--dtype") {
      a->dtype = v;
    } else if (s == "--samples-per-shard") {
      DT_RETURN_IF_ERROR(ParseInt(s, v, &a->samples_per_shard));
    } else if (s == "--seq-len") {
      DT_RETURN_IF_ERROR(ParseInt(s, v, &a->seq_len));
    } else if (s == "--threads") {
      DT_RETURN_IF_ERROR(ParseInt(s, v, &a->threads));
    } else if (s == "--batch") {
      DT_RETURN_IF_ERROR(ParseInt(s, v, &a->batch));
    } else if (s == "--batches") {
      DT_RETURN_IF_ERROR(ParseInt(s, v, &a->batches));
    } else if (s == "--prefetch") {
      DT_RETURN_IF_ERROR(ParseInt(s, v, &a->prefetch));
    } else if (s == "--device") {
      a->device = v;
    } else {
      return Status::InvalidArgument("data: unknown flag '" + s + "'\n" + kDataUsage);
    }
  }
  return Status::OK();
}

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
  DT_CHECK_ARG(a.dtype == "uint16" || a.dtype == "uint32",
               "data: --dtype must be uint16 or uint32, got '" << a.dtype << "'");
  data::TextConvertOptions o;
  o.dtype = a.dtype == "uint32" ? proto::DatasetSchema::UINT32 : proto::DatasetSchema::UINT16;
  o.seq_len = a.seq_len;
  o.overwrite = a.overwrite;
  if (a.samples_per_shard > 0) o.samples_per_shard = a.samples_per_shard;
  int64_t dropped = 0;
  proto::DatasetManifest m;
  DT_RETURN_IF_ERROR(data::ConvertText(a.pos, a.out, o, &dropped, &m));
  std::printf("%s: %llu records of %lld tokens in %d shards (%lld tail tokens dropped)\n", a.out.c_str(),
              static_cast<unsigned long long>(m.total_samples()), static_cast<long long>(a.seq_len + 1),
              m.shards_size(), static_cast<long long>(dropped));
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

Status RunData(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    std::fputs(kDataUsage, stdout);
    return Status::OK();
  }
  DataArgs a;
  DT_RETURN_IF_ERROR(Parse(args, &a));
  if (a.verb == "convert-fashion-mnist") return ConvertFashion(a);
  if (a.verb == "convert-text") return ConvertText(a);
  if (a.verb == "bench") return Bench(a);
  if (a.verb != "inspect" && a.verb != "verify") {
    return Status::InvalidArgument("data: unknown command '" + a.verb + "'\n" + kDataUsage);
  }
  DT_CHECK_ARG(a.pos.size() == 1, "data " << a.verb << ": expected one dataset DIR");
  std::unique_ptr<data::Dataset> ds;
  DT_RETURN_IF_ERROR(data::Dataset::Open(a.pos[0], /*verify_checksums=*/false, &ds));
  if (a.verb == "inspect") {
    std::fputs(ds->Describe().c_str(), stdout);
    return Status::OK();
  }
  std::vector<std::string> report;
  const Status st = ds->Verify(&report);
  for (const auto& line : report) std::printf("%s\n", line.c_str());
  if (st.ok()) std::printf("%s: all %d shards ok\n", a.pos[0].c_str(), ds->manifest().shards_size());
  return st;
}

}  // namespace dtrain::launcher
