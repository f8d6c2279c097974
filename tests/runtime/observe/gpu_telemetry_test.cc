// GpuTelemetry: NVML absent -> one clear Unavailable line; on a GPU, samples with plausible values per window.

#include "runtime/observe/gpu_telemetry.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#if DT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dtrain::runtime {
namespace {

bool HaveNvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) dlclose(lib);
  return lib != nullptr;
}

TEST(GpuTelemetry, WithoutNvmlStartIsUnavailableWithOneLine) {
  if (HaveNvml()) GTEST_SKIP() << "NVML is installed here (the GPU case below covers it)";
  std::unique_ptr<GpuTelemetry> t;
  const Status st = GpuTelemetry::Start("0000:00:00.0", 1.0, &t);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(), "GPU telemetry off: NVML (libnvidia-ml.so.1, part of the NVIDIA driver) not found");
  EXPECT_EQ(t, nullptr);
}

TEST(GpuTelemetryCuda, SamplesTheGpuOfThisProcess) {
#if DT_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA GPU visible";
  char bus[32];
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus, sizeof(bus), 0), cudaSuccess);
  std::unique_ptr<GpuTelemetry> t;
  const Status st = GpuTelemetry::Start(bus, 0.05, &t);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const GpuWindow w = t->TakeWindow();
  EXPECT_GE(w.samples, 4);
  EXPECT_GE(w.util_pct, 0);
  EXPECT_LE(w.util_pct, 100);
  EXPECT_GT(w.mem_total_mib, 1000);
  EXPECT_GT(w.mem_used_mib, 0);
  EXPECT_LE(w.mem_used_mib, w.mem_total_mib);
  EXPECT_GT(w.temp_c, 0);
  EXPECT_GT(w.sm_clock_mhz, 0);
  EXPECT_GT(w.power_w, 0);
  // A new window starts empty of the old samples and fills again.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const GpuWindow w2 = t->TakeWindow();
  EXPECT_GE(w2.samples, 1);
  EXPECT_LT(w2.samples, w.samples + 4);
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace dtrain::runtime
