// Properties of the current CUDA device that kernel launchers plan with (SM count for split and
// wave sizing, whether sm_90a kernels can run). Queried once per device ordinal and cached;
// thread-safe. Errors: a failed CUDA query throws CheckError (DS_CUDA_CHECK); an ordinal >= 64
// is a CheckError.
#pragma once

#include <cstddef>

namespace ds::cuda {

struct DeviceProps {
  int sms = 0;        // streaming multiprocessors
  int major = 0;      // compute capability
  int minor = 0;
  bool sm90 = false;  // compute capability 9.0: the sm_90a kernels (wgmma, TMA) can run
};

// The device current on the calling thread (cudaGetDevice).
const DeviceProps& CurrentDeviceProps();

// Raises cudaFuncAttributeMaxDynamicSharedMemorySize of kernel `func` to at least `bytes` on the
// current device. Function attributes are per device: a process that drives several GPUs
// (data-parallel rank r on GPU r) must set them on each, so a process-wide "done once" flag
// leaves every device but the first at the 48 KiB default (launches then fail with "invalid
// argument"). Calls the driver once per (device, function, larger size); thread-safe.
// Errors: a failed CUDA call throws CheckError.
void EnsureMaxDynamicSmem(const void* func, int bytes);

// Sets the kernel's preferred shared-memory carveout (cudaFuncAttributePreferredSharedMemoryCarveout:
// percent of the SM's shared memory, 0..100) on the current device, where `blocks_per_sm` blocks
// of `dyn_smem` bytes (plus the kernel's static shared memory and the driver's reserve a block)
// fit in that percent; otherwise, and for a negative percent, the driver's choice
// (cudaSharedmemCarveoutDefault), so a hint never lowers the occupancy a cooperative launch
// counted on. The attribute is the kernel's for the whole process: the driver is called only when
// the value in effect changes (per device and kernel). Thread-safe. Returns the percent in effect
// (-1: the driver's choice). Errors: a failed CUDA call throws CheckError.
int SetSmemCarveout(const void* func, int percent, int blocks_per_sm, size_t dyn_smem);

}  // namespace ds::cuda
