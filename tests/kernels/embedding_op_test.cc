// Tests of kernels/embedding: exact gathers and scatter-adds, a finite-difference gradient check (f64),
// bad ids and shapes, and CPU-vs-CUDA agreement (the GPU backward is a sorted, fixed-order reduction).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "kernels/embedding.h"
#include "tests/testing/grad_check.h"
#include "tests/testing/half_round.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::RandomVector;

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

std::vector<double> Iota(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return v;
}

// out = table[ids] with ids of shape `ids_shape` (output poisoned with NaN first).
Status RunForward(DeviceContext& ctx, DType dt, const std::vector<int64_t>& ids_shape, const std::vector<double>& ids,
                  int64_t v, int64_t c, const std::vector<double>& table, std::vector<double>* out) {
  std::vector<int64_t> out_shape = ids_shape;
  out_shape.push_back(c);
  Tensor tids, ttable, tout;
  DT_RETURN_IF_ERROR(MakeTensor(ctx, DType::kI32, ids_shape, ids, &tids));
  DT_RETURN_IF_ERROR(MakeTensor(ctx, dt, {v, c}, table, &ttable));
  DT_RETURN_IF_ERROR(MakeTensor(ctx, dt, out_shape, std::vector<double>(ids.size() * c, NAN), &tout));
  const Status st = EmbeddingForward(ctx, tids, ttable, &tout);
  DT_RETURN_IF_ERROR(Fetch(ctx, tout, out));
  return st;
}

// dtable (starting at dtable0) += scatter of dout[N,C] by ids[N].
Status RunBackward(DeviceContext& ctx, DType dt, const std::vector<double>& ids, int64_t v, int64_t c,
                   const std::vector<double>& dout, const std::vector<double>& dtable0, std::vector<double>* dtable) {
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor tids, tdout, tdtable;
  DT_RETURN_IF_ERROR(MakeTensor(ctx, DType::kI32, {n}, ids, &tids));
  DT_RETURN_IF_ERROR(MakeTensor(ctx, dt, {n, c}, dout, &tdout));
  DT_RETURN_IF_ERROR(MakeTensor(ctx, dt, {v, c}, dtable0, &tdtable));
  const Status st = EmbeddingBackward(ctx, tids, tdout, &tdtable);
  DT_RETURN_IF_ERROR(Fetch(ctx, tdtable, dtable));
  return st;
}

TEST(EmbeddingCpu, GathersRowsForAnyIdsShape) {
  auto cpu = Cpu();
  const auto table = Iota(12);  // [4,3]: row r is {3r, 3r+1, 3r+2}
  for (DType dt : {DType::kF32, DType::kF64}) {
    std::vector<double> out;
    DT_ASSERT_OK(RunForward(*cpu, dt, {3}, {2, 0, 2}, 4, 3, table, &out));
    EXPECT_EQ(out, (std::vector<double>{6, 7, 8, 0, 1, 2, 6, 7, 8}));
    DT_ASSERT_OK(RunForward(*cpu, dt, {2, 2}, {3, 1, 0, 3}, 4, 3, table, &out));  // ids [2,2] -> out [2,2,3]
    EXPECT_EQ(out, (std::vector<double>{9, 10, 11, 3, 4, 5, 0, 1, 2, 9, 10, 11}));
  }
}

TEST(EmbeddingCpu, BackwardAccumulatesRepeatedIds) {
  auto cpu = Cpu();
  std::vector<double> dtable;
  // ids {1, 1, 3}: row 1 gets two rows of dout, row 3 one, rows 0 and 2 keep their old values.
  DT_ASSERT_OK(
      RunBackward(*cpu, DType::kF32, {1, 1, 3}, 4, 2, {1, 2, 10, 20, 100, 200}, {5, 5, 5, 5, 5, 5, 5, 5}, &dtable));
  EXPECT_EQ(dtable, (std::vector<double>{5, 5, 16, 27, 5, 5, 105, 205}));
}

// loss = sum(W .* table[ids]); its gradient w.r.t. the table is EmbeddingBackward(ids, W) from zero.
TEST(EmbeddingGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const int64_t v = 6, c = 4;
  const std::vector<double> ids = {5, 0, 2, 5, 5, 1};
  const auto table = RandomVector(v * c, 1), w = RandomVector(ids.size() * c, 2);
  std::vector<double> analytic;
  DT_ASSERT_OK(RunBackward(*cpu, DType::kF64, ids, v, c, w, std::vector<double>(v * c, 0.0), &analytic));
  auto loss = [&](const std::vector<double>& t) {
    std::vector<double> out;
    EXPECT_TRUE(RunForward(*cpu, DType::kF64, {6}, ids, v, c, t, &out).ok());
    return testing::Dot(w, out);
  };
  const auto r = testing::CheckGradient(loss, table, analytic);
  EXPECT_LT(r.max_rel_error, 1e-6) << r.ToString();
}

TEST(Embedding, RejectsBadIdsAndShapes) {
  auto cpu = Cpu();
  std::vector<double> out;
  for (const double bad : {4.0, -1.0}) {
    const Status st = RunForward(*cpu, DType::kF32, {2}, {0, bad}, 4, 3, Iota(12), &out);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(st.message().find("outside [0, 4)"), std::string::npos) << st.ToString();
    EXPECT_TRUE(std::isnan(out[0])) << "nothing is written on a bad id";
    EXPECT_EQ(RunBackward(*cpu, DType::kF32, {bad}, 4, 3, {1, 1, 1}, std::vector<double>(12, 0.0), &out).code(),
              Status::Code::kInvalidArgument);
    EXPECT_EQ(out, std::vector<double>(12, 0.0));
  }
  Tensor ids, table, out34, ids_f32;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {3}, {0, 1, 2}, &ids));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4, 3}, Iota(12), &table));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {3, 4}, std::vector<double>(12, 0.0), &out34));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {3}, {0, 1, 2}, &ids_f32));
  const Status st = EmbeddingForward(*cpu, ids, table, &out34);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[4,3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[3,4]"), std::string::npos) << st.ToString();
  EXPECT_EQ(EmbeddingBackward(*cpu, ids, out34, &table).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(EmbeddingForward(*cpu, ids_f32, table, &out34).code(), Status::Code::kInvalidArgument);  // f32 ids
}

// GPU vs CPU: the forward is a copy (exact); the backward sums repeated ids in fp32 (in position order), so it
// is compared with the f64 reference at max abs err <= 1e-5 * scale. Each id repeats ~20 times here.
TEST(EmbeddingCuda, MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const int64_t n = 1000, v = 50, c = 67;
  std::vector<double> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = (i * 37) % v;
  auto table = RandomVector(v * c, 1), dout = RandomVector(n * c, 2), base = RandomVector(v * c, 3);
  for (auto* vec : {&table, &dout, &base}) {
    for (double& x : *vec) x = static_cast<float>(x);
  }
  std::vector<double> want, got;
  DT_ASSERT_OK(RunForward(*cpu, DType::kF32, {n}, ids, v, c, table, &want));
  DT_ASSERT_OK(RunForward(*gpu, DType::kF32, {n}, ids, v, c, table, &got));
  EXPECT_EQ(got, want);
  DT_ASSERT_OK(RunBackward(*cpu, DType::kF64, ids, v, c, dout, base, &want));
  DT_ASSERT_OK(RunBackward(*gpu, DType::kF32, ids, v, c, dout, base, &got));
  EXPECT_LE(testing::MaxAbsDiff(got, want), 1e-5 * testing::Scale(want));
}

// bf16 rows into a bf16 dtable (bf16 gradients): each entry is the f32-dtable launch's entry rounded to nearest, bit
// for bit, from a bf16-representable base (both add the same f32 sum of the rows, in position order, to it).
TEST(EmbeddingCuda, Bf16DtableIsTheF32DtableRounded) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const int64_t n = 1000, v = 50, c = 67;
  std::vector<double> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = (i * 37) % v;
  auto dout = RandomVector(n * c, 2), base = RandomVector(v * c, 3);
  for (auto* vec : {&dout, &base}) {
    for (double& x : *vec) x = testing::RoundToBf16(x);
  }
  Tensor tids, tdout, f32, b16;
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kI32, {n}, ids, &tids));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kBF16, {n, c}, dout, &tdout));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {v, c}, base, &f32));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kBF16, {v, c}, base, &b16));
  DT_ASSERT_OK(EmbeddingBackward(*gpu, tids, tdout, &f32));
  DT_ASSERT_OK(EmbeddingBackward(*gpu, tids, tdout, &b16));
  std::vector<double> want, got;
  DT_ASSERT_OK(Fetch(*gpu, f32, &want));
  DT_ASSERT_OK(Fetch(*gpu, b16, &got));
  for (double& x : want) x = testing::RoundToBf16(x);
  EXPECT_EQ(got, want);
}

// On the GPU an out-of-range id cannot be an error: forward writes a NaN row, backward skips the id.
TEST(EmbeddingCuda, BadIdsNeverTouchMemoryOutOfBounds) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  std::vector<double> out;
  DT_ASSERT_OK(RunForward(*gpu, DType::kF32, {3}, {1, 4, -1}, 4, 2, Iota(8), &out));
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[1], 3);
  for (int i = 2; i < 6; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
  DT_ASSERT_OK(RunBackward(*gpu, DType::kF32, {1, 4, -1}, 4, 2, {1, 1, 7, 7, 9, 9}, std::vector<double>(8, 0.0), &out));
  EXPECT_EQ(out, (std::vector<double>{0, 0, 1, 1, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace dtrain::ops
