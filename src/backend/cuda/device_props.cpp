#include "backend/cuda/device_props.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace ds::cuda {

const DeviceProps& CurrentDeviceProps() {
  constexpr int kMaxDevices = 64;
  static DeviceProps cache[kMaxDevices];
  static bool done[kMaxDevices] = {};
  static std::mutex mu;
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  DS_CHECK(dev >= 0 && dev < kMaxDevices) << "CUDA device ordinal " << dev << " (at most " << kMaxDevices << ")";
  std::lock_guard<std::mutex> lock(mu);
  if (!done[dev]) {
    DeviceProps& d = cache[dev];
    DS_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
    DS_CUDA_CHECK(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev));
    DS_CUDA_CHECK(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, dev));
    d.sm90 = d.major == 9 && d.minor == 0;
    done[dev] = true;
  }
  return cache[dev];
}

void EnsureMaxDynamicSmem(const void* func, int bytes) {
  static std::mutex mu;
  static auto* set = new std::map<std::pair<int, const void*>, int>();  // (device, kernel) -> bytes set
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  int& have = (*set)[{dev, func}];
  if (have >= bytes) return;
  DS_CUDA_CHECK(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  have = bytes;
}

void SetSmemCarveout(const void* func, int percent) {
  if (percent < 0) return;
  static std::mutex mu;
  static auto* set = new std::map<std::pair<int, const void*>, int>();  // (device, kernel) -> percent set
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = set->find({dev, func});
  if (it != set->end() && it->second == percent) return;
  DS_CUDA_CHECK(cudaFuncSetAttribute(func, cudaFuncAttributePreferredSharedMemoryCarveout, std::min(percent, 100)));
  (*set)[{dev, func}] = percent;
}

}  // namespace ds::cuda
