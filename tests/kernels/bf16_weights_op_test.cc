// The kernels that read bf16 master weights directly (train.master_weights bf16): RMSNorm with a bf16 weight beside
// bf16 x (kernels/rmsnorm.h) and the embedding lookup of a bf16 table into bf16 rows (kernels/embedding.h). Their
// reference is the f32-weight path with the same weights widened (exact), which they must equal bit for bit on CUDA:
// forward y and rstd, backward dx and dweight, rows. bf16 activations exist on CUDA only: the CPU refuses bf16 weights.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "kernels/embedding.h"
#include "kernels/rmsnorm.h"
#include "tests/testing/grad_check.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::FetchBf16Bits;
using testing::MakeTensor;
using testing::MakeTensorAt;
using testing::RandomVector;

TEST(Bf16Weights, CpuRefusesBf16Weights) {
  std::unique_ptr<DeviceContext> cpu;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&cpu));
  Tensor x, w16, y, rstd, table16, ids, rows;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 8}, RandomVector(16, 1), &x));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kBF16, {8}, RandomVector(8, 2), &w16));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 8}, std::vector<double>(16, 0.0), &y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2}, std::vector<double>(2, 0.0), &rstd));
  EXPECT_EQ(RmsNormForward(*cpu, x, w16, 1e-5f, &y, &rstd).code(), Status::Code::kInvalidArgument);
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kBF16, {4, 8}, RandomVector(32, 3), &table16));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {2}, {1.0, 3.0}, &ids));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kBF16, {2, 8}, std::vector<double>(16, 0.0), &rows));
  EXPECT_EQ(EmbeddingForward(*cpu, ids, table16, &rows).code(), Status::Code::kInvalidArgument);
}

class Bf16WeightsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::dtrain::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: bf16-weight kernels need a GPU";
    DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu_));
  }
  std::vector<uint16_t> Bits(const Tensor& t) {
    std::vector<uint16_t> b;
    EXPECT_TRUE(FetchBf16Bits(*gpu_, t, &b).ok());
    return b;
  }
  std::vector<double> Values(const Tensor& t) {
    std::vector<double> v;
    EXPECT_TRUE(Fetch(*gpu_, t, &v).ok());
    return v;
  }
  std::unique_ptr<DeviceContext> gpu_;
};

// Rows held in registers (C = 64, 2048), the vectorised and scalar general paths (C = 4096, C = 30), and a weight one
// element into its allocation (unaligned: the scalar fallback).
TEST_F(Bf16WeightsCuda, RmsNormWithBf16WeightEqualsTheWidenedF32Weight) {
  const int64_t n = 37;
  for (int64_t c : {64, 30, 2048, 4096}) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "C " << c << " offset " << offset);
      Tensor x, dy, w16, w32, y16, y32, r16, r32, dx16, dx32, dw16, dw32;
      DT_ASSERT_OK(MakeTensor(*gpu_, DType::kBF16, {n, c}, RandomVector(n * c, 10 + c), &x));
      DT_ASSERT_OK(MakeTensor(*gpu_, DType::kBF16, {n, c}, RandomVector(n * c, 20 + c), &dy));
      DT_ASSERT_OK(MakeTensorAt(*gpu_, DType::kBF16, {c}, RandomVector(c, 30 + c, 0.5, 1.5), offset, &w16));
      DT_ASSERT_OK(MakeTensorAt(*gpu_, DType::kF32, {c}, Values(w16), offset, &w32));  // exact: bf16 values
      for (Tensor* t : {&y16, &y32, &dx16, &dx32}) {
        DT_ASSERT_OK(MakeTensor(*gpu_, DType::kBF16, {n, c}, RandomVector(n * c, 40), t));  // dx accumulates
      }
      for (Tensor* t : {&r16, &r32}) DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, {n}, std::vector<double>(n, 0), t));
      for (Tensor* t : {&dw16, &dw32}) DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, {c}, RandomVector(c, 50), t));
      DT_ASSERT_OK(RmsNormForward(*gpu_, x, w16, 1e-5f, &y16, &r16));
      DT_ASSERT_OK(RmsNormForward(*gpu_, x, w32, 1e-5f, &y32, &r32));
      EXPECT_EQ(Bits(y16), Bits(y32));
      EXPECT_EQ(Values(r16), Values(r32));
      DT_ASSERT_OK(RmsNormBackward(*gpu_, x, w16, r16, dy, &dx16, &dw16, /*accumulate_dx=*/true));
      DT_ASSERT_OK(RmsNormBackward(*gpu_, x, w32, r32, dy, &dx32, &dw32, /*accumulate_dx=*/true));
      EXPECT_EQ(Bits(dx16), Bits(dx32));
      EXPECT_EQ(Values(dw16), Values(dw32));
    }
  }
}

TEST_F(Bf16WeightsCuda, EmbeddingOfABf16TableCopiesItsRows) {
  const int64_t v = 50;
  for (int64_t c : {64, 12}) {  // 128-bit rows, and the scalar path
    SCOPED_TRACE(::testing::Message() << "C " << c);
    Tensor table16, table32, ids, rows16, rows32;
    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kBF16, {v, c}, RandomVector(v * c, 5), &table16));
    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, {v, c}, Values(table16), &table32));
    const std::vector<double> id = {3, 0, 49, 3, 17, 8, 22};
    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kI32, {7}, id, &ids));
    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kBF16, {7, c}, std::vector<double>(7 * c, 0.0), &rows16));
    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kBF16, {7, c}, std::vector<double>(7 * c, 0.0), &rows32));
    DT_ASSERT_OK(EmbeddingForward(*gpu_, ids, table16, &rows16));
    DT_ASSERT_OK(EmbeddingForward(*gpu_, ids, table32, &rows32));
    const std::vector<uint16_t> got = Bits(rows16), table = Bits(table16);
    EXPECT_EQ(got, Bits(rows32));
    for (size_t i = 0; i < id.size(); ++i) {
      for (int64_t j = 0; j < c; ++j) {
        EXPECT_EQ(got[i * c + j], table[static_cast<int64_t>(id[i]) * c + j]) << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::ops
