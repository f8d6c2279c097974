#include "launcher/cli/bench_cmd.h"

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "comm/dist_env.h"
#include "core/check.h"
#include "core/device_context.h"
#include "core/logging.h"
#include "launcher/cli_parse.h"

namespace dtrain::launcher {
namespace {

constexpr const char* kBenchFooter =
    "In-place sum all-reduce from --min-bytes to --max-bytes, nccl-tests style: time per call, algbw =\n"
    "bytes/time, busbw = algbw * 2(n-1)/n, and a check of every result. One process per GPU, started\n"
    "by the process manager (not by `dtrain launch`).\n"
    "\n"
    "example: mpirun -np 8 dtrain bench allreduce --dtype bf16 --max-bytes 256M\n";

std::string CheckByteSize(const std::string& v) {
  int64_t n = 0;
  const Status st = ParseByteSize(v, &n);
  return st.ok() ? "" : st.message();
}

std::string CheckInt(const std::string& v, int64_t lo, int64_t hi) {
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != v.size()) return "expects an integer, got '" + v + "'";
  if (n < lo || n > hi) return v + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return "";
}

Status PickContext(const std::string& backend, int local_rank, std::unique_ptr<DeviceContext>* ctx) {
  if (backend == "mpi") return DeviceContext::CreateCpu(ctx);
  const int gpus = CudaDeviceCount();
  if (gpus == 0) {
    return Status::Unavailable(
        "bench allreduce: --backend nccl needs a GPU and none is visible (run `dtrain "
        "doctor`, or use --backend mpi)");
  }
  return DeviceContext::CreateCuda(local_rank % gpus, ctx);
}

}  // namespace

Status ParseByteSize(const std::string& text, int64_t* bytes) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = -1;
  if (suffix.empty() || suffix == "B") shift = 0;
  if (suffix == "K" || suffix == "KB" || suffix == "KIB") shift = 10;
  if (suffix == "M" || suffix == "MB" || suffix == "MIB") shift = 20;
  if (suffix == "G" || suffix == "GB" || suffix == "GIB") shift = 30;
  if (i == 0 || i > 15 || shift < 0) {
    return Status::InvalidArgument("'" + text + "' is not a byte size (examples: 8, 512K, 256M, 1G)");
  }
  const int64_t v = std::stoll(text.substr(0, i));  // at most 15 digits: no overflow here
  if (v > (INT64_MAX >> shift)) return Status::InvalidArgument("byte size '" + text + "' is too large");
  *bytes = v << shift;
  return Status::OK();
}

CLI::App* AddBenchCommand(CLI::App* parent, AllReduceBenchArgs* out) {
  *out = AllReduceBenchArgs();
  CLI::App* bench = parent->add_subcommand("bench", "benchmarks (run under mpirun -np N)");
  bench->footer("example: mpirun -np 8 dtrain bench allreduce\n");
  CLI::App* app = bench->add_subcommand("allreduce", "all-reduce bandwidth, nccl-tests style");
  app->footer(kBenchFooter);
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto& b = out->bench;
  auto bytes = [app](const char* name, int64_t* target, const char* help) {
    app->add_option_function<std::string>(
           name, [target](const std::string& v) { (void)ParseByteSize(v, target); }, help)
        ->type_name("N")
        ->check(CheckByteSize);
  };
  bytes("--min-bytes", &b.min_bytes, "smallest size (default 8); K/M/G suffixes are powers of 1024");
  bytes("--max-bytes", &b.max_bytes, "largest size (default 1G)");
  app->add_option("--factor", b.factor, "size multiplier between rows (default 2)")
      ->type_name("F")
      ->check([](const std::string& v) { return CheckInt(v, INT64_MIN, INT64_MAX); });
  app->add_option("--iters", b.iters, "timed all-reduces per size (default 20)")
      ->type_name("N")
      ->check([](const std::string& v) { return CheckInt(v, 0, 1000000); });
  app->add_option("--warmup", b.warmup, "untimed all-reduces per size first (default 5)")
      ->type_name("N")
      ->check([](const std::string& v) { return CheckInt(v, 0, 1000000); });
  app->add_option_function<std::string>(
         "--dtype", [out](const std::string& v) { out->bench.dtype = v == "bf16" ? DType::kBF16 : DType::kF32; },
         "element type (default f32)")
      ->type_name("f32|bf16")
      ->check(OneOf({"f32", "bf16"}));
  app->add_option("--backend", out->backend,
                  "nccl: each rank's GPU (by local rank); mpi: Open MPI on the CPU (default nccl when a GPU is "
                  "visible, else mpi)")
      ->type_name("nccl|mpi")
      ->check(OneOf({"nccl", "mpi"}));
  app->callback([out] {
    std::vector<int64_t> sizes;
    const Status st = comm::AllReduceBenchSizes(out->bench, &sizes);
    if (!st.ok()) FailParse(st.message());
  });
  return app;
}

Status ParseAllreduceBenchArgs(const std::vector<std::string>& args, AllReduceBenchArgs* out) {
  std::vector<std::string> words = {"bench", "allreduce"};
  words.insert(words.end(), args.begin(), args.end());
  ParseResult r;
  const Status st = ParseWithCli([out](CLI::App* root) { AddBenchCommand(root, out); }, words, &r);
  out->help = r.help;
  return st;
}

Status RunAllreduceBench(int* argc, char*** argv, AllReduceBenchArgs a) {
  comm::DistEnv env;
  DT_RETURN_IF_ERROR(comm::DetectDistEnv(&env));
  // Both backends need MPI: the CPU path reduces over it, NCCL shares its ncclUniqueId over it (a
  // lone process gets a one-rank MPI world). The session outlives the communicators below.
  std::unique_ptr<comm::MpiSession> mpi;
  DT_RETURN_IF_ERROR(comm::MpiSession::Init(argc, argv, &mpi));
  if (mpi->world_size() != env.world_size) {
    return Status::InvalidArgument("the environment says world size " + std::to_string(env.world_size) + " (" +
                                   env.source + ") but the MPI world has " + std::to_string(mpi->world_size()) +
                                   " process(es): run the benchmark under mpirun or srun --mpi=pmix");
  }
  log::Init(mpi->rank());
  if (a.backend.empty()) a.backend = CudaDeviceCount() > 0 ? "nccl" : "mpi";

  std::unique_ptr<DeviceContext> ctx;
  DT_RETURN_IF_ERROR(PickContext(a.backend, mpi->local_rank(), &ctx));
  // The MPI communicator reduces on the CPU path and averages times across ranks on both; a lone
  // NCCL process needs none (and so runs in a build without MPI too).
  std::unique_ptr<comm::Communicator> host_comm, nccl_comm;
  if (a.backend == "mpi" || mpi->world_size() > 1) {
    DT_RETURN_IF_ERROR(comm::CreateCommunicator(comm::Backend::kMpi, {}, &host_comm));
  }
  comm::Communicator* comm = host_comm.get();
  if (a.backend == "nccl") {
    comm::CommOptions opts;
    opts.device = ctx->device_index();
    DT_RETURN_IF_ERROR(comm::CreateCommunicator(comm::Backend::kNccl, opts, &nccl_comm));
    comm = nccl_comm.get();
  }
  const bool print = mpi->rank() == 0;
  const auto& o = a.bench;
  if (print) {
    std::printf("# dtrain bench allreduce: backend %s, nranks %d, dtype %s, sum in place, warmup %d, iters %d\n",
                a.backend.c_str(), mpi->world_size(), DTypeName(o.dtype), o.warmup, o.iters);
    std::printf("# busbw = algbw * 2(n-1)/n = algbw * %.4f (nccl-tests); time averaged over ranks\n#\n",
                comm::AllReduceBusFactor(mpi->world_size()));
    std::fputs(comm::AllReduceBenchHeader().c_str(), stdout);
    std::fflush(stdout);
  }
  DT_LOG_INFO(kRuntime, "bench allreduce: rank {}/{} (local {}) on {}{}", mpi->rank(), mpi->world_size(),
              mpi->local_rank(), DeviceName(ctx->type()),
              ctx->is_cuda() ? ":" + std::to_string(ctx->device_index()) : "");
  std::vector<comm::AllReduceBenchRow> rows;
  Status st = comm::RunAllReduceBench(
      *ctx, comm, host_comm.get(), o,
      [&](const comm::AllReduceBenchRow& r) {
        if (!print) return;
        std::fputs(comm::FormatAllReduceBenchRow(r, o.dtype).c_str(), stdout);
        std::fflush(stdout);
      },
      &rows);
  if (!st.ok()) {
    if (nccl_comm) (void)nccl_comm->Abort();  // release peers still waiting in a collective
    return st.WithContext("rank " + std::to_string(mpi->rank()));
  }
  double busbw_sum = 0;
  int64_t wrong = 0;
  for (const auto& r : rows) {
    busbw_sum += r.busbw_gbs;
    wrong += r.wrong;
  }
  if (print) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.3f\n", rows.empty() ? 0.0 : busbw_sum / rows.size());
    std::fflush(stdout);
  }
  if (wrong != 0) {
    return Status::Internal("bench allreduce: " + std::to_string(wrong) +
                            " element(s) of all-reduce results were wrong (see the #wrong column)");
  }
  return Status::OK();
}

}  // namespace dtrain::launcher
