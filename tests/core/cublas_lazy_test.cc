// core/cublas_lazy.h: cuBLAS and cuBLASLt are loaded on first use, not at process start. Needs no GPU: the version
// queries and symbol lookups run against the toolkit's real libraries.

#if DT_HAVE_CUDA
#include "core/cublas_lazy.h"
#endif

#include <gtest/gtest.h>

#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain {
namespace {

#if DT_HAVE_CUDA

TEST(CublasLazy, VersionQueriesReachTheRealLibrariesOfTheBuildsMajorVersion) {
  int major = -1;
  ASSERT_EQ(DT_CUBLAS(cublasGetProperty)(MAJOR_VERSION, &major), CUBLAS_STATUS_SUCCESS);  // libcublas
  EXPECT_EQ(major, CUBLAS_VER_MAJOR);
  EXPECT_EQ(static_cast<int>(DT_CUBLAS(cublasLtGetVersion)() / 10000), CUBLAS_VER_MAJOR);  // libcublasLt
  EXPECT_EQ(cublas_lazy::LoadError("cublasLtMatmul"), "");
}

TEST(CublasLazy, RenamedFunctionsResolveUnderTheirRealNames) {
  EXPECT_STREQ(DT_CUBLAS_NAME(cublasCreate), "cublasCreate_v2");  // cublas_v2.h's #define
  EXPECT_NE(cublas_lazy::Symbol("cublasCreate_v2"), nullptr);
  EXPECT_NE(cublas_lazy::Symbol("cublasLtMatmul"), nullptr);
}

TEST(CublasLazy, AMissingFunctionFailsWithNotInitializedInsteadOfCrashing) {
  using Fn = cublasStatus_t (*)(int);
  const Fn f = cublas_lazy::Resolve<Fn>("cublasLtNoSuchFunctionAnywhere");
  EXPECT_EQ(f(1), CUBLAS_STATUS_NOT_INITIALIZED);
  using Text = const char* (*)(cublasStatus_t);
  EXPECT_EQ(cublas_lazy::Resolve<Text>("cublasNoSuchStatusString")(CUBLAS_STATUS_SUCCESS), nullptr);
}

// The point of it all: a dtrain process that runs no GEMM never maps libcublas (its start cost ~0.65 s of CPU).
TEST(CublasLazy, TheBinaryStartsWithoutLoadingCublas) {
  const auto r = testing::RunCommand("LD_DEBUG=files " + testing::DtrainBin() + " version");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("libcudart"), std::string::npos) << "LD_DEBUG printed no library loads:\n" << r.output;
  EXPECT_EQ(r.output.find("libcublas"), std::string::npos) << r.output;
}

#else

TEST(CublasLazy, NeedsACudaBuild) { GTEST_SKIP() << "a CPU-only build (DT_HAVE_CUDA=0) has no cuBLAS"; }

#endif

}  // namespace
}  // namespace dtrain
