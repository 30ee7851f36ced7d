// Properties of the current CUDA device that kernel launchers plan with (SM count for split and
// wave sizing, whether sm_90a kernels can run). Queried once per device ordinal and cached;
// thread-safe. Errors: a failed CUDA query throws CheckError (DS_CUDA_CHECK); an ordinal >= 64
// is a CheckError.
#pragma once

namespace ds::cuda {

struct DeviceProps {
  int sms = 0;        // streaming multiprocessors
  int major = 0;      // compute capability
  int minor = 0;
  bool sm90 = false;  // compute capability 9.0: the sm_90a kernels (wgmma, TMA) can run
};

// The device current on the calling thread (cudaGetDevice).
const DeviceProps& CurrentDeviceProps();

}  // namespace ds::cuda
