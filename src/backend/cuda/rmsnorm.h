// RMSNorm (+ fused residual add), the CUDA counterpart of ds::cpu::RmsNorm.
// If residual != nullptr: residual[i] += x[i] (in place, fp32), then out = norm(residual);
// else out = norm(x). norm(v) = v / sqrt(mean(v^2) + eps) * weight, computed in fp32
// (transformers DeepseekV3RMSNorm). out is fp32 or bf16 and may alias x (fp32). out_bf16
// (optional, fp32 out only): also writes bf16(out) there (the runner's F32ToBf16 of the norm
// output, fused; the same __float2bfloat16_rn of the same fp32 value).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemm.h"  // DTypeOut

namespace ds::cuda {

struct RmsNormParams {
  const float* x; int64_t ldx;     // [n, d]
  float* residual; int64_t ldres;  // [n, d] or nullptr
  const float* weight;             // [d]
  void* out; int64_t ldout;        // [n, d], dtype out_type
  DTypeOut out_type = DTypeOut::kF32;
  int64_t n, d;
  float eps;
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Same results either way.
  bool pdl = false;
  void* out_bf16 = nullptr; int64_t ld_out_bf16 = 0;  // [n, d] bf16 or nullptr
};
void RmsNorm(const RmsNormParams& p);

}  // namespace ds::cuda
