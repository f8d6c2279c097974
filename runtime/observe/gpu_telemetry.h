#pragma once
// GpuTelemetry: what the GPU itself says while a run trains — utilization, memory, power, temperature, SM clock
// and throttle reasons — read through NVML (the driver's management library) by a background thread every
// `period_s`, and summarized per logging window (TakeWindow). NVML is loaded at run time (dlopen of
// libnvidia-ml.so.1, which the NVIDIA driver installs): nothing links it, so CPU-only builds and machines are
// unaffected, and Start() on a machine without it is Unavailable with one line saying so. (The few NVML types
// used are declared in the .cc: the CUDA toolkit does not ship nvml.h, and the NVML ABI of these calls is stable.)
//
// Thread-safety: Start/TakeWindow/destructor from one thread; the sampler thread is internal.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"

namespace dtrain::runtime {

// One window's summary (means over its samples unless said otherwise). samples == 0: nothing was read.
struct GpuWindow {
  int samples = 0;
  double util_pct = 0;      // GPU busy (a kernel running), mean
  double mem_util_pct = 0;  // memory controller busy, mean
  double mem_used_mib = 0;  // max
  double mem_total_mib = 0;
  double power_w = 0;       // mean
  double temp_c = 0;        // max
  double sm_clock_mhz = 0;  // mean
  uint64_t throttle = 0;    // OR of NVML's clocks-event reasons seen in the window
  // "power", "thermal", "power, thermal"...: the reasons in `throttle` that slow the GPU down; empty when none.
  std::string ThrottleText() const;
};

class GpuTelemetry {
 public:
  // Samples the GPU whose PCI bus id is `pci_bus_id` (cudaDeviceGetPCIBusId's form, e.g. "0000:17:00.0"; NVML and
  // CUDA number GPUs differently) every `period_s` seconds. Unavailable when NVML cannot be loaded or does not know
  // that GPU (the message says which).
  static Status Start(const std::string& pci_bus_id, double period_s, std::unique_ptr<GpuTelemetry>* out);
  // The same for CUDA device `device` of this process (its PCI bus id from the CUDA runtime). Unavailable in a
  // build without CUDA.
  static Status StartForCudaDevice(int device, double period_s, std::unique_ptr<GpuTelemetry>* out);
  ~GpuTelemetry();
  GpuTelemetry(const GpuTelemetry&) = delete;
  GpuTelemetry& operator=(const GpuTelemetry&) = delete;

  // The summary of the samples since the last call (or Start), and a new window begins. A window without a sample
  // (shorter than the period) takes one now.
  GpuWindow TakeWindow();

  struct Nvml;  // the loaded library (gpu_telemetry.cc)

 private:
  GpuTelemetry() = default;
  void Loop();
  void SampleOnce();

  std::unique_ptr<Nvml> nvml_;
  void* device_ = nullptr;  // nvmlDevice_t
  double period_s_ = 1.0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  GpuWindow window_;  // guarded by mu_; sums until TakeWindow turns them into means
  std::thread thread_;
};

}  // namespace dtrain::runtime
