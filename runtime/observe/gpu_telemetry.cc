#include "runtime/observe/gpu_telemetry.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>

#if DT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dtrain::runtime {

// NVML's ABI for the calls used here (nvml.h, driver 450 and later).
namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct NvmlUtilization {
  unsigned int gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
// nvmlMemory_v2_t: "used" without the driver's reserved memory, as nvidia-smi reports it.
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
constexpr unsigned int kNvmlMemoryV2Version = sizeof(NvmlMemoryV2) | (2u << 24);
constexpr int kNvmlTemperatureGpu = 0;
constexpr int kNvmlClockSm = 1;
// Clocks-event (throttle) reason bits that mean "slowed down", and their names.
constexpr std::pair<uint64_t, const char*> kReasons[] = {{0x4, "power cap"},
                                                         {0x8, "hardware slowdown"},
                                                         {0x20, "thermal (software)"},
                                                         {0x40, "thermal (hardware)"},
                                                         {0x80, "power brake"}};
}  // namespace

struct GpuTelemetry::Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, NvmlUtilization*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, NvmlMemory*) = nullptr;
  nvmlReturn_t (*memory_v2)(nvmlDevice_t, NvmlMemoryV2*) = nullptr;  // null on drivers before 510
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*throttle)(nvmlDevice_t, unsigned long long*) = nullptr;
  ~Nvml() {
    if (shutdown != nullptr) shutdown();
    if (lib != nullptr) dlclose(lib);
  }
};

std::string GpuWindow::ThrottleText() const {
  std::string out;
  for (const auto& [bit, name] : kReasons) {
    if (throttle & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

Status GpuTelemetry::Start(const std::string& pci_bus_id, double period_s, std::unique_ptr<GpuTelemetry>* out) {
  auto nvml = std::make_unique<Nvml>();
  nvml->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml->lib == nullptr) {
    return Status::Unavailable("GPU telemetry off: NVML (libnvidia-ml.so.1, part of the NVIDIA driver) not found");
  }
  auto sym = [&](const char* name, auto* fn) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(nvml->lib, name));
    return *fn != nullptr;
  };
  bool ok = sym("nvmlInit_v2", &nvml->init) && sym("nvmlShutdown", &nvml->shutdown) &&
            sym("nvmlErrorString", &nvml->error_string) && sym("nvmlDeviceGetHandleByPciBusId_v2", &nvml->by_pci) &&
            sym("nvmlDeviceGetUtilizationRates", &nvml->utilization) && sym("nvmlDeviceGetMemoryInfo", &nvml->memory) &&
            sym("nvmlDeviceGetPowerUsage", &nvml->power) && sym("nvmlDeviceGetTemperature", &nvml->temperature) &&
            sym("nvmlDeviceGetClockInfo", &nvml->clock);
  // Renamed in newer drivers; either name has the same signature.
  ok = ok && (sym("nvmlDeviceGetCurrentClocksEventReasons", &nvml->throttle) ||
              sym("nvmlDeviceGetCurrentClocksThrottleReasons", &nvml->throttle));
  if (!ok) return Status::Unavailable("GPU telemetry off: this NVML lacks a function dtrain reads");
  sym("nvmlDeviceGetMemoryInfo_v2", &nvml->memory_v2);
  auto shutdown = nvml->shutdown;
  nvml->shutdown = nullptr;  // only once initialized
  if (nvmlReturn_t r = nvml->init(); r != kNvmlSuccess) {
    return Status::Unavailable(std::string("GPU telemetry off: nvmlInit: ") + nvml->error_string(r));
  }
  nvml->shutdown = shutdown;
  std::unique_ptr<GpuTelemetry> t(new GpuTelemetry());  // private constructor
  if (nvmlReturn_t r = nvml->by_pci(pci_bus_id.c_str(), &t->device_); r != kNvmlSuccess) {
    return Status::Unavailable("GPU telemetry off: NVML does not know GPU " + pci_bus_id + ": " +
                               nvml->error_string(r));
  }
  t->nvml_ = std::move(nvml);
  t->period_s_ = std::max(0.05, period_s);
  t->SampleOnce();  // a first sample now: a short window is not empty
  t->thread_ = std::thread([p = t.get()] { p->Loop(); });
  *out = std::move(t);
  return Status::OK();
}

Status GpuTelemetry::StartForCudaDevice(int device, double period_s, std::unique_ptr<GpuTelemetry>* out) {
#if DT_HAVE_CUDA
  char bus[32];
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess) {
    return Status::Unavailable("GPU telemetry off: no PCI bus id for CUDA device " + std::to_string(device));
  }
  return Start(bus, period_s, out);
#else
  return Status::Unavailable("GPU telemetry off: built without CUDA");
#endif
}

GpuTelemetry::~GpuTelemetry() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuTelemetry::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::duration<double>(period_s_), [this] { return stop_; })) {
    lock.unlock();
    SampleOnce();
    lock.lock();
  }
}

void GpuTelemetry::SampleOnce() {
  NvmlUtilization u{};
  NvmlMemory m{};
  unsigned int mw = 0, temp = 0, sm = 0;
  unsigned long long reasons = 0;
  NvmlMemoryV2 m2{};
  m2.version = kNvmlMemoryV2Version;
  if (nvml_->memory_v2 != nullptr && nvml_->memory_v2(device_, &m2) == kNvmlSuccess) {
    m.total = m2.total;
    m.used = m2.used;
  } else if (nvml_->memory(device_, &m) != kNvmlSuccess) {
    return;
  }
  const bool ok = nvml_->utilization(device_, &u) == kNvmlSuccess;
  if (!ok) return;  // a sample the driver could not give is skipped, not zero
  const bool have_power = nvml_->power(device_, &mw) == kNvmlSuccess;
  nvml_->temperature(device_, kNvmlTemperatureGpu, &temp);
  nvml_->clock(device_, kNvmlClockSm, &sm);
  nvml_->throttle(device_, &reasons);
  std::lock_guard<std::mutex> lock(mu_);
  GpuWindow& w = window_;
  ++w.samples;
  w.util_pct += u.gpu;
  w.mem_util_pct += u.memory;
  w.mem_used_mib = std::max(w.mem_used_mib, m.used / 1048576.0);
  w.mem_total_mib = m.total / 1048576.0;
  w.power_w += have_power ? mw / 1000.0 : 0;
  w.temp_c = std::max(w.temp_c, static_cast<double>(temp));
  w.sm_clock_mhz += sm;
  w.throttle |= reasons;
}

GpuWindow GpuTelemetry::TakeWindow() {
  bool empty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    empty = window_.samples == 0;
  }
  if (empty) SampleOnce();  // a window shorter than the period still gets the GPU's current reading
  std::lock_guard<std::mutex> lock(mu_);
  GpuWindow w = window_;
  window_ = GpuWindow();
  if (w.samples > 0) {
    w.util_pct /= w.samples;
    w.mem_util_pct /= w.samples;
    w.power_w /= w.samples;
    w.sm_clock_mhz /= w.samples;
  }
  return w;
}

}  // namespace dtrain::runtime
