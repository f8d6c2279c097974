// `dtrain bench allreduce`: option parsing, the size sweep, and end to end through the real binary
// under a real mpirun — the printed table is parsed and checked against nccl-tests' formulas
// (algbw = bytes / time, busbw = algbw * 2(n-1)/n) and the benchmark's own correctness check.

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "comm/allreduce_bench.h"
#include "core/device_context.h"
#include "launcher/cli/bench_cmd.h"
#include "tests/testing/subprocess.h"

namespace dtrain::launcher {
namespace {

using testing::DtrainBin;
using testing::ProcessResult;
using testing::RunCommand;

// ---- parsing -----------------------------------------------------------------------------------

TEST(BenchAllreduceArgs, ByteSizesTakeBinarySuffixes) {
  const std::vector<std::pair<std::string, int64_t>> good = {{"8", 8},
                                                             {"512K", 512 << 10},
                                                             {"4kb", 4096},
                                                             {"256M", 256 << 20},
                                                             {"1G", int64_t{1} << 30},
                                                             {"2GiB", int64_t{2} << 30},
                                                             {"100B", 100}};
  for (const auto& [text, want] : good) {
    int64_t got = -1;
    ASSERT_TRUE(ParseByteSize(text, &got).ok()) << text;
    EXPECT_EQ(got, want) << text;
  }
  for (const char* bad : {"", "G", "1T", "-1", "1.5M", "M1", "99999999999999G"}) {
    int64_t got = -1;
    Status st = ParseByteSize(bad, &got);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << "'" << bad << "'";
    EXPECT_EQ(got, -1) << bad;
  }
}

TEST(BenchAllreduceArgs, DefaultsAndOverrides) {
  AllReduceBenchArgs a;
  ASSERT_TRUE(ParseAllreduceBenchArgs({}, &a).ok());
  EXPECT_EQ(a.bench.min_bytes, 8);
  EXPECT_EQ(a.bench.max_bytes, int64_t{1} << 30);
  EXPECT_EQ(a.bench.factor, 2);
  EXPECT_EQ(a.bench.iters, 20);
  EXPECT_EQ(a.bench.warmup, 5);
  EXPECT_EQ(a.bench.dtype, DType::kF32);
  EXPECT_EQ(a.backend, "");
  EXPECT_FALSE(a.help);
  ASSERT_TRUE(ParseAllreduceBenchArgs({"--min-bytes", "1K", "--max-bytes=64M", "--factor", "4", "--iters=3", "--warmup",
                                       "0", "--dtype", "bf16", "--backend=mpi"},
                                      &a)
                  .ok());
  EXPECT_EQ(a.bench.min_bytes, 1024);
  EXPECT_EQ(a.bench.max_bytes, 64 << 20);
  EXPECT_EQ(a.bench.factor, 4);
  EXPECT_EQ(a.bench.iters, 3);
  EXPECT_EQ(a.bench.warmup, 0);
  EXPECT_EQ(a.bench.dtype, DType::kBF16);
  EXPECT_EQ(a.backend, "mpi");
}

TEST(BenchAllreduceArgs, BadValuesNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {{{"--dtype", "f16"}, "--dtype"},
                                                                               {{"--backend", "gloo"}, "--backend"},
                                                                               {{"--iters", "0"}, "--iters"},
                                                                               {{"--iters", "many"}, "--iters"},
                                                                               {{"--warmup", "-1"}, "--warmup"},
                                                                               {{"--factor", "1"}, "--factor"},
                                                                               {{"--min-bytes", "2G"}, "--min-bytes"},
                                                                               {{"--max-bytes", "3X"}, "--max-bytes"},
                                                                               {{"--max-bytes", "16G"}, "--max-bytes"},
                                                                               {{"--bogus", "1"}, "--bogus"},
                                                                               {{"--iters"}, "--iters"},
                                                                               {{"extra"}, "extra"}};
  for (const auto& [args, flag] : cases) {
    AllReduceBenchArgs a;
    Status st = ParseAllreduceBenchArgs(args, &a);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << flag;
    EXPECT_NE(st.message().find(flag), std::string::npos) << st.message();
  }
}

TEST(AllReduceBenchSizes, SweepRoundsToWholeElementsAndStopsAtMax) {
  comm::AllReduceBenchOptions o;
  std::vector<int64_t> s;
  ASSERT_TRUE(comm::AllReduceBenchSizes(o, &s).ok());
  ASSERT_EQ(s.size(), 28u);  // 2^3 .. 2^30
  EXPECT_EQ(s.front(), 8);
  EXPECT_EQ(s.back(), int64_t{1} << 30);
  o.min_bytes = 6;
  o.max_bytes = 100;
  o.factor = 3;  // 6, 18, 54 -> whole f32 elements: 4, 16, 52
  ASSERT_TRUE(comm::AllReduceBenchSizes(o, &s).ok());
  EXPECT_EQ(s, (std::vector<int64_t>{4, 16, 52}));
  o.dtype = DType::kBF16;
  o.min_bytes = 1;  // below one element: skipped
  o.max_bytes = 16;
  o.factor = 2;
  ASSERT_TRUE(comm::AllReduceBenchSizes(o, &s).ok());
  EXPECT_EQ(s, (std::vector<int64_t>{2, 4, 8, 16}));
}

TEST(AllReduceBenchSizes, BusFactorIsNcclTests) {
  EXPECT_EQ(comm::AllReduceBusFactor(1), 0.0);
  EXPECT_EQ(comm::AllReduceBusFactor(2), 1.0);
  EXPECT_EQ(comm::AllReduceBusFactor(8), 1.75);
}

// ---- end to end --------------------------------------------------------------------------------

struct Row {
  int64_t bytes = 0, count = 0, wrong = -1;
  std::string type, op;
  double time_us = 0, algbw = 0, busbw = 0;
};

// The table rows of a run's output: lines of exactly 8 fields starting with a number.
std::vector<Row> ParseRows(const std::string& out) {
  std::vector<Row> rows;
  std::stringstream ss(out);
  std::string line;
  while (std::getline(ss, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    for (std::string w; ls >> w;) f.push_back(w);
    if (f.size() != 8 || f[0].find_first_not_of("0123456789") != std::string::npos) continue;
    Row r;
    r.bytes = std::stoll(f[0]);
    r.count = std::stoll(f[1]);
    r.type = f[2];
    r.op = f[3];
    r.time_us = std::stod(f[4]);
    r.algbw = std::stod(f[5]);
    r.busbw = std::stod(f[6]);
    r.wrong = std::stoll(f[7]);
    rows.push_back(r);
  }
  return rows;
}

std::string Mpirun(int np) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np " + std::to_string(np) +
         " --oversubscribe ";
}

// Checks every row of a run over `world` ranks: sizes from 8 B doubling to `max_bytes`, whole
// elements, no wrong results, and nccl-tests' formulas within the printed precision (2 decimals).
void CheckTable(const ProcessResult& r, int world, int64_t max_bytes, int elem, const std::string& type) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nranks " + std::to_string(world)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# Out of bounds values : 0 OK"), std::string::npos) << r.output;
  const std::vector<Row> rows = ParseRows(r.output);
  ASSERT_EQ(rows.size(), static_cast<size_t>(std::log2(static_cast<double>(max_bytes) / 8) + 1)) << r.output;
  const double factor = 2.0 * (world - 1) / world;
  int64_t bytes = 8;
  for (const Row& row : rows) {
    SCOPED_TRACE(std::to_string(row.bytes) + " B");
    EXPECT_EQ(row.bytes, bytes);
    EXPECT_EQ(row.count, bytes / elem);
    EXPECT_EQ(row.type, type);
    EXPECT_EQ(row.op, "sum");
    EXPECT_EQ(row.wrong, 0);
    EXPECT_GT(row.time_us, 0);
    const double algbw = row.bytes / (row.time_us * 1e3);  // GB/s = 1e9 B/s
    // Printed with 2 decimals: algbw off by <= 0.005, time by <= 0.005 us (relative 0.005 / time).
    EXPECT_NEAR(row.algbw, algbw, 0.006 + algbw * (0.006 / row.time_us + 0.001));
    EXPECT_NEAR(row.busbw, row.algbw * factor, 0.006 + 0.01 * row.busbw);
    bytes *= 2;
  }
}

TEST(BenchAllreduceE2E, TwoMpiRanksF32TableFollowsNcclTestsFormulas) {
  ProcessResult r = RunCommand("DTRAIN_LOG_LEVEL=warn " + Mpirun(2) + DtrainBin() +
                               " bench allreduce --backend mpi --max-bytes 1M --iters 3 --warmup 1");
  CheckTable(r, 2, 1 << 20, 4, "float");
}

TEST(BenchAllreduceE2E, TwoMpiRanksBf16) {
  ProcessResult r = RunCommand("DTRAIN_LOG_LEVEL=warn " + Mpirun(2) + DtrainBin() +
                               " bench allreduce --backend mpi --dtype bf16 --max-bytes 64K --iters 2 --warmup 1");
  CheckTable(r, 2, 64 << 10, 2, "bfloat16");
}

TEST(BenchAllreduceE2E, OneProcessHasZeroBusBandwidth) {
  // Without mpirun: a one-rank MPI world, where nothing crosses a wire (busbw factor 0).
  ProcessResult r =
      RunCommand("DTRAIN_LOG_LEVEL=warn " + DtrainBin() + " bench allreduce --backend mpi --max-bytes 256 --iters 2");
  CheckTable(r, 1, 256, 4, "float");
}

TEST(BenchAllreduceE2E, BadInputsGiveOneLineErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench allreduce --dtype f16", "dtrain bench allreduce: error: --dtype: expected f32|bf16, got 'f16'\n"},
      {"bench allreduce --max-bytes 3X",
       "dtrain bench allreduce: error: --max-bytes: '3X' is not a byte size (examples: 8, 512K, 256M, 1G)\n"},
      {"bench nope", "dtrain bench: error: unknown command 'nope' (expected one of: allreduce)\n"},
  };
  for (const auto& [args, line] : cases) {
    ProcessResult r = RunCommand(DtrainBin() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output, line);
  }
}

TEST(BenchAllreduceE2E, NcclBackendOnTheGpus) {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) {
    ProcessResult r = RunCommand(DtrainBin() + " bench allreduce --backend nccl");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("needs a GPU"), std::string::npos) << r.output;
    GTEST_SKIP() << "no CUDA device: checked only that --backend nccl fails with a clear error";
  }
  const int np = gpus >= 2 ? 2 : 1;
  ProcessResult r = RunCommand("DTRAIN_LOG_LEVEL=warn NCCL_NVLS_ENABLE=0 " + Mpirun(np) + DtrainBin() +
                               " bench allreduce --backend nccl --max-bytes 16M --iters 5 --warmup 2");
  CheckTable(r, np, 16 << 20, 4, "float");
  EXPECT_NE(r.output.find("backend nccl"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dtrain::launcher
