// NvmlSampler (nvml_sampler.h): NVML by dlopen, sampled on a thread.
#include "tools/nvml_sampler.h"

#include <dlfcn.h>

namespace ds::tools {

NvmlSampler::NvmlSampler(const std::string& pci_bus_id) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) return;
  auto init = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
  auto by_pci = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
  energy_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(dlsym(lib_, "nvmlDeviceGetTotalEnergyConsumption"));
  clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
  power_ = reinterpret_cast<int (*)(void*, unsigned*)>(dlsym(lib_, "nvmlDeviceGetPowerUsage"));
  if (init == nullptr || by_pci == nullptr || energy_ == nullptr || clock_ == nullptr || power_ == nullptr ||
      init() != 0)
    return;
  void* dev = nullptr;
  if (by_pci(pci_bus_id.c_str(), &dev) != 0) return;
  Sample s{};
  dev_ = dev;
  if (!Read(s)) dev_ = nullptr;  // e.g. a GPU without the energy counter
}

NvmlSampler::~NvmlSampler() {
  if (th_.joinable()) Stop();
  if (lib_ != nullptr) {
    if (auto shutdown = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlShutdown"))) shutdown();
    dlclose(lib_);
  }
}

bool NvmlSampler::Read(Sample& s) const {
  s.t_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  return energy_(dev_, &s.mj) == 0 && clock_(dev_, 1 /* NVML_CLOCK_SM */, &s.sm_mhz) == 0 && power_(dev_, &s.power_mw) == 0;
}

void NvmlSampler::Start(int period_ms) {
  samples_.clear();
  if (!ok() || th_.joinable()) return;
  t0_ = std::chrono::steady_clock::now();
  run_ = true;
  th_ = std::thread([this, period_ms] {
    while (run_.load()) {
      Sample s{};
      if (Read(s)) samples_.push_back(s);
      std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
    }
  });
}

std::vector<NvmlSampler::Sample> NvmlSampler::Stop() {
  run_ = false;
  if (th_.joinable()) th_.join();
  return samples_;
}

}  // namespace ds::tools
