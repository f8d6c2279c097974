// raw_nccl_allreduce: the reference for `dtrain bench allreduce` — a minimal nccl-tests-style loop on
// bare NCCL, measured exactly as dtrain measures itself (comm/allreduce_bench.h), so that
// bench/allreduce.sh can put dtrain's busbw next to raw NCCL's from the same job and machine.
//
//   mpirun -np 8 raw_nccl_allreduce [--min-bytes 8] [--max-bytes 1G] [--factor 2] [--iters 20]
//                                   [--warmup 5] [--dtype f32|bf16]
//
// Per rank: MPI bootstrap (rank 0's ncclUniqueId over MPI_Bcast), GPU = node-local rank % GPUs, one
// non-blocking stream. Per size: zero the buffer, `warmup` in-place ncclAllReduce(sum), stream sync,
// MPI_Barrier; then CUDA events around `iters` in-place all-reduces; time = elapsed / iters averaged
// over ranks; algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests). Check on fresh data:
// element i of rank r is (r+1)*(1+i%3), the sum must be n(n+1)/2*(1+i%3) (bf16: relative n*2^-8
// once 3n(n+1)/2 > 256). Rank 0 prints the same table columns as dtrain. A standalone tool, so
// errors print and MPI_Abort (unlike dtrain's library code).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#define CUDA_CHECK(cmd)                                                           \
  do {                                                                            \
    cudaError_t e_ = (cmd);                                                       \
    if (e_ != cudaSuccess) Die(__FILE__, __LINE__, #cmd, cudaGetErrorString(e_)); \
  } while (0)
#define NCCL_CHECK(cmd)                                                           \
  do {                                                                            \
    ncclResult_t r_ = (cmd);                                                      \
    if (r_ != ncclSuccess) Die(__FILE__, __LINE__, #cmd, ncclGetErrorString(r_)); \
  } while (0)
#define MPI_CHECK(cmd)                                                 \
  do {                                                                 \
    int m_ = (cmd);                                                    \
    if (m_ != MPI_SUCCESS) Die(__FILE__, __LINE__, #cmd, "MPI error"); \
  } while (0)

namespace {

[[noreturn]] void Die(const char* file, int line, const char* what, const char* why) {
  std::fprintf(stderr, "raw_nccl_allreduce: %s:%d: %s: %s\n", file, line, what, why);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

// ---- kernels --------------------------------------------------------------------------------

__device__ float CheckValue(double factor, int64_t i) { return static_cast<float>(factor * (1 + i % 3)); }

template <typename T>
__device__ T FromFloat(float v);
template <>
__device__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ float ToFloat(float v) { return v; }
__device__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

// x[i] = (rank+1) * (1 + i%3)
template <typename T>
__global__ void FillKernel(T* x, int64_t n, int rank) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = FromFloat<T>(CheckValue(rank + 1.0, i));
  }
}

// wrong += #{i : |x[i] - n(n+1)/2 * (1 + i%3)| > rel * expected}
template <typename T>
__global__ void CheckKernel(const T* x, int64_t n, int world, float rel, unsigned long long* wrong) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float want = CheckValue(world * (world + 1) / 2.0, i);
    local += !(fabsf(ToFloat(x[i]) - want) <= rel * want);
  }
  if (local != 0) atomicAdd(wrong, local);
}

// ---- host -----------------------------------------------------------------------------------

struct Options {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t factor = 2;
  int iters = 20;
  int warmup = 5;
  bool bf16 = false;
};

int64_t ParseBytes(const char* flag, const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = -1;
  if (suffix.empty() || suffix == "B") shift = 0;
  if (suffix == "K" || suffix == "KB" || suffix == "KIB") shift = 10;
  if (suffix == "M" || suffix == "MB" || suffix == "MIB") shift = 20;
  if (suffix == "G" || suffix == "GB" || suffix == "GIB") shift = 30;
  const long long v = (i == 0 || i > 15) ? -1 : std::stoll(text.substr(0, i));
  if (v < 0 || shift < 0 || v > (LLONG_MAX >> shift)) {
    std::fprintf(stderr, "raw_nccl_allreduce: %s: '%s' is not a byte size\n", flag, text.c_str());
    std::exit(2);
  }
  return static_cast<int64_t>(v) << shift;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "raw_nccl_allreduce: %s needs a value\n", flag.c_str());
      std::exit(2);
    }
    const std::string v = argv[++i];
    if (flag == "--min-bytes") {
      o.min_bytes = ParseBytes("--min-bytes", v);
    } else if (flag == "--max-bytes") {
      o.max_bytes = ParseBytes("--max-bytes", v);
    } else if (flag == "--factor") {
      o.factor = std::atoll(v.c_str());
    } else if (flag == "--iters") {
      o.iters = std::atoi(v.c_str());
    } else if (flag == "--warmup") {
      o.warmup = std::atoi(v.c_str());
    } else if (flag == "--dtype" && (v == "f32" || v == "bf16")) {
      o.bf16 = v == "bf16";
    } else {
      std::fprintf(stderr, "raw_nccl_allreduce: bad option %s %s\n", flag.c_str(), v.c_str());
      std::exit(2);
    }
  }
  if (o.min_bytes < 1 || o.min_bytes > o.max_bytes || o.factor < 2 || o.iters < 1 || o.warmup < 0) {
    std::fprintf(stderr, "raw_nccl_allreduce: need 1 <= min-bytes <= max-bytes, factor >= 2, iters >= 1\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_CHECK(MPI_Init(&argc, &argv));
  const Options o = ParseArgs(argc, argv);
  int rank = 0, world = 1, local = 0, gpus = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local));
  MPI_CHECK(MPI_Comm_free(&node));
  CUDA_CHECK(cudaGetDeviceCount(&gpus));
  if (gpus == 0) Die(__FILE__, __LINE__, "cudaGetDeviceCount", "no GPU visible");
  CUDA_CHECK(cudaSetDevice(local % gpus));

  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));

  const int64_t elem = o.bf16 ? 2 : 4;
  const ncclDataType_t type = o.bf16 ? ncclBfloat16 : ncclFloat32;
  void* buf = nullptr;
  unsigned long long* wrong_dev = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, o.max_bytes / elem * elem));
  CUDA_CHECK(cudaMalloc(&wrong_dev, sizeof(unsigned long long)));
  const double bus_factor = 2.0 * (world - 1) / world;
  const float rel = 3.0 * world * (world + 1) / 2 <= 256 || !o.bf16 ? 0.0f : world / 256.0f;

  if (rank == 0) {
    std::printf("# raw_nccl_allreduce: NCCL %d.%d.%d, nranks %d, dtype %s, sum in place, warmup %d, iters %d\n",
                NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, world, o.bf16 ? "bf16" : "f32", o.warmup, o.iters);
    std::printf("# busbw = algbw * 2(n-1)/n = algbw * %.4f (nccl-tests); time averaged over ranks\n#\n", bus_factor);
    std::printf("#%11s  %12s  %8s  %6s  %9s  %7s  %7s  %7s\n#%11s  %12s  %8s  %6s  %9s  %7s  %7s\n", "size", "count",
                "type", "redop", "time", "algbw", "busbw", "#wrong", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
                "(GB/s)");
    std::fflush(stdout);
  }
  long long total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0;
  int64_t last = 0;
  for (int64_t s = o.min_bytes;; s *= o.factor) {
    const int64_t count = s / elem, bytes = count * elem;
    if (count > 0 && bytes != last) {
      last = bytes;
      // Warm-up on zeros, then line the ranks up.
      CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes, stream));
      for (int i = 0; i < o.warmup; ++i) NCCL_CHECK(ncclAllReduce(buf, buf, count, type, ncclSum, comm, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      // Timed loop: events on the stream around `iters` back-to-back in-place all-reduces.
      CUDA_CHECK(cudaEventRecord(start, stream));
      for (int i = 0; i < o.iters; ++i) NCCL_CHECK(ncclAllReduce(buf, buf, count, type, ncclSum, comm, stream));
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      // Check on fresh data.
      const int threads = 256;
      const int blocks = static_cast<int>(std::min<int64_t>((count + threads - 1) / threads, 4096));
      if (o.bf16) {
        FillKernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(buf), count, rank);
      } else {
        FillKernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(buf), count, rank);
      }
      CUDA_CHECK(cudaGetLastError());
      NCCL_CHECK(ncclAllReduce(buf, buf, count, type, ncclSum, comm, stream));
      CUDA_CHECK(cudaMemsetAsync(wrong_dev, 0, sizeof(unsigned long long), stream));
      if (o.bf16) {
        CheckKernel<<<blocks, threads, 0, stream>>>(static_cast<const __nv_bfloat16*>(buf), count, world, rel,
                                                    wrong_dev);
      } else {
        CheckKernel<<<blocks, threads, 0, stream>>>(static_cast<const float*>(buf), count, world, rel, wrong_dev);
      }
      CUDA_CHECK(cudaGetLastError());
      unsigned long long wrong_local = 0;
      CUDA_CHECK(cudaMemcpyAsync(&wrong_local, wrong_dev, sizeof(wrong_local), cudaMemcpyDeviceToHost, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      double v[2] = {1e-3 * ms / o.iters, static_cast<double>(wrong_local)};
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
      const double time_us = 1e6 * v[0] / world;
      const double algbw = time_us > 0 ? bytes / (time_us * 1e3) : 0.0;
      total_wrong += static_cast<long long>(v[1]);
      busbw_sum += algbw * bus_factor;
      ++rows;
      if (rank == 0) {
        std::printf("%12lld  %12lld  %8s  %6s  %9.2f  %7.2f  %7.2f  %7lld\n", static_cast<long long>(bytes),
                    static_cast<long long>(count), o.bf16 ? "bfloat16" : "float", "sum", time_us, algbw,
                    algbw * bus_factor, static_cast<long long>(v[1]));
        std::fflush(stdout);
      }
    }
    if (s > o.max_bytes / o.factor) break;
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", total_wrong, total_wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.3f\n", rows > 0 ? busbw_sum / rows : 0.0);
  }
  CUDA_CHECK(cudaFree(wrong_dev));
  CUDA_CHECK(cudaFree(buf));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaStreamDestroy(stream));
  NCCL_CHECK(ncclCommDestroy(comm));
  MPI_CHECK(MPI_Finalize());
  return total_wrong == 0 ? 0 : 1;
}
