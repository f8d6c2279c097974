#pragma once
// All-reduce benchmark behind `dtrain bench allreduce`: nccl-tests' method and formulas, run on
// dtrain's own Communicator, so that dtrain's collective path can be compared with raw NCCL
// (bench/raw_nccl_allreduce.cu measures the same way; bench/allreduce.sh runs both).
//
// For each size S = min_bytes, min_bytes*factor, ... <= max_bytes (count = S / element size):
//   1. Zero the buffer, run `warmup` in-place sum all-reduces, wait for them, barrier.
//   2. Time `iters` in-place sum all-reduces: CUDA events on the stream for NCCL (enqueue is
//      asynchronous), a steady clock around the blocking calls for MPI. time = elapsed / iters,
//      averaged over ranks (nccl-tests' default, -a 1). Zeros stay zeros, so the values never
//      overflow however many iterations run.
//   3. algbw = S / time; busbw = algbw * 2(n-1)/n — nccl-tests' all_reduce.cu factor: in a ring each
//      rank sends and receives 2(n-1)/n of the data. GB/s are 1e9 bytes per second.
//   4. Check, on fresh data: element i of rank r is (r+1)*(1 + i%3); after one sum all-reduce it must
//      be n(n+1)/2 * (1 + i%3). f32: exact (small integers). bf16: exact while 3n(n+1)/2 <= 256
//      (n <= 12), otherwise within a relative n * 2^-8 (one bf16 rounding per ring hop).
//      #wrong = mismatching elements, summed over ranks.
//
// Threading/ownership: call from the thread that owns `ctx` and the communicators; allocates one
// buffer of max_bytes on ctx's device (plus a pinned host copy on a GPU) for the duration of the call.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/device_context.h"
#include "core/status.h"

namespace dtrain::comm {

struct AllReduceBenchOptions {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t factor = 2;
  int iters = 20;
  int warmup = 5;
  DType dtype = DType::kF32;  // f32 or bf16
};

struct AllReduceBenchRow {
  int64_t bytes = 0;  // S, rounded down to whole elements
  int64_t count = 0;  // elements
  double time_us = 0;
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  int64_t wrong = 0;  // mismatching elements, all ranks
};

// The sizes step 1 visits, after rounding each down to whole elements (sizes below one element are
// skipped, duplicates dropped). InvalidArgument for min > max, factor < 2, non-positive sizes, iters
// < 1, warmup < 0, a dtype other than f32/bf16, or more elements than an int holds (MPI counts).
Status AllReduceBenchSizes(const AllReduceBenchOptions& opts, std::vector<int64_t>* sizes);

// nccl-tests' all-reduce bus factor, 2(n-1)/n (0 for one rank).
double AllReduceBusFactor(int world_size);

// Runs the benchmark. `comm` does the timed all-reduces (NCCL with a CUDA `ctx`, MPI with a CPU one);
// `host_comm` (MPI, may equal `comm`; null for a single process) averages times and sums #wrong.
// Collective: every rank calls it with the same options. `on_row`, if set, sees each row as soon as
// it is measured (rank 0 prints it). Rows are appended to `rows`.
Status RunAllReduceBench(DeviceContext& ctx, comm::Communicator* comm, comm::Communicator* host_comm,
                         const AllReduceBenchOptions& opts, const std::function<void(const AllReduceBenchRow&)>& on_row,
                         std::vector<AllReduceBenchRow>* rows);

// The nccl-tests-like table (bench/raw_nccl_allreduce.cu prints the same columns, so one awk reads
// both): two '#' header lines, then one line per row:
//   size(B) count type redop time(us) algbw(GB/s) busbw(GB/s) #wrong
std::string AllReduceBenchHeader();
std::string FormatAllReduceBenchRow(const AllReduceBenchRow& row, DType dtype);

}  // namespace dtrain::comm
