#include "comm/allreduce_bench.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>

#include "core/bf16.h"
#include "core/check.h"
#include "core/nvtx.h"
#if DT_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_handles.h"
#endif

namespace dtrain::comm {
namespace {

// Element i of rank r before the check all-reduce, and the expected sum over n ranks.
double CheckInput(int rank, int64_t i) { return (rank + 1.0) * static_cast<double>(1 + i % 3); }
double CheckExpected(int n, int64_t i) { return n * (n + 1) / 2.0 * static_cast<double>(1 + i % 3); }

void FillCheckInput(int rank, Tensor* host) {
  const int64_t n = host->numel();
  if (host->dtype() == DType::kF32) {
    float* p = host->data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(CheckInput(rank, i));
  } else {
    auto* p = static_cast<uint16_t*>(host->data());
    for (int64_t i = 0; i < n; ++i) p[i] = RoundBf16Rne(static_cast<float>(CheckInput(rank, i)));
  }
}

int64_t CountWrong(int world, const Tensor& host) {
  const int64_t n = host.numel();
  int64_t wrong = 0;
  if (host.dtype() == DType::kF32) {
    const float* p = host.data<float>();
    for (int64_t i = 0; i < n; ++i) wrong += p[i] != static_cast<float>(CheckExpected(world, i));
  } else {
    const auto* p = static_cast<const uint16_t*>(host.data());
    const double rel = 3.0 * world * (world + 1) / 2 <= 256 ? 0.0 : world * std::ldexp(1.0, -8);
    for (int64_t i = 0; i < n; ++i) {
      const double want = CheckExpected(world, i);
      wrong += !(std::fabs(Bf16BitsToF32(p[i]) - want) <= rel * want);
    }
  }
  return wrong;
}

// Sums `v` over ranks (no-op without a host communicator).
Status SumOverRanks(comm::Communicator* host_comm, std::vector<double>* v) {
  if (host_comm == nullptr || host_comm->world_size() == 1) return Status::OK();
  Tensor t = Tensor::Wrap(v->data(), {static_cast<int64_t>(v->size())}, DType::kF64, DeviceType::kCPU);
  return host_comm->AllReduce(&t, comm::ReduceOp::kSum, nullptr);
}

Status Barrier(DeviceContext& ctx, comm::Communicator* host_comm) {
  // The warm-up collectives are done on this rank, then on every rank.
  DT_RETURN_IF_ERROR(ctx.Synchronize());
  if (host_comm != nullptr) DT_RETURN_IF_ERROR(host_comm->Barrier());
  return Status::OK();
}

// Seconds per all-reduce of `buf`, over `iters` back-to-back calls.
Status TimeAllReduces(DeviceContext& ctx, comm::Communicator* comm, Tensor* buf, int iters, double* seconds) {
  DT_NVTX_RANGE("bench_allreduce_timed");
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    CudaEvent start, stop;
    DT_RETURN_IF_ERROR(CudaEvent::Create(&start, /*timing=*/true));
    DT_RETURN_IF_ERROR(CudaEvent::Create(&stop, /*timing=*/true));
    DT_RETURN_IF_ERROR(start.Record(ctx.stream()));
    for (int i = 0; i < iters; ++i) DT_RETURN_IF_ERROR(comm->AllReduce(buf, comm::ReduceOp::kSum, ctx.stream()));
    DT_RETURN_IF_ERROR(stop.Record(ctx.stream()));
    DT_RETURN_IF_ERROR(stop.Synchronize());  // host sync: the measurement needs the work done
    float ms = 0;
    DT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    *seconds = 1e-3 * ms / iters;
    return Status::OK();
#endif
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) DT_RETURN_IF_ERROR(comm->AllReduce(buf, comm::ReduceOp::kSum, ctx.stream()));
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  return Status::OK();
}

}  // namespace

Status AllReduceBenchSizes(const AllReduceBenchOptions& o, std::vector<int64_t>* sizes) {
  // User-facing (the CLI flags), so plain messages rather than DT_CHECK_ARG's file:line.
  auto bad = [](const std::string& msg) { return Status::InvalidArgument(msg); };
  const int64_t elem = static_cast<int64_t>(DTypeSize(o.dtype));
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16) {
    return bad(std::string("--dtype ") + DTypeName(o.dtype) + ": the benchmark runs f32 or bf16");
  }
  if (o.min_bytes <= 0) return bad("--min-bytes must be positive, got " + std::to_string(o.min_bytes));
  if (o.min_bytes > o.max_bytes) {
    return bad("--min-bytes " + std::to_string(o.min_bytes) + " exceeds --max-bytes " + std::to_string(o.max_bytes));
  }
  if (o.factor < 2) return bad("--factor must be at least 2, got " + std::to_string(o.factor));
  if (o.iters < 1) return bad("--iters must be at least 1, got " + std::to_string(o.iters));
  if (o.warmup < 0) return bad("--warmup must not be negative, got " + std::to_string(o.warmup));
  if (o.max_bytes / elem > INT_MAX) {
    return bad("--max-bytes " + std::to_string(o.max_bytes) + " is more than " + std::to_string(INT_MAX) +
               " elements (MPI's count limit)");
  }
  sizes->clear();
  for (int64_t s = o.min_bytes;; s *= o.factor) {
    const int64_t rounded = s / elem * elem;
    if (rounded > 0 && (sizes->empty() || sizes->back() != rounded)) sizes->push_back(rounded);
    if (s > o.max_bytes / o.factor) break;  // the next size would pass max (or overflow)
  }
  return Status::OK();
}

double AllReduceBusFactor(int world_size) { return world_size > 0 ? 2.0 * (world_size - 1) / world_size : 0.0; }

Status RunAllReduceBench(DeviceContext& ctx, comm::Communicator* comm, comm::Communicator* host_comm,
                         const AllReduceBenchOptions& opts, const std::function<void(const AllReduceBenchRow&)>& on_row,
                         std::vector<AllReduceBenchRow>* rows) {
  std::vector<int64_t> sizes;
  DT_RETURN_IF_ERROR(AllReduceBenchSizes(opts, &sizes));
  DT_CHECK_ARG(comm != nullptr, "no communicator");
  DT_CHECK_ARG(comm->device_type() == ctx.type(), comm::BackendName(comm->backend())
                                                      << " communicator on a " << DeviceName(ctx.type()) << " context");
  const int rank = comm->rank(), world = comm->world_size();
  const int64_t elem = static_cast<int64_t>(DTypeSize(opts.dtype));
  const int64_t max_count = sizes.back() / elem;
  Tensor buf, host;
  DT_RETURN_IF_ERROR(Tensor::Empty({max_count}, opts.dtype, ctx.allocator(), &buf));
  if (ctx.is_cuda()) DT_RETURN_IF_ERROR(Tensor::Empty({max_count}, opts.dtype, ctx.pinned_allocator(), &host));

  for (const int64_t bytes : sizes) {
    AllReduceBenchRow row;
    row.bytes = bytes;
    row.count = bytes / elem;
    Tensor t;
    DT_RETURN_IF_ERROR(buf.View(0, {row.count}, &t));
    // 1. Warm-up on zeros, then line the ranks up.
    DT_RETURN_IF_ERROR(t.SetZero(ctx.stream()));
    for (int i = 0; i < opts.warmup; ++i) DT_RETURN_IF_ERROR(comm->AllReduce(&t, comm::ReduceOp::kSum, ctx.stream()));
    DT_RETURN_IF_ERROR(Barrier(ctx, host_comm));
    // 2. Timed loop.
    double seconds = 0;
    DT_RETURN_IF_ERROR(TimeAllReduces(ctx, comm, &t, opts.iters, &seconds));
    // 4. Check on fresh data (on the CPU the buffer itself is host memory).
    Tensor h = t;
    if (ctx.is_cuda()) DT_RETURN_IF_ERROR(host.View(0, {row.count}, &h));
    FillCheckInput(rank, &h);
    if (ctx.is_cuda()) DT_RETURN_IF_ERROR(t.CopyFrom(h, ctx.stream()));
    DT_RETURN_IF_ERROR(comm->AllReduce(&t, comm::ReduceOp::kSum, ctx.stream()));
    if (ctx.is_cuda()) DT_RETURN_IF_ERROR(h.CopyFrom(t, ctx.stream()));
    DT_RETURN_IF_ERROR(ctx.Synchronize());  // the result must be on the host before it is read
    std::vector<double> v = {seconds, static_cast<double>(CountWrong(world, h))};
    DT_RETURN_IF_ERROR(SumOverRanks(host_comm, &v));
    // 3. Bandwidths from the rank-averaged time.
    const int ranks = host_comm != nullptr ? host_comm->world_size() : 1;
    row.time_us = 1e6 * v[0] / ranks;
    row.wrong = static_cast<int64_t>(v[1]);
    row.algbw_gbs = row.time_us > 0 ? static_cast<double>(bytes) / (row.time_us * 1e3) : 0.0;
    row.busbw_gbs = row.algbw_gbs * AllReduceBusFactor(world);
    if (on_row) on_row(row);
    rows->push_back(row);
  }
  return Status::OK();
}

std::string AllReduceBenchHeader() {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "#%11s  %12s  %8s  %6s  %9s  %7s  %7s  %7s\n#%11s  %12s  %8s  %6s  %9s  %7s  %7s\n",
                "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "(B)", "(elements)", "", "",
                "(us)", "(GB/s)", "(GB/s)");
  return buf;
}

std::string FormatAllReduceBenchRow(const AllReduceBenchRow& r, DType dtype) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%12lld  %12lld  %8s  %6s  %9.2f  %7.2f  %7.2f  %7lld\n",
                static_cast<long long>(r.bytes), static_cast<long long>(r.count),
                dtype == DType::kBF16 ? "bfloat16" : "float", "sum", r.time_us, r.algbw_gbs, r.busbw_gbs,
                static_cast<long long>(r.wrong));
  return buf;
}

}  // namespace dtrain::comm
