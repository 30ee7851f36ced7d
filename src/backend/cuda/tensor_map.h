// The CUDA driver's cuTensorMapEncodeTiled (TMA tensor maps), looked up once through the runtime's
// driver entry point so that the build links no libcuda. Host only. Source: CUDA driver API,
// cuTensorMapEncodeTiled; CUDA runtime API, cudaGetDriverEntryPointByVersion.
// Errors: CheckError when the driver has no such entry point.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace ds::cuda {

inline PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncodeFn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    DS_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q));
    DS_CHECK(q == cudaDriverEntryPointSuccess && ptr != nullptr) << "cuTensorMapEncodeTiled not in the driver";
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

}  // namespace ds::cuda
