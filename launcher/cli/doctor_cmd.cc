#include "launcher/cli/doctor_cmd.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/check.h"
#include "core/device_context.h"
#include "core/random.h"
#include "kernels/matmul.h"
#if DT_HAVE_CUDA
#include <nccl.h>

#include "core/cuda_lib_check.h"
#include "core/cuda_handles.h"
#endif
#if DT_HAVE_MPI
#include <mpi.h>
#endif

namespace dtrain::launcher {
namespace {

void Line(const char* what, const std::string& value) { std::printf("  %-22s %s\n", what, value.c_str()); }

[[maybe_unused]] std::string VersionString(int v, int major_div, int minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div);
}

// C = A @ B^T for a 256x512 @ (384x512)^T product on `gpu`, compared with the CPU reference.
[[maybe_unused]] Status CheckGemm(int gpu, double* rel_err, double* tflops) {  // used by CUDA builds
  constexpr int64_t kM = 256, kN = 384, kK = 512;
  std::unique_ptr<DeviceContext> cpu, dev;
  DT_RETURN_IF_ERROR(DeviceContext::CreateCpu(&cpu));
  DT_RETURN_IF_ERROR(DeviceContext::CreateCuda(gpu, &dev));
  Tensor a, b, c_ref, da, db, dc, c_dev;
  DT_RETURN_IF_ERROR(Tensor::Empty({kM, kK}, DType::kF32, cpu->allocator(), &a));
  DT_RETURN_IF_ERROR(Tensor::Empty({kN, kK}, DType::kF32, cpu->allocator(), &b));
  DT_RETURN_IF_ERROR(Tensor::Empty({kM, kN}, DType::kF32, cpu->allocator(), &c_ref));
  DT_RETURN_IF_ERROR(Tensor::Empty({kM, kN}, DType::kF32, cpu->allocator(), &c_dev));
  SplitMix64 rng(7);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = static_cast<float>(rng.Uniform() - 0.5);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = static_cast<float>(rng.Uniform() - 0.5);
  DT_RETURN_IF_ERROR(ops::Matmul(*cpu, a, false, b, true, &c_ref));
  DT_RETURN_IF_ERROR(Tensor::Empty({kM, kK}, DType::kF32, dev->allocator(), &da));
  DT_RETURN_IF_ERROR(Tensor::Empty({kN, kK}, DType::kF32, dev->allocator(), &db));
  DT_RETURN_IF_ERROR(Tensor::Empty({kM, kN}, DType::kF32, dev->allocator(), &dc));
  DT_RETURN_IF_ERROR(da.CopyFrom(a, dev->stream()));
  DT_RETURN_IF_ERROR(db.CopyFrom(b, dev->stream()));
  DT_RETURN_IF_ERROR(ops::Matmul(*dev, da, false, db, true, &dc));  // warm-up (handle, heuristics)
  DT_RETURN_IF_ERROR(dev->Synchronize());
#if DT_HAVE_CUDA
  constexpr int kReps = 50;
  CudaEvent t0, t1;
  DT_RETURN_IF_ERROR(CudaEvent::Create(&t0, /*timing=*/true));
  DT_RETURN_IF_ERROR(CudaEvent::Create(&t1, /*timing=*/true));
  DT_RETURN_IF_ERROR(t0.Record(dev->stream()));
  for (int i = 0; i < kReps; ++i) DT_RETURN_IF_ERROR(ops::Matmul(*dev, da, false, db, true, &dc));
  DT_RETURN_IF_ERROR(t1.Record(dev->stream()));
  DT_RETURN_IF_ERROR(dev->Synchronize());
  float ms = 0;
  DT_CUDA_CHECK(cudaEventElapsedTime(&ms, t0.get(), t1.get()));
  *tflops = 2.0 * kM * kN * kK * kReps / (ms * 1e-3) / 1e12;
#endif
  DT_RETURN_IF_ERROR(c_dev.CopyFrom(dc, dev->stream()));
  DT_RETURN_IF_ERROR(dev->Synchronize());
  double num = 0, den = 0;
  for (int64_t i = 0; i < c_ref.numel(); ++i) {
    const double d = c_dev.data<float>()[i] - c_ref.data<float>()[i];
    num += d * d;
    den += static_cast<double>(c_ref.data<float>()[i]) * c_ref.data<float>()[i];
  }
  *rel_err = std::sqrt(num / den);
  return Status::OK();
}

}  // namespace

CLI::App* AddDoctorCommand(CLI::App* parent) {
  CLI::App* app = parent->add_subcommand("doctor", "check driver, CUDA, cuBLAS, cuDNN, NCCL, MPI and the GPUs");
  app->footer("example: dtrain doctor\n");
  return app;
}

Status RunDoctor() {
  std::printf("dtrain doctor\n");
  bool broken = false;
#if DT_HAVE_MPI
  {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string s(lib, len);
    Line("MPI", s.substr(0, s.find_first_of(",\n")));
  }
#else
  Line("MPI", "not built (DT_WITH_MPI=OFF)");
#endif
#if DT_HAVE_CUDA
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  Line("CUDA runtime", VersionString(runtime, 1000, 10));
  Line("CUDA driver", driver == 0 ? std::string("none (no NVIDIA driver loaded)") : VersionString(driver, 1000, 10));
  int cublas_ver = 0;
  cublasGetProperty(MAJOR_VERSION, &cublas_ver);
  int cublas_minor = 0, cublas_patch = 0;
  cublasGetProperty(MINOR_VERSION, &cublas_minor);
  cublasGetProperty(PATCH_LEVEL, &cublas_patch);
  Line("cuBLAS", std::to_string(cublas_ver) + "." + std::to_string(cublas_minor) + "." + std::to_string(cublas_patch));
  const size_t cudnn = cudnnGetVersion();
  Line("cuDNN",
       std::to_string(cudnn / 10000) + "." + std::to_string(cudnn % 10000 / 100) + "." + std::to_string(cudnn % 100));
  int nccl = 0;
  ncclGetVersion(&nccl);
  Line("NCCL",
       std::to_string(nccl / 10000) + "." + std::to_string(nccl % 10000 / 100) + "." + std::to_string(nccl % 100));
  if (driver != 0 && driver < runtime) {
    Line("compatibility", "BROKEN: driver supports CUDA " + VersionString(driver, 1000, 10) + " < runtime " +
                              VersionString(runtime, 1000, 10) + " (upgrade the NVIDIA driver)");
    broken = true;
  } else if (driver != 0) {
    Line("compatibility", "ok (driver >= runtime)");
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    Line("GPUs", std::string("none: ") + cudaGetErrorString(e) + " — dtrain will train on the CPU");
    n = 0;
  } else {
    Line("GPUs", std::to_string(n) + " visible");
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, i);
    char buf[sizeof(p.name) + 64];  // the name and the numbers after it
    std::snprintf(buf, sizeof(buf), "%s, sm_%d%d, %.1f GiB, %d SMs", p.name, p.major, p.minor,
                  p.totalGlobalMem / double(1ull << 30), p.multiProcessorCount);
    Line(("GPU " + std::to_string(i)).c_str(), buf);
    double rel = 0, tflops = 0;
    Status st = CheckGemm(i, &rel, &tflops);
    if (!st.ok()) {
      Line("  GEMM check", "FAILED: " + st.ToString());
      broken = true;
    } else {
      // fp32 GEMM vs the CPU: both accumulate in fp32, so agreement is ~1e-6 relative.
      const bool ok = rel < 1e-4;
      std::snprintf(buf, sizeof(buf), "%s: rel. error %.2e vs CPU, %.1f TFLOP/s fp32 (256x384x512)",
                    ok ? "ok" : "WRONG", rel, tflops);
      Line("  GEMM check", buf);
      broken |= !ok;
    }
  }
#else
  Line("CUDA", "not built (DT_WITH_CUDA=OFF): CPU training only");
#endif
  std::printf("%s\n", broken ? "doctor: problems found (see above)" : "doctor: ok");
  return broken ? Status::FailedPrecondition("dtrain doctor found problems") : Status::OK();
}

}  // namespace dtrain::launcher
