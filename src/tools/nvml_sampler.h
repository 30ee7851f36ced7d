// NVML through dlopen (libnvidia-ml.so.1, the driver's; nothing to link): the GPU's cumulative
// energy counter, SM clock and power draw, sampled by a background thread while a benchmark loop
// runs. For `bench kernels`' soak A/B (DS_BENCH_MLA_SOAK): the H200 holds its 700 W cap under the
// MLA decode (sessions 19 and 40), so the clock, and with it a kernel's time, follows the energy a
// launch needs; a short timing burst reads whatever clock the last burst left (1.0-1.5 GHz from pass
// to pass in session 41 run 1). Source of the calls: NVML API reference (nvmlDeviceGetTotalEnergyConsumption:
// mJ since the driver was loaded; nvmlDeviceGetClockInfo with NVML_CLOCK_SM = 1: MHz;
// nvmlDeviceGetPowerUsage: mW). Host-only; absent NVML -> ok() false and no samples.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace ds::tools {

class NvmlSampler {
 public:
  struct Sample {
    double t_s;              // seconds since Start()
    unsigned long long mj;   // cumulative energy, mJ
    unsigned sm_mhz;         // SM clock
    unsigned power_mw;       // power draw
  };
  // pci_bus_id: cudaDeviceGetPCIBusId's string for the device timed.
  explicit NvmlSampler(const std::string& pci_bus_id);
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;
  bool ok() const { return dev_ != nullptr; }
  // Samples every period_ms on a thread until Stop(); Stop() returns them in time order.
  void Start(int period_ms);
  std::vector<Sample> Stop();

 private:
  bool Read(Sample& s) const;
  void* lib_ = nullptr;
  void* dev_ = nullptr;
  int (*energy_)(void*, unsigned long long*) = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*power_)(void*, unsigned*) = nullptr;
  std::thread th_;
  std::atomic<bool> run_{false};
  std::vector<Sample> samples_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace ds::tools
