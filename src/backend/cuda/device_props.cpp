#include "backend/cuda/device_props.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "common/logging.h"

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

int SetSmemCarveout(const void* func, int percent, int blocks_per_sm, size_t dyn_smem) {
  static std::mutex mu;
  // (device, kernel, percent asked, blocks a SM, dynamic bytes) -> the percent to set; and
  // (device, kernel) -> the percent in effect (absent: never set, the driver's choice).
  static auto* decided = new std::map<std::tuple<int, const void*, int, int, size_t>, int>();
  static auto* applied = new std::map<std::pair<int, const void*>, int>();
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, func, percent, blocks_per_sm, dyn_smem);
  auto d = decided->find(key);
  if (d == decided->end()) {
    int want = percent < 0 ? -1 : std::min(percent, 100);
    if (want >= 0) {
      cudaFuncAttributes attr{};
      DS_CUDA_CHECK(cudaFuncGetAttributes(&attr, func));
      int per_sm = 0, reserve = 0;
      DS_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
      DS_CUDA_CHECK(cudaDeviceGetAttribute(&reserve, cudaDevAttrReservedSharedMemoryPerBlock, dev));
      const size_t need = static_cast<size_t>(std::max(blocks_per_sm, 1)) *
                          (dyn_smem + attr.sharedSizeBytes + static_cast<size_t>(reserve));
      if (need > static_cast<size_t>(per_sm) * static_cast<size_t>(want) / 100) {
        DS_LOG(INFO) << "shared-memory carveout " << want << "% not applied: " << blocks_per_sm << " block(s) of "
                     << need / std::max(blocks_per_sm, 1) << " bytes do not fit it (" << per_sm << " bytes a SM)";
        want = -1;
      }
    }
    d = decided->emplace(key, want).first;
  }
  const int want = d->second;
  auto a = applied->find({dev, func});
  const int have = a == applied->end() ? -1 : a->second;
  if (want != have) {
    DS_CUDA_CHECK(cudaFuncSetAttribute(func, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       want < 0 ? static_cast<int>(cudaSharedmemCarveoutDefault) : want));
    (*applied)[{dev, func}] = want;
  }
  return want;
}

}  // namespace ds::cuda
